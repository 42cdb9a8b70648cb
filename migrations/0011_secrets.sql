-- 0011 secrets by reference and encryption at rest (issue #17, ADR 0017).

-- The server key (ADR 0015) is a data key now: the database keeps it wrapped (AES-256-GCM) under
-- the master key, which lives in a file and never here. One row per master key that may open it:
-- normally one; two while `bap keys rotate --keep-old` lets a cluster move to a new master key
-- node by node. master_key_id and key_id are one-way ids; wrapped is 69 bytes of ciphertext.
CREATE TABLE server_key_wrap (
    master_key_id text PRIMARY KEY CHECK (master_key_id ~ '^mk_[0-9a-f]{16}$'),
    key_id        text NOT NULL CHECK (key_id ~ '^sk_[0-9a-f]{16}$'),
    wrapped       bytea NOT NULL CHECK (octet_length(wrapped) = 69),
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- The server-wide secret (authorization codes, refresh tokens, node credentials, MCP seals) is
-- sealed under the server key: 32 bytes in clear (written before this release, sealed by the next
-- start) or 69 sealed.
ALTER TABLE authorization_server_secret DROP CONSTRAINT authorization_server_secret_secret_check;
ALTER TABLE authorization_server_secret ADD CONSTRAINT authorization_server_secret_secret_check
    CHECK (octet_length(secret) IN (32, 69));

-- Token signing keys are sealed too (PKCS #8 DER in clear before this release: sealed by the next
-- start). A sealed key starts with the seal's version byte 1, DER with 0x30.
COMMENT ON COLUMN token_signing_key.private_key IS
    'PKCS #8 DER sealed (AES-256-GCM) under the server key (ADR 0017)';

-- A tenant's secrets: a name, the origins the value may be typed into, an optional note, and the
-- value sealed under the server key for this secret and version alone. The value is never read
-- back by any interface; a deleted secret keeps its row (and id) without its value, so a
-- reference to it is refused as deleted, not unknown.
CREATE TABLE tenant_secret (
    tenant_id    text NOT NULL REFERENCES tenant_account (tenant_id),
    secret_id    text PRIMARY KEY CHECK (secret_id ~ '^sec_[A-Za-z0-9_-]{1,64}$'),
    name         text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
    note         text NOT NULL DEFAULT '' CHECK (length(note) <= 1000),
    version      integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    sealed_value bytea CHECK (sealed_value IS NULL OR octet_length(sealed_value) >= 37),
    created_at   timestamptz NOT NULL DEFAULT now(),
    rotated_at   timestamptz,
    deleted_at   timestamptz,
    last_used_at timestamptz,
    use_count    bigint NOT NULL DEFAULT 0 CHECK (use_count >= 0),
    UNIQUE (tenant_id, secret_id),
    CHECK ((deleted_at IS NULL) = (sealed_value IS NOT NULL))
);
CREATE UNIQUE INDEX tenant_secret_live_name ON tenant_secret (tenant_id, name) WHERE deleted_at IS NULL;

-- The origins a secret may be typed into: scheme://host[:port], lower case, as the browser
-- reports a frame's origin.
CREATE TABLE tenant_secret_origin (
    tenant_id text NOT NULL,
    secret_id text NOT NULL,
    origin    text NOT NULL CHECK (origin ~ '^https?://[a-z0-9.-]+(:[0-9]{1,5})?$' OR origin ~ '^https?://\[[0-9a-f:.]+\](:[0-9]{1,5})?$'),
    PRIMARY KEY (secret_id, origin),
    FOREIGN KEY (tenant_id, secret_id) REFERENCES tenant_secret (tenant_id, secret_id) ON DELETE CASCADE
);

-- The audit trail of a secret: who stored, rotated or deleted it, and each use (the origin it was
-- typed into, the task and command). Never the value, nor any digest of it.
CREATE TABLE tenant_secret_audit (
    audit_id   bigserial PRIMARY KEY,
    tenant_id  text NOT NULL,
    secret_id  text NOT NULL,
    action     text NOT NULL CHECK (action IN ('put', 'rotate', 'delete', 'use', 'refuse')),
    actor      text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    origin     text NOT NULL DEFAULT '',
    task_id    text NOT NULL DEFAULT '',
    command_id text NOT NULL DEFAULT '',
    reason     text NOT NULL DEFAULT '' CHECK (length(reason) <= 500),
    at         timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, secret_id) REFERENCES tenant_secret (tenant_id, secret_id)
);
CREATE INDEX tenant_secret_audit_secret_idx ON tenant_secret_audit (tenant_id, secret_id, audit_id);

-- The audit trail is append-only.
CREATE FUNCTION tenant_secret_audit_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'tenant_secret_audit is append-only';
END $$;
CREATE TRIGGER tenant_secret_audit_no_change BEFORE UPDATE OR DELETE ON tenant_secret_audit
    FOR EACH ROW EXECUTE FUNCTION tenant_secret_audit_immutable();
