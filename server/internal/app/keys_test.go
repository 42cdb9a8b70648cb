package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/serverkey"
)

// Idempotency records store keyed fingerprints; a record written before ADR 0015 (unkeyed
// SHA-256, scheme 'sha256') still answers a retry that spans the upgrade — compared by the
// retry's unkeyed fingerprint — until it expires, and never matches a keyed one by accident.
func TestIdempotencyFingerprintsAreKeyedAndLegacyRecordsStillReplay(t *testing.T) {
	t.Parallel()
	key := serverkey.Ephemeral()
	b := setup(t, func(c *app.Config) { c.ServerKey = key })
	ctx := context.Background()
	in := app.CreateTaskInput{Goal: "legacy retry", Policy: app.PolicySpec{AllowedOrigins: []string{"https://example.com"}}}
	body, _ := json.Marshal(map[string]any{"goal": in.Goal, "policy": map[string]any{"allowed_origins": in.Policy.AllowedOrigins}})
	canon, err := idempotency.Canonical(body)
	if err != nil {
		t.Fatal(err)
	}
	keyed := b.svc.Fingerprints().Sum("create_task", nil, canon)
	legacy := idempotency.LegacySum("create_task", nil, canon)
	call := func(k string, fp, old idempotency.Fingerprint) app.Call {
		return app.Call{Actor: b.actor, Operation: "create_task", IdempotencyKey: k, Fingerprint: fp, LegacyFingerprint: old}
	}
	create := func(c app.Call) (*recorder[*app.TaskResult], app.Response, error) {
		r := &recorder[*app.TaskResult]{}
		resp, err := b.svc.CreateTask(ctx, c, in, r)
		return r, resp, err
	}

	// A new record: keyed, under this server's key.
	if _, _, err := create(call("k-new", keyed, legacy)); err != nil {
		t.Fatal(err)
	}
	var hash []byte
	var scheme string
	if err := b.db.QueryRow(ctx, `SELECT request_hash, request_hash_scheme FROM idempotency_record WHERE idempotency_key = 'k-new'`).Scan(&hash, &scheme); err != nil {
		t.Fatal(err)
	}
	if scheme != "hmac-sha256" || !bytes.Equal(hash, keyed[:]) || bytes.Equal(hash, legacy[:]) {
		t.Fatalf("stored %s %x, want the keyed fingerprint %x", scheme, hash, keyed)
	}
	// Its retry replays; the unkeyed fingerprint alone does not match it.
	if _, resp, err := create(call("k-new", keyed, legacy)); err != nil || !resp.Replayed {
		t.Fatalf("retry: %v replayed=%v", err, resp.Replayed)
	}
	if _, _, err := create(call("k-new", legacy, legacy)); codeOf(err) != app.CodeIdempotencyKeyReused {
		t.Fatalf("an unkeyed fingerprint against a keyed record: %v", err)
	}

	// A record as the previous release wrote it.
	if _, _, err := create(call("k-old", keyed, legacy)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(ctx, `UPDATE idempotency_record SET request_hash = $1, request_hash_scheme = DEFAULT WHERE idempotency_key = 'k-old'`, legacy[:]); err != nil {
		t.Fatal(err)
	}
	if _, resp, err := create(call("k-old", keyed, legacy)); err != nil || !resp.Replayed {
		t.Fatalf("a retry spanning the upgrade: %v replayed=%v", err, resp.Replayed)
	}
	other := idempotency.LegacySum("create_task", nil, []byte(`{"goal":"another body"}`))
	if _, _, err := create(call("k-old", keyed, other)); codeOf(err) != app.CodeIdempotencyKeyReused {
		t.Fatalf("another body against a legacy record: %v", err)
	}
	if _, _, err := create(call("k-old", keyed, idempotency.Fingerprint{})); codeOf(err) != app.CodeIdempotencyKeyReused {
		t.Fatalf("a call without a legacy fingerprint (a worker's) against a legacy record: %v", err)
	}
}

func codeOf(err error) app.Code {
	if e := app.AsError(err); e != nil {
		return e.Code
	}
	return ""
}
