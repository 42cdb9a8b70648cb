package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgcluster"
)

// lastNodeFile names, in the data dir, the node that last served with the data dir's embedded
// cluster.
const lastNodeFile = "last-node"

// succeedDataDirNode marks stopped the node that served this data dir before: this process holds
// the data-dir lock, so that node's process has ended (killed, or stopped without saying so),
// whatever address it listened on. Recovery then classifies what it left in flight, and reports
// its sessions lost, in the first upkeep round rather than after NodeStaleAfter without
// heartbeats, and no node forwards to it any more. Other nodes sharing the database are not this
// data dir's and are left alone. An id the database does not know (the data dir served another
// database before) changes nothing.
func succeedDataDirNode(ctx context.Context, svc *app.Service, dataDir, nodeID string, log *slog.Logger) error {
	path := filepath.Join(dataDir, lastNodeFile)
	prev, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", lastNodeFile, err)
	}
	if id := strings.TrimSpace(string(prev)); id != "" && id != nodeID {
		if err := svc.MarkNodeStopped(ctx, id); err != nil {
			return err
		}
		log.Info("the data dir's previous node marked stopped", "node_id", id)
	}
	if err := os.WriteFile(path, []byte(nodeID+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", lastNodeFile, err)
	}
	return nil
}

// EmbeddedDatabaseURL returns the connection string of the embedded cluster under dataDir (its
// Unix socket), for other nodes on this machine to share it through BAP_DATABASE_URL while the
// server that owns the data dir runs.
func EmbeddedDatabaseURL(dataDir string) (string, error) {
	return pgcluster.ConnStringFor(dataDir, pgcluster.Database)
}
