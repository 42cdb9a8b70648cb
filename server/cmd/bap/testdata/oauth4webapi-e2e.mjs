// End-to-end check of the remote profile with a certified OAuth client library (oauth4webapi,
// pinned in tools/package.json): RFC 8414 discovery, client credentials, RFC 9068 validation of
// the access token as a resource server would, authorization code + PKCE (S256) through the login
// page with RFC 9207 iss validation, refresh rotation, introspection and revocation.
// Run by server/cmd/bap/serve_remote_test.go; inputs come from the environment.
import { pathToFileURL } from 'node:url';

const oauth = await import(pathToFileURL(process.env.OAUTH4WEBAPI).href);
const env = (k) => {
  if (!process.env[k]) throw new Error(`missing ${k}`);
  return process.env[k];
};
const base = env('BASE');
const insecure = { [oauth.allowInsecureRequests]: true };
const results = {};
const step = (name, value) => {
  results[name] = value;
};

const issuer = new URL(base);
const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
step('discovery', as.issuer === base && as.authorization_response_iss_parameter_supported === true);

// Client credentials.
const cc = { client_id: env('CC_ID') };
const ccAuth = oauth.ClientSecretBasic(env('CC_SECRET'));
const ccResp = await oauth.clientCredentialsGrantRequest(as, cc, ccAuth, new URLSearchParams({ resource: base, scope: 'bap:tasks.read' }), insecure);
const ccTokens = await oauth.processClientCredentialsResponse(as, cc, ccResp);
step('client_credentials', ccTokens.token_type === 'bearer' && ccTokens.scope === 'bap:tasks.read' && ccTokens.expires_in > 0);

const asResourceServer = async (token) => {
  const req = new Request(`${base}/bap/v1/tasks/tsk_none`, { headers: { authorization: `Bearer ${token}` } });
  return oauth.validateJwtAccessToken(as, req, base, insecure);
};
const claims = await asResourceServer(ccTokens.access_token);
step('rfc9068_valid', claims.client_id === cc.client_id && claims.iss === base && claims.sub === cc.client_id);
const api = await fetch(`${base}/bap/v1/tasks/tsk_none`, { headers: { authorization: `Bearer ${ccTokens.access_token}` } });
step('api_accepts', api.status === 404);

// Introspection and revocation (RFC 7662, RFC 7009).
const intro = await oauth.processIntrospectionResponse(as, cc, await oauth.introspectionRequest(as, cc, ccAuth, ccTokens.access_token, insecure));
step('introspection_active', intro.active === true && intro.client_id === cc.client_id);
await oauth.processRevocationResponse(await oauth.revocationRequest(as, cc, ccAuth, ccTokens.access_token, insecure));
const afterRevoke = await fetch(`${base}/bap/v1/tasks/tsk_none`, { headers: { authorization: `Bearer ${ccTokens.access_token}` } });
step('revoked_rejected', afterRevoke.status === 401 && (afterRevoke.headers.get('www-authenticate') || '').includes('resource_metadata='));

// Authorization code + PKCE through the login page.
const ac = { client_id: env('AC_ID') };
const redirectUri = env('REDIRECT');
const verifier = oauth.generateRandomCodeVerifier();
const challenge = await oauth.calculatePKCECodeChallenge(verifier);
const state = oauth.generateRandomState();
const authURL = new URL(as.authorization_endpoint);
for (const [k, v] of Object.entries({
  client_id: ac.client_id, redirect_uri: redirectUri, response_type: 'code', scope: 'bap:tasks.read bap:tasks.write',
  code_challenge: challenge, code_challenge_method: 'S256', state, resource: base,
})) authURL.searchParams.set(k, v);
const page = await fetch(authURL);
const html = await page.text();
step('login_page', page.status === 200 && html.includes('<label for="password">'));
// Post the page's form as a browser would: its hidden fields plus name, password and the decision.
const form = new URLSearchParams();
for (const m of html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) {
  form.append(m[1], m[2].replaceAll('&amp;', '&').replaceAll('&#43;', '+').replaceAll('&#34;', '"').replaceAll('&#39;', "'"));
}
form.set('username', env('PERSON'));
form.set('password', env('PASSWORD'));
form.set('decision', 'allow');
const posted = await fetch(new URL('/oauth2/auth', base), { method: 'POST', body: form, redirect: 'manual' });
const location = new URL(posted.headers.get('location'));
const params = oauth.validateAuthResponse(as, ac, location, state); // checks iss (RFC 9207) and state
step('authorization_response', posted.status >= 300 && posted.status < 400 && params.has('code'));
const codeResp = await oauth.authorizationCodeGrantRequest(as, ac, oauth.None(), params, redirectUri, verifier,
  { ...insecure, additionalParameters: { resource: base } });
const codeTokens = await oauth.processAuthorizationCodeResponse(as, ac, codeResp);
const personClaims = await asResourceServer(codeTokens.access_token);
step('code_flow_token', personClaims.sub.startsWith('usr_') && typeof codeTokens.refresh_token === 'string');

const refreshed = await oauth.processRefreshTokenResponse(as, ac,
  await oauth.refreshTokenGrantRequest(as, ac, oauth.None(), codeTokens.refresh_token, insecure));
step('refresh_rotates', refreshed.refresh_token !== codeTokens.refresh_token && (await asResourceServer(refreshed.access_token)).sub === personClaims.sub);
let reuse = 'accepted';
try {
  await oauth.processRefreshTokenResponse(as, ac, await oauth.refreshTokenGrantRequest(as, ac, oauth.None(), codeTokens.refresh_token, insecure));
} catch (e) {
  reuse = e.error || e.code || String(e);
}
step('refresh_reuse_rejected', reuse === 'invalid_grant');

process.stdout.write(JSON.stringify(results) + '\n');
process.exit(Object.values(results).every((v) => v === true) ? 0 : 1);
