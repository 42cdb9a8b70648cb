// Package auth is the OAuth 2.0 authorization server and resource-server check of the remote
// profile, built on ory/fosite v0.49 with PostgreSQL storage of its own (migrations/0003_oauth.sql):
//
//   - clients (client credentials for workloads, authorization code + PKCE S256 for people),
//     people who sign in on a minimal login and consent page, refresh tokens with rotation and
//     reuse detection, RFC 7662 introspection, RFC 7009 revocation, RFC 8414 and RFC 9728 metadata;
//   - JWT access tokens (RFC 9068, `typ: at+jwt`, ES256) at most 15 minutes long, audience-bound
//     to this server's resource URL (RFC 8707 `resource`; any other resource → invalid_target),
//     signed by keys the server generates and rotates itself (JWKS keeps retired keys published
//     until their tokens have expired);
//   - Server.VerifyAccessToken, the resource-server check every request of the remote profile
//     passes (signature, typ, issuer, audience, expiry, not-before, revocation);
//   - the audit trail of authorization decisions (Audit) and the administrative operations of
//     `bap client create|revoke` and `bap user create`.
//
// A token, a client secret or a password never leaves this package except to the party it belongs
// to (the token response, the CLI's one-time secret output); nothing here logs one.
//
// auth is an adapter: it may import app (for Credential and AuthDecision), the core, pgx, fosite
// and go-jose, and never a transport (api, …), generated code or the composition root. It owns
// its tables; the store does not know them.
package auth
