// Signing in. Local profile: `bap console` printed a one-time URL that left an HttpOnly session
// cookie; /console/session hands this page the session's CSRF token. Remote profile: the
// authorization code flow with PKCE (S256) against this server's own authorization server, as
// the tenant's public console client; the access token lives in memory only.

import { useCredential } from "./api";
import { h } from "./dom";

export interface Config {
  profile: "local" | "remote";
  issuer?: string;
  resource?: string;
  scopes?: string[];
  client_id_prefix?: string;
  csrf_header?: string;
}

export interface Who {
  subject: string;
  tenant: string;
}

const redirectURI = () => `${location.origin}/console/`;

function b64url(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function random(n: number): string {
  return b64url(crypto.getRandomValues(new Uint8Array(n)));
}

async function challenge(verifier: string): Promise<string> {
  return b64url(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier))));
}

/** signIn returns who is signed in, or renders the sign-in page and returns null. */
export async function signIn(cfg: Config, main: HTMLElement): Promise<Who | null> {
  const expired = () => {
    main.replaceChildren(h("h1", {}, "Signed out"), h("p", {}, "Your console session ended. ", signInHint(cfg)));
  };
  if (cfg.profile === "local") {
    const resp = await fetch("/console/session", { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" });
    if (!resp.ok) {
      main.replaceChildren(
        h("h1", {}, "Sign in to the BAP console"),
        h("p", {}, "The console is the operator's. Run ", h("code", {}, "bap console"), " on this machine: it prints a one-time login URL (valid for 5 minutes) that opens your session here."),
      );
      return null;
    }
    const s = (await resp.json()) as { subject: string; tenant: string; csrf_token: string };
    useCredential({ kind: "csrf", header: cfg.csrf_header ?? "X-BAP-CSRF", token: s.csrf_token }, expired);
    return { subject: s.subject, tenant: s.tenant };
  }
  const params = new URLSearchParams(location.search);
  const code = params.get("code");
  if (code) {
    const tok = await redeem(cfg, code, params.get("state") ?? "", params.get("iss") ?? "");
    history.replaceState(null, "", "/console/" + (sessionStorage.getItem("bap.console.return") ?? "#/approvals"));
    if (tok) {
      useCredential({ kind: "bearer", token: tok.token }, expired);
      return tok.who;
    }
  }
  renderRemoteSignIn(cfg, main, params.get("error_description") ?? "");
  return null;
}

function signInHint(cfg: Config): Node {
  if (cfg.profile === "local") return h("span", {}, "Run ", h("code", {}, "bap console"), " for a new login URL.");
  return h("a", { href: "/console/" }, "Sign in again");
}

function renderRemoteSignIn(cfg: Config, main: HTMLElement, error: string): void {
  const tenant = h("input", { id: "tenant", name: "tenant", type: "text", required: true, autocomplete: "organization",
    value: localStorage.getItem("bap.console.tenant") ?? "" });
  const form = h("form", { class: "card" },
    error ? h("p", { class: "bad", role: "alert" }, error) : null,
    h("label", { for: "tenant" }, "Tenant"), tenant,
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary" }, "Sign in")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void start(cfg, tenant.value.trim());
  });
  main.replaceChildren(h("h1", {}, "Sign in to the BAP console"), h("p", {}, "You sign in on this server's own sign-in page; the console never sees your password."), form);
}

async function start(cfg: Config, tenant: string): Promise<void> {
  if (!/^[a-z0-9][a-z0-9_-]{0,55}$/.test(tenant)) return;
  localStorage.setItem("bap.console.tenant", tenant);
  const verifier = random(48);
  const state = random(24);
  sessionStorage.setItem("bap.console.pkce", JSON.stringify({ verifier, state, tenant }));
  sessionStorage.setItem("bap.console.return", location.hash || "#/approvals");
  const q = new URLSearchParams({
    response_type: "code", client_id: (cfg.client_id_prefix ?? "cli_console_") + tenant, redirect_uri: redirectURI(),
    scope: (cfg.scopes ?? []).join(" "), state, code_challenge: await challenge(verifier), code_challenge_method: "S256",
    resource: cfg.resource ?? "",
  });
  location.assign(`/oauth2/auth?${q.toString()}`);
}

async function redeem(cfg: Config, code: string, state: string, iss: string): Promise<{ token: string; who: Who } | null> {
  const saved = sessionStorage.getItem("bap.console.pkce");
  sessionStorage.removeItem("bap.console.pkce");
  if (!saved) return null;
  const p = JSON.parse(saved) as { verifier: string; state: string; tenant: string };
  // The state ties the answer to this browser's request (RFC 6749 §10.12), iss to our issuer (RFC 9207).
  if (p.state !== state || (iss && cfg.issuer && iss !== cfg.issuer)) return null;
  const body = new URLSearchParams({
    grant_type: "authorization_code", code, redirect_uri: redirectURI(), client_id: (cfg.client_id_prefix ?? "cli_console_") + p.tenant,
    code_verifier: p.verifier, resource: cfg.resource ?? "",
  });
  const resp = await fetch("/oauth2/token", { method: "POST", body, headers: { Accept: "application/json" }, credentials: "omit", cache: "no-store" });
  if (!resp.ok) return null;
  const t = (await resp.json()) as { access_token: string };
  const claims = JSON.parse(atob(t.access_token.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/"))) as { sub?: string; tenant?: string };
  // A person's subject is user:<id>, as decisions record it.
  const sub = claims.sub ?? "";
  return { token: t.access_token, who: { subject: sub.includes(":") ? sub : `user:${sub}`, tenant: claims.tenant ?? p.tenant } };
}
