-- 0023 one unique index on idempotency_record (issue #25 item 1). UNIQUE (tenant_id,
-- idempotency_key, operation) is implied by the primary key (tenant_id, idempotency_key): no two
-- rows can share the three when they cannot share the first two. No foreign key references it and
-- no statement needs it (a record is read by its key, through the primary key), yet every command
-- paid for it: a second unique index entry, with its uniqueness probe, for every claimed key. The
-- rule it stated is the primary key's, which stays.
ALTER TABLE idempotency_record DROP CONSTRAINT idempotency_record_tenant_id_idempotency_key_operation_key;
