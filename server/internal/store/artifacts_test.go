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

// artifact_reference keeps the task, session, epoch and command an artifact was captured under
// (ADR 0019); the database holds its task and command together, and verify_artifact holds the
// rest: a reference whose session belongs to another task, or whose epoch belongs to another
// session, is one the database accepts but whose chain fails, so verify_artifact answers
// valid: false (issue #23 item 1).
func TestArtifactProvenanceThatDisagreesIsInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	st := store.New(db)
	seedTask(t, ctx, db, "tsk_mine")
	seedTask(t, ctx, db, "tsk_other")
	for _, q := range []string{
		`INSERT INTO browser_session (tenant_id, session_id, task_id, state, engine) VALUES ('local', 'bs_mine', 'tsk_mine', 'open', 'chromium')`,
		`INSERT INTO browser_session (tenant_id, session_id, task_id, state, engine) VALUES ('local', 'bs_other', 'tsk_other', 'open', 'chromium')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []struct{ session, ctx, epoch string }{{"bs_mine", "ctx_mine", "ep_mine"}, {"bs_other", "ctx_other", "ep_other"}} {
		if err := st.RecordHandles(ctx, "local", b.session, app.HandleBatch{ContextID: b.ctx, EpochID: b.epoch, URL: "https://a.example/",
			Handles: []string{"nd_a0000000"}, Roles: []string{"button"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.RegisterNode(ctx, app.NodeInfo{ID: "node_art", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	svc, err := app.NewService(st, app.Config{NodeID: "node_art"})
	if err != nil {
		t.Fatal(err)
	}
	const sum = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")
	for _, c := range []struct {
		name, id, session, epoch string
		sessionOK, epochOK       bool
	}{
		{"as captured", "art_fine", "bs_mine", "ep_mine", true, true},
		{"a session of another task", "art_xsession", "bs_other", "", false, true},
		{"an epoch of another session", "art_xepoch", "bs_mine", "ep_other", true, false},
		{"both", "art_both", "bs_other", "ep_mine", false, false},
	} {
		a := &app.Artifact{ID: c.id, Tenant: "local", SHA256: sum, Size: 5, MediaType: "text/plain", Kind: "screenshot",
			TaskID: "tsk_mine", SessionID: c.session, EpochID: c.epoch}
		if err := st.InTx(ctx, func(tx app.Tx) error { return tx.InsertArtifact(ctx, a, []byte("hello")) }); err != nil {
			t.Fatalf("%s: the database refused the reference: %v", c.name, err)
		}
		got, _, err := st.GetArtifact(ctx, "local", c.id)
		if err != nil {
			t.Fatal(err)
		}
		chain, err := st.ArtifactChain(ctx, got)
		if err != nil || !chain.TaskOK || chain.SessionOK != c.sessionOK || chain.EpochOK != c.epochOK || !chain.CommandOK {
			t.Errorf("%s: chain %+v %v; want session ok %v, epoch ok %v", c.name, chain, err, c.sessionOK, c.epochOK)
		}
		v, err := svc.VerifyArtifact(ctx, app.Actor{Tenant: "local", Subject: "operator:local"}, c.id)
		if want := c.sessionOK && c.epochOK; err != nil || v.Valid != want {
			t.Errorf("%s: verify_artifact %+v %v; want valid %v", c.name, v, err, want)
		}
	}
}
