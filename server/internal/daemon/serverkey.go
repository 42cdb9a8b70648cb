package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/store"
)

// loadServerKey opens the server key (ADR 0015, 0017) for `bap serve`; the first start may create
// the default master key file and the server key.
func loadServerKey(ctx context.Context, cfg Config, pool *pgxpool.Pool) (*serverkey.Key, error) {
	return LoadServerKey(ctx, cfg, pool, true)
}

// masterKeyPath is the configured master key file, or the default under the data dir.
func masterKeyPath(cfg Config) (string, bool) {
	if cfg.MasterKeyFile != "" {
		return cfg.MasterKeyFile, true
	}
	return filepath.Join(cfg.DataDir, serverkey.MasterFileName), false
}

// ErrNoServerKey reports an administrative command run on a database no server has started on.
var ErrNoServerKey = errors.New("the database has no server key yet: start `bap serve` once first")

// LoadServerKey unwraps the server key of the database with the master key file. The master key
// never goes into the database; the server key is there only wrapped by it. On the first start
// (first, and no wrapped key yet) the default master key file is created and a server key is made
// — or, for a database used before ADR 0017, the server key file it was used with is wrapped.
// Afterwards a missing or wrong master key file is a startup error naming the key the database
// expects: nothing is ever created in its place.
func LoadServerKey(ctx context.Context, cfg Config, pool *pgxpool.Pool, first bool) (*serverkey.Key, error) {
	cfg.setDefaults()
	bound, wraps, err := store.ServerKeyWraps(ctx, pool)
	if err != nil {
		return nil, err
	}
	path, configured := masterKeyPath(cfg)
	if len(wraps) == 0 {
		if !first {
			return nil, ErrNoServerKey
		}
		if err := initServerKey(ctx, cfg, pool, bound, path, configured); err != nil {
			return nil, err
		}
		if bound, wraps, err = store.ServerKeyWraps(ctx, pool); err != nil {
			return nil, err
		}
	}
	var expected []string
	for _, w := range wraps {
		expected = append(expected, w.MasterKeyID)
	}
	m, err := serverkey.LoadMaster(path)
	if errors.Is(err, serverkey.ErrMissing) {
		return nil, fmt.Errorf("master key: %s does not exist, and the database holds its server key wrapped under %s: restore that master key file (or name it with --master-key-file); a new one is never made for a database in use", path, strings.Join(expected, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	for _, w := range wraps {
		if w.MasterKeyID != m.ID() {
			continue
		}
		k, err := m.Unwrap(w.Wrapped, w.KeyID)
		if err != nil {
			return nil, fmt.Errorf("master key %s: the wrapped server key does not open: %w", m.ID(), err)
		}
		if k.ID() != bound {
			return nil, fmt.Errorf("server key: %w: wrapped %s, bound %s", store.ErrServerKeyMismatch, k.ID(), bound)
		}
		return k, nil
	}
	return nil, fmt.Errorf("master key: %s is %s, but the database's server key is wrapped under %s: wrong --master-key-file (every node of one database needs a master key that opens it)", path, m.ID(), strings.Join(expected, ", "))
}

// initServerKey wraps the server key of a database that has no wrapped one yet.
func initServerKey(ctx context.Context, cfg Config, pool *pgxpool.Pool, bound, path string, configured bool) error {
	var (
		m   *serverkey.Master
		err error
	)
	if configured {
		m, err = serverkey.LoadMaster(path)
	} else {
		m, err = serverkey.CreateMaster(path)
	}
	if err != nil {
		return fmt.Errorf("master key: %w", err)
	}
	var k *serverkey.Key
	legacy := cfg.ServerKeyFile
	if legacy == "" {
		legacy = filepath.Join(cfg.DataDir, serverkey.FileName)
	}
	switch lk, lerr := serverkey.Load(legacy); {
	case lerr == nil:
		k = lk // a server key of ADR 0015: it becomes the wrapped data key, unchanged
	case bound != "":
		return fmt.Errorf("server key: the database was used with server key %s, kept in a file before ADR 0017; name it with --server-key-file once so that it is wrapped under the master key: %w", bound, lerr)
	case cfg.ServerKeyFile != "":
		return fmt.Errorf("server key: %w", lerr)
	default:
		k = serverkey.Generate()
	}
	if bound != "" && k.ID() != bound {
		return fmt.Errorf("server key: %w: the file holds %s, the database was used with %s", store.ErrServerKeyMismatch, k.ID(), bound)
	}
	return store.InitServerKey(ctx, pool, store.ServerKeyWrap{MasterKeyID: m.ID(), KeyID: k.ID(), Wrapped: m.Wrap(k)})
}

// Rotation is what RotateMasterKey did.
type Rotation struct {
	OldMasterKeyID string `json:"old_master_key_id"`
	NewMasterKeyID string `json:"new_master_key_id"`
	ServerKeyID    string `json:"server_key_id"`
	MasterKeyFile  string `json:"master_key_file"`
	KeptOld        bool   `json:"kept_old"`
}

// RotateMasterKey re-wraps the server key under a new master key: newFile when given (made by the
// operator and mounted on every node), else a fresh one that replaces the master key file. Running
// servers hold the unwrapped server key and go on; a node started afterwards needs the new file.
// The order survives a crash at any point: the new wrapping is added before the file is replaced,
// and the old one is removed (unless keepOld) only after.
func RotateMasterKey(ctx context.Context, cfg Config, pool *pgxpool.Pool, newFile string, keepOld bool) (*Rotation, error) {
	cfg.setDefaults()
	k, err := LoadServerKey(ctx, cfg, pool, false)
	if err != nil {
		return nil, err
	}
	path, _ := masterKeyPath(cfg)
	old, err := serverkey.LoadMaster(path)
	if err != nil {
		return nil, err
	}
	next := newFile
	if next == "" {
		next = path + ".next" // a rotation that crashed before the rename left it: it is reused
	}
	var m *serverkey.Master
	if newFile != "" {
		m, err = serverkey.LoadMaster(newFile)
	} else {
		m, err = serverkey.CreateMaster(next)
	}
	if err != nil {
		return nil, fmt.Errorf("new master key: %w", err)
	}
	if m.ID() == old.ID() {
		return nil, errors.New("the new master key is the current one")
	}
	if err := store.RewrapServerKey(ctx, pool, store.ServerKeyWrap{MasterKeyID: m.ID(), KeyID: k.ID(), Wrapped: m.Wrap(k)}, true); err != nil {
		return nil, err
	}
	file := path
	if newFile == "" {
		if err := os.Rename(next, path); err != nil {
			return nil, fmt.Errorf("installing the new master key file: %w", err)
		}
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			_ = d.Sync()
			_ = d.Close()
		}
	} else {
		file = newFile
	}
	if !keepOld {
		if err := store.RetireMasterKey(ctx, pool, old.ID()); err != nil {
			return nil, err
		}
	}
	return &Rotation{OldMasterKeyID: old.ID(), NewMasterKeyID: m.ID(), ServerKeyID: k.ID(), MasterKeyFile: file, KeptOld: keepOld}, nil
}

// RetireMasterKey removes the wrapping under an old master key (after a rotation with keepOld,
// once every node has the new file).
func RetireMasterKey(ctx context.Context, pool *pgxpool.Pool, masterKeyID string) error {
	return store.RetireMasterKey(ctx, pool, masterKeyID)
}

// KeyedOperatorService is OperatorService with the database's server key (unwrapped by the
// master key file; never created here): for the CLI commands that seal (bap secret).
func (d *Database) KeyedOperatorService(ctx context.Context, cfg Config, log *slog.Logger) (*app.Service, error) {
	k, err := LoadServerKey(ctx, cfg, d.Pool, false)
	if err != nil {
		return nil, err
	}
	return app.NewService(store.New(d.Pool), app.Config{NodeID: "cli_" + newNodeID(), Logger: log, ServerKey: k})
}
