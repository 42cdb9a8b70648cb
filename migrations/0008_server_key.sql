-- 0008 the server key (ADR 0015): the key every node of this database shares, kept in a file
-- outside the database, keys the digests of request bodies that may hold protected values and
-- seals the fill values of delegated plans. A copy of the database alone reverses or opens none.

-- The public id of the server key (derived one-way: it reveals nothing of the key). The first node
-- records it; a node started with another key refuses to start, rather than write fingerprints
-- and seals the others cannot check or open.
CREATE TABLE server_key (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    key_id     text NOT NULL CHECK (key_id ~ '^sk_[0-9a-f]{16}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Idempotency fingerprints are HMAC-SHA256 under the server key. Records written before this
-- migration hold unkeyed SHA-256 fingerprints ('sha256'): a retry is compared with them by its
-- unkeyed fingerprint until they expire (one idempotency retention, 24 h by default). Writers
-- that do not name a scheme (a node of the previous release during a rolling upgrade) write
-- unkeyed ones, so the default stays 'sha256'.
ALTER TABLE idempotency_record
    ADD COLUMN request_hash_scheme text NOT NULL DEFAULT 'sha256'
        CHECK (request_hash_scheme IN ('sha256', 'hmac-sha256'));

-- A delegated plan step's protected values (what a fill types), sealed with AES-256-GCM under the
-- server key for that step alone; its args hold them masked. NULL: the step has none.
ALTER TABLE task_plan_step
    ADD COLUMN sealed_values bytea CHECK (sealed_values IS NULL OR octet_length(sealed_values) >= 37);

-- Digests of held actions are HMACs now. The unkeyed ones recorded before are dropped: nothing
-- compares them once the action ran or was denied, and an unkeyed digest of an action that typed
-- a 4-digit PIN gives that PIN away to whoever tries the 10 000.
UPDATE approval_request SET action_digest = NULL WHERE action_digest IS NOT NULL;
COMMENT ON COLUMN approval_request.action_digest IS
    'HMAC-SHA256 under the server key (ADR 0015) of the held action: operation, session, context and arguments';
