package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// TestInboxRefusesADuplicateDelivery: inbox_event holds one row per (source, delivery id) — the
// database refuses a second, whatever it says — and a row names what its delivery became (a
// forwarded command's idempotency record, or an orchestrator reply's history event), is never
// rewritten and goes with its idempotency record (migrations/0019). Through the store, of several
// concurrent deliveries with one id exactly one is recorded; the others read it as a duplicate.
func TestInboxRefusesADuplicateDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	seedTask(t, ctx, db, "tsk_in")
	for _, q := range []string{
		`INSERT INTO idempotency_record (tenant_id, idempotency_key, operation, request_hash, state, command_id, expires_at)
			VALUES ('local', 'k-1', 'navigate', decode(repeat('ab', 32), 'hex'), 'in_flight', 'cmd_in1', now() + interval '1 hour'),
			       ('local', 'k-2', 'navigate', decode(repeat('ab', 32), 'hex'), 'in_flight', 'cmd_in2', now() + interval '1 hour')`,
		`INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key)
			VALUES ('node:node_a', 'cred-1', 'local', decode(repeat('01', 32), 'hex'), 'k-1')`,
		`INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, task_id, event_seq)
			VALUES ('orchestrator', 'chatcmpl-1', 'local', decode(repeat('02', 32), 'hex'), 'tsk_in', 2)`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("seeding: %v\n%s", err, q)
		}
	}
	digest := `decode(repeat('01', 32), 'hex')`
	for _, tt := range []struct{ name, sql, code string }{
		{"the same delivery again", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key)
			VALUES ('node:node_a', 'cred-1', 'local', ` + digest + `, 'k-1')`, "23505"},
		{"the same id with other content", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key)
			VALUES ('node:node_a', 'cred-1', 'local', decode(repeat('09', 32), 'hex'), 'k-2')`, "23505"},
		{"the same reply again", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, task_id, event_seq)
			VALUES ('orchestrator', 'chatcmpl-1', 'local', decode(repeat('02', 32), 'hex'), 'tsk_in', 1)`, "23505"},
		{"a rewritten row", `UPDATE inbox_event SET idempotency_key = 'k-2' WHERE delivery_id = 'cred-1'`, "23001"},
		{"an unknown source", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key)
			VALUES ('somebody', 'x', 'local', ` + digest + `, 'k-1')`, "23514"},
		{"an id with a space", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key)
			VALUES ('node:node_a', 'a b', 'local', ` + digest + `, 'k-1')`, "23514"},
		{"a command that became nothing", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256)
			VALUES ('node:node_a', 'cred-2', 'local', ` + digest + `)`, "23514"},
		{"a reply that became a command", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key)
			VALUES ('orchestrator', 'chatcmpl-2', 'local', ` + digest + `, 'k-1')`, "23514"},
		{"a command of no idempotency record", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key)
			VALUES ('node:node_a', 'cred-3', 'local', ` + digest + `, 'k-none')`, "23503"},
		{"a reply of no event", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, task_id, event_seq)
			VALUES ('orchestrator', 'chatcmpl-3', 'local', ` + digest + `, 'tsk_in', 99)`, "23503"},
		{"a short digest", `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key)
			VALUES ('node:node_a', 'cred-4', 'local', '\x01', 'k-1')`, "23514"},
	} {
		_, err := db.Exec(ctx, tt.sql)
		if got := pgCode(err); got != tt.code {
			t.Errorf("%s: got %v (code %q), want code %s", tt.name, err, got, tt.code)
		}
	}

	// The row goes with its idempotency record (both outlive any redelivery: a node credential
	// lives 30 s, a key 24 h).
	if _, err := db.Exec(ctx, `DELETE FROM idempotency_record WHERE idempotency_key = 'k-1'`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM inbox_event WHERE delivery_id = 'cred-1'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the delivery of a deleted idempotency record: %d rows, %v", n, err)
	}

	// Through the store: eight concurrent deliveries of one id, one recorded, seven duplicates
	// that read it as it was recorded.
	st := store.New(db)
	e := app.InboxEntry{Delivery: app.Delivery{Source: "node:node_b", ID: "cred-concurrent", Digest: sha256.Sum256([]byte("x"))},
		Tenant: "local", IdempotencyKey: "k-2"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts, dups := 0, 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := st.InTx(ctx, func(tx app.Tx) error {
				first, dup, err := tx.RecordDelivery(ctx, e)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if !dup {
					firsts++
					return nil
				}
				dups++
				if first.Digest != e.Digest || first.IdempotencyKey != "k-2" || first.Tenant != "local" {
					return errors.New("the duplicate read another row")
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if firsts != 1 || dups != 7 {
		t.Fatalf("of 8 concurrent deliveries %d were recorded and %d were duplicates, want 1 and 7", firsts, dups)
	}
}
