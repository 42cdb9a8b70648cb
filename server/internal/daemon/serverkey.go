package daemon

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/store"
)

// loadServerKey reads the server key (ADR 0015) — a configured file must exist; the default
// <data-dir>/server.key is created at the first start — and checks it is the key this database
// is used with: a node with another key refuses to start rather than write fingerprints and seals
// the other nodes can neither match nor open.
func loadServerKey(ctx context.Context, cfg Config, pool *pgxpool.Pool) (*serverkey.Key, error) {
	var (
		k   *serverkey.Key
		err error
	)
	if cfg.ServerKeyFile != "" {
		k, err = serverkey.Load(cfg.ServerKeyFile)
	} else {
		k, err = serverkey.LoadOrCreate(filepath.Join(cfg.DataDir, serverkey.FileName))
	}
	if err != nil {
		return nil, fmt.Errorf("server key: %w", err)
	}
	if err := store.BindServerKey(ctx, pool, k.ID()); err != nil {
		return nil, fmt.Errorf("server key: %w (every node of one database needs the same --server-key-file)", err)
	}
	return k, nil
}
