package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/store"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m, store.MigrateURL)
	closeBenchEngines() // the engine benchmarks' browsers (enginebench_test.go), if they ran
	os.Exit(code)
}

// The master key file wraps the server key (ADR 0017): the first start makes both; later starts
// need the same file, and a missing or wrong one is a startup error that names the expected key,
// never a new key; a rotation re-wraps the key (same id: every seal still opens) under a new file.
func TestMasterKeyLifecycle(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	dir := t.TempDir()
	cfg := Config{DataDir: dir}
	if _, err := LoadServerKey(ctx, cfg, pool, false); !errors.Is(err, ErrNoServerKey) {
		t.Fatalf("an admin command before the first start: %v", err)
	}
	k, err := LoadServerKey(ctx, cfg, pool, true)
	if err != nil {
		t.Fatal(err)
	}
	master := filepath.Join(dir, serverkey.MasterFileName)
	if fi, err := os.Stat(master); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("master key file: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(master)
	var wrapped []byte
	if err := pool.QueryRow(ctx, `SELECT wrapped FROM server_key_wrap`).Scan(&wrapped); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(wrapped, raw) {
		t.Fatal("the database holds the master key")
	}
	again, err := LoadServerKey(ctx, cfg, pool, true)
	if err != nil || again.ID() != k.ID() {
		t.Fatalf("second start: %v", err)
	}

	// Missing: the default file is not made again once the database holds a wrapped key.
	if err := os.Rename(master, master+".away"); err != nil {
		t.Fatal(err)
	}
	for _, first := range []bool{true, false} {
		if _, err := LoadServerKey(ctx, cfg, pool, first); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("missing master key: %v", err)
		}
	}
	if _, err := os.Stat(master); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a missing master key file was made anew")
	}
	if err := os.Rename(master+".away", master); err != nil {
		t.Fatal(err)
	}
	// Wrong: another key file names the id it has and the one expected.
	other := filepath.Join(t.TempDir(), "other.key")
	if _, err := serverkey.CreateMaster(other); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadServerKey(ctx, Config{DataDir: dir, MasterKeyFile: other}, pool, true); err == nil || !strings.Contains(err.Error(), "wrong --master-key-file") {
		t.Fatalf("wrong master key: %v", err)
	}

	// Rotation: a fresh key replaces the file; the old one opens nothing any more.
	old, _ := os.ReadFile(master)
	rot, err := RotateMasterKey(ctx, cfg, pool, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if rot.ServerKeyID != k.ID() || rot.OldMasterKeyID == rot.NewMasterKeyID {
		t.Fatalf("rotation: %+v", rot)
	}
	if now, _ := os.ReadFile(master); bytes.Equal(now, old) {
		t.Fatal("the master key file was not replaced")
	}
	if after, err := LoadServerKey(ctx, cfg, pool, true); err != nil || after.ID() != k.ID() {
		t.Fatalf("start after rotation: %v", err)
	}
	oldFile := filepath.Join(t.TempDir(), "old.key")
	if err := os.WriteFile(oldFile, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadServerKey(ctx, Config{DataDir: dir, MasterKeyFile: oldFile}, pool, true); err == nil {
		t.Fatal("the retired master key still opens the server key")
	}
	// With --keep-old both open until the old one is retired.
	rot2, err := RotateMasterKey(ctx, Config{DataDir: dir}, pool, other, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{master, other} {
		if k2, err := LoadServerKey(ctx, Config{DataDir: dir, MasterKeyFile: f}, pool, true); err != nil || k2.ID() != k.ID() {
			t.Fatalf("after --keep-old, %s: %v", f, err)
		}
	}
	if err := RetireMasterKey(ctx, pool, rot2.OldMasterKeyID); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadServerKey(ctx, cfg, pool, true); err == nil {
		t.Fatal("a retired master key still opens the server key")
	}
	if err := RetireMasterKey(ctx, pool, rot2.NewMasterKeyID); err == nil {
		t.Fatal("the last master key was retired")
	}
}

// A database used with a server key file (ADR 0015) keeps that key: the first start with a master
// key wraps it, so every fingerprint and seal made before still matches and opens.
func TestServerKeyFileIsWrappedOnUpgrade(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	dir := t.TempDir()
	legacy, err := serverkey.LoadOrCreate(filepath.Join(dir, serverkey.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.BindServerKey(ctx, pool, legacy.ID()); err != nil {
		t.Fatal(err)
	}
	elsewhere := Config{DataDir: t.TempDir()} // no server.key there: refused, naming the flag
	if _, err := LoadServerKey(ctx, elsewhere, pool, true); err == nil || !strings.Contains(err.Error(), "--server-key-file") {
		t.Fatalf("upgrade without the server key file: %v", err)
	}
	k, err := LoadServerKey(ctx, Config{DataDir: dir}, pool, true)
	if err != nil || k.ID() != legacy.ID() {
		t.Fatalf("upgrade: %v (%v, want %s)", err, k, legacy.ID())
	}
	if err := os.Remove(filepath.Join(dir, serverkey.FileName)); err != nil {
		t.Fatal(err)
	}
	if k, err := LoadServerKey(ctx, Config{DataDir: dir}, pool, true); err != nil || k.ID() != legacy.ID() {
		t.Fatalf("after the upgrade the server key file is not needed: %v", err)
	}
}
