package daemon

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/auth"
	"github.com/originweave/bap/server/internal/serverkey"
)

// clusterKeys are the keys every node on one database shares (ADR 0012): node credentials of
// forwarded requests, and the MCP adapter's sealed cursors and request states (a client may
// present them to any node behind the load balancer). Both derive from the server-wide secret
// in the database (sealed there under the server key, ADR 0017).
type clusterKeys struct {
	node, mcp []byte
}

func loadClusterKeys(ctx context.Context, pool *pgxpool.Pool, key *serverkey.Key) (clusterKeys, error) {
	node, err := auth.ClusterKey(ctx, pool, key, "node-credential")
	if err != nil {
		return clusterKeys{}, err
	}
	mcp, err := auth.ClusterKey(ctx, pool, key, "mcp-seal")
	if err != nil {
		return clusterKeys{}, err
	}
	return clusterKeys{node: node, mcp: mcp}, nil
}
