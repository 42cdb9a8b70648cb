-- 0003 oauth: the authorization server of the remote profile (server/internal/auth): OAuth clients,
-- people who sign in, the server's signing keys, token sessions (authorization codes, access and
-- refresh tokens, PKCE requests) and the audit trail of authorization decisions.
-- Secrets are never stored in the clear: client secrets as SHA-256 (they are 256-bit random values),
-- passwords as argon2id PHC strings, token sessions under the SHA-256 of the token's signature part.

-- An OAuth client of a tenant, registered with `bap client create`, disabled with `bap client revoke`.
CREATE TABLE oauth_client (
    tenant_id   text NOT NULL REFERENCES tenant_account (tenant_id),
    client_id   text PRIMARY KEY CHECK (client_id ~ '^cli_[A-Za-z0-9_-]{1,64}$'),
    name        text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    grant_type  text NOT NULL CHECK (grant_type IN ('client_credentials', 'authorization_code')),
    -- NULL for a public client (authorization code + PKCE without a secret).
    secret_hash bytea CHECK (secret_hash IS NULL OR octet_length(secret_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    UNIQUE (tenant_id, client_id),
    -- A workload authenticates with its secret; only a people-facing client may be public.
    CHECK (grant_type = 'authorization_code' OR secret_hash IS NOT NULL)
);

-- The capabilities a client may hold (CONTRACT "Capabilities"), one row per scope.
CREATE TABLE oauth_client_scope (
    tenant_id text NOT NULL,
    client_id text NOT NULL,
    scope     text NOT NULL CHECK (scope IN ('bap:tasks.read', 'bap:tasks.write', 'bap:browser.observe',
                  'bap:browser.act', 'bap:approvals.request', 'bap:approvals.resolve', 'bap:artifacts.read',
                  'bap:events.read')),
    PRIMARY KEY (client_id, scope),
    FOREIGN KEY (tenant_id, client_id) REFERENCES oauth_client (tenant_id, client_id) ON DELETE CASCADE
);

-- Registered redirect URIs of an authorization-code client (exact match).
CREATE TABLE oauth_client_redirect (
    tenant_id    text NOT NULL,
    client_id    text NOT NULL,
    redirect_uri text NOT NULL CHECK (char_length(redirect_uri) BETWEEN 1 AND 2000 AND redirect_uri ~ '^https?://'),
    PRIMARY KEY (client_id, redirect_uri),
    FOREIGN KEY (tenant_id, client_id) REFERENCES oauth_client (tenant_id, client_id) ON DELETE CASCADE
);

-- A person of a tenant who signs in on the login page (authorization code flow).
CREATE TABLE person_account (
    tenant_id     text NOT NULL REFERENCES tenant_account (tenant_id),
    person_id     text PRIMARY KEY CHECK (person_id ~ '^usr_[A-Za-z0-9_-]{1,64}$'),
    name          text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    password_hash text NOT NULL CHECK (password_hash LIKE '$argon2id$%'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    disabled_at   timestamptz,
    UNIQUE (tenant_id, person_id),
    UNIQUE (tenant_id, name)
);

-- The server's token signing keys (server-wide, not per tenant). A key signs while now < sign_until
-- and is published in the JWKS until publish_until (sign_until + the longest token lifetime), so
-- that tokens it signed stay verifiable after a rotation. The private key is PKCS #8 DER.
CREATE TABLE token_signing_key (
    key_id        text PRIMARY KEY CHECK (key_id ~ '^[A-Za-z0-9_-]{8,64}$'),
    algorithm     text NOT NULL CHECK (algorithm = 'ES256'),
    private_key   bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    sign_until    timestamptz NOT NULL,
    publish_until timestamptz NOT NULL,
    CHECK (sign_until > created_at AND publish_until >= sign_until)
);

-- The HMAC secret of authorization codes and refresh tokens (server-wide; one row).
CREATE TABLE authorization_server_secret (
    secret_id  smallint PRIMARY KEY CHECK (secret_id = 1),
    secret     bytea NOT NULL CHECK (octet_length(secret) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One stored OAuth request per issued artefact: an authorization code, an access token, a refresh
-- token or a PKCE challenge. request_id groups the artefacts of one grant (revoking a refresh token
-- revokes its access tokens). The requester JSON holds scopes, audiences, whitelisted form fields and
-- the session (subject, tenant) — never a secret or a token.
CREATE TABLE oauth_token_session (
    kind            text NOT NULL CHECK (kind IN ('authorize_code', 'access_token', 'refresh_token', 'pkce')),
    signature_hash  bytea NOT NULL CHECK (octet_length(signature_hash) = 32),
    request_id      text NOT NULL CHECK (char_length(request_id) BETWEEN 1 AND 100),
    tenant_id       text NOT NULL,
    client_id       text NOT NULL,
    subject         text NOT NULL,
    active          boolean NOT NULL DEFAULT true,
    requested_at    timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    -- For a refresh token: the access token issued with it.
    access_signature_hash bytea CHECK (access_signature_hash IS NULL OR octet_length(access_signature_hash) = 32),
    requester       jsonb NOT NULL CHECK (jsonb_typeof(requester) = 'object'),
    PRIMARY KEY (kind, signature_hash),
    FOREIGN KEY (tenant_id, client_id) REFERENCES oauth_client (tenant_id, client_id) ON DELETE CASCADE
);
CREATE INDEX oauth_token_session_request_idx ON oauth_token_session (request_id);
CREATE INDEX oauth_token_session_client_idx ON oauth_token_session (client_id) WHERE active;
CREATE INDEX oauth_token_session_expiry_idx ON oauth_token_session (expires_at);

-- Audit trail of authorization decisions: refused requests (401/403/429), issued and revoked
-- tokens, sign-ins. tenant_id is NULL only when the caller could not be identified (no or a bad
-- token), which is exactly when no tenant is known.
CREATE TABLE auth_decision (
    decision_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    tenant_id   text REFERENCES tenant_account (tenant_id),
    subject     text NOT NULL DEFAULT '',
    client_id   text NOT NULL DEFAULT '',
    operation   text NOT NULL CHECK (operation ~ '^[a-z0-9_.:-]{1,100}$'),
    task_id     text,
    scope       text NOT NULL DEFAULT '',
    outcome     text NOT NULL CHECK (outcome IN ('allowed', 'refused', 'issued', 'revoked')),
    reason      text NOT NULL DEFAULT '' CHECK (char_length(reason) <= 200)
);
CREATE INDEX auth_decision_time_idx ON auth_decision (occurred_at);
CREATE INDEX auth_decision_tenant_idx ON auth_decision (tenant_id, occurred_at) WHERE tenant_id IS NOT NULL;
