package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// An artifact of one tenant is invisible to another, and its chain names its task.
func TestArtifactsAreTenantScoped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	seedTask(t, ctx, db, "tsk_art")
	if _, err := db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('globex')`); err != nil {
		t.Fatal(err)
	}
	st := store.New(db)
	const sum = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")
	a := &app.Artifact{ID: "art_one", Tenant: "local", SHA256: sum, Size: 5, MediaType: "text/plain", Kind: "other", TaskID: "tsk_art"}
	if err := st.InTx(ctx, func(tx app.Tx) error { return tx.InsertArtifact(ctx, a, []byte("hello")) }); err != nil {
		t.Fatal(err)
	}
	got, content, err := st.GetArtifact(ctx, "local", "art_one")
	if err != nil || string(content) != "hello" || got.SHA256 != sum || got.TaskID != "tsk_art" {
		t.Fatalf("GetArtifact: %+v %q %v", got, content, err)
	}
	if _, _, err := st.GetArtifact(ctx, "globex", "art_one"); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("another tenant reads the artifact: %v", err)
	}
	chain, err := st.ArtifactChain(ctx, got)
	if err != nil || !chain.TaskOK || !chain.SessionOK || !chain.EpochOK || !chain.CommandOK || chain.ReceiptID != "" {
		t.Fatalf("chain %+v %v", chain, err)
	}
	got.Tenant = "globex"
	if chain, err := st.ArtifactChain(ctx, got); err != nil || chain.TaskOK {
		t.Fatalf("chain under another tenant %+v %v", chain, err)
	}
}
