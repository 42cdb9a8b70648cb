package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// RecordDelivery implements app.InboxTx. The INSERT waits on the primary key (source,
// delivery_id) while another transaction holds it, so of two concurrent deliveries exactly one
// inserts and the other reads the committed row.
func (t *pgTx) RecordDelivery(ctx context.Context, e app.InboxEntry) (*app.InboxEntry, bool, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, false, err
	}
	var seq any
	if e.EventSeq != 0 {
		seq = e.EventSeq
	}
	for attempt := 0; attempt < 3; attempt++ {
		tag, err := q.Exec(ctx, `INSERT INTO inbox_event (source, delivery_id, tenant_id, content_sha256, idempotency_key, task_id, event_seq)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (source, delivery_id) DO NOTHING`,
			e.Source, e.ID, e.Tenant, e.Digest[:], nullIfEmpty(e.IdempotencyKey), nullIfEmpty(e.TaskID), seq)
		if err != nil {
			return nil, false, fmt.Errorf("recording delivery: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil, false, nil
		}
		first := app.InboxEntry{Delivery: app.Delivery{Source: e.Source, ID: e.ID}}
		var digest []byte
		var key, taskID *string
		var evSeq *int64
		err = q.QueryRow(ctx, `SELECT tenant_id, content_sha256, idempotency_key, task_id, event_seq FROM inbox_event
			WHERE source = $1 AND delivery_id = $2`, e.Source, e.ID).Scan(&first.Tenant, &digest, &key, &taskID, &evSeq)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // gone with its idempotency record between the two statements: insert again
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading recorded delivery: %w", err)
		}
		copy(first.Digest[:], digest)
		if key != nil {
			first.IdempotencyKey = *key
		}
		if taskID != nil {
			first.TaskID = *taskID
		}
		if evSeq != nil {
			first.EventSeq = *evSeq
		}
		return &first, true, nil
	}
	return nil, false, errors.New("recording delivery: the recorded row kept disappearing")
}
