package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/historychain"
	"github.com/originweave/bap/server/internal/serverkey"
)

// The keyed hash chain over each task's history (issue #20, ADR 0033): emit links every event to
// the one before it under the server key's history-chain derivation, and anchors — signed
// statements of a chain's head — are recorded when a task ends and periodically while its history
// grows. VerifyAudit recomputes the chain and checks the anchors.

// AuditStore keeps the history chain's keys and anchors (store/audit.go).
type AuditStore interface {
	// ChainedHistory reads every event of a task with its digests, in seq order, and the task's
	// last_seq (ErrNotFound when tenant has no such task).
	ChainedHistory(ctx context.Context, tenant, taskID string) ([]historychain.Event, int64, error)
	// ListAnchors reads a task's anchors in seq order.
	ListAnchors(ctx context.Context, tenant, taskID string) ([]AnchorRecord, error)
	// AuditTaskRefs lists up to limit tasks of every tenant whose id sorts after after, in id order
	// (`bap audit verify`); with taskID only that task, whatever its tenant.
	AuditTaskRefs(ctx context.Context, taskID, after string, limit int) ([]TaskRef, error)
	// TaskArtifacts lists a task's artifacts but its checkpoints (sealed state, which opens only
	// on this server), oldest first, without their content (bundle.go).
	TaskArtifacts(ctx context.Context, tenant, taskID string) ([]Artifact, error)
	// DueForAnchor lists up to limit live tasks (running, or waiting mid-run) whose chain head is
	// past their last anchor, last anchored (or created) before before.
	DueForAnchor(ctx context.Context, before time.Time, limit int) ([]TaskRef, error)
}

// SealedAuditKey is an audit signing key as stored: its private scalar sealed with the server key.
type SealedAuditKey struct {
	ID     string
	Sealed []byte
}

// AnchorRecord is an anchor: a signed statement of a task's chain head (audit_anchor).
type AnchorRecord struct {
	Tenant        string
	TaskID        string
	Seq           int64
	Digest        []byte
	HistorySHA256 []byte
	Reason        string // historychain.ReasonTaskEnded or ReasonPeriodic
	KeyID         string
	Statement     string // compact JWS, ES256
	AnchoredAt    time.Time
}

// DefaultAnchorInterval is how often a task whose history grows is anchored when
// Config.AnchorInterval is unset.
const DefaultAnchorInterval = time.Minute

// auditKeys holds the audit signing keys this Service could open: the newest signs, all are
// published. Loaded once (LoadAuditKeys, or on first use).
type auditKeys struct {
	mu   sync.Mutex
	keys *auditKeySet
}

func auditKeyAAD(kid string) []byte { return []byte("bap/audit-signing-key/v1\x00" + kid) }

// auditKeySet is what one load of the audit keys found.
type auditKeySet struct {
	signer  *ecdsa.PrivateKey
	signKID string
	public  historychain.KeySet
	jwks    historychain.JWKS
}

// LoadAuditKeys loads the audit signing keys, creating the first one when none can be opened.
// The daemon calls it at start, so that no command has to.
func (s *Service) LoadAuditKeys(ctx context.Context) error {
	_, err := s.auditSigner(ctx)
	return err
}

// auditSigner returns the audit keys, loading them in a transaction of their own.
func (s *Service) auditSigner(ctx context.Context) (*auditKeySet, error) {
	if k := s.audit.get(); k != nil {
		return k, nil
	}
	var k *auditKeySet
	err := s.store.InTx(ctx, func(tx Tx) error {
		var err error
		k, err = s.auditKeysIn(ctx, tx)
		return err
	})
	return k, err
}

// auditKeysIn returns the audit keys, reading them through tx when this Service has not yet: a
// command's transaction never waits for a second connection. When none can be opened it creates
// one, under a lock every node takes, and keeps it once tx has committed.
func (s *Service) auditKeysIn(ctx context.Context, tx Tx) (*auditKeySet, error) {
	if k := s.audit.get(); k != nil {
		return k, nil
	}
	for locked := false; ; locked = true {
		k, err := s.openAuditKeys(ctx, tx)
		if err != nil {
			return nil, err
		}
		if k.signer != nil {
			s.audit.set(k)
			return k, nil
		}
		if locked {
			return s.createAuditKey(ctx, tx, k)
		}
		if err := tx.LockAuditKeys(ctx); err != nil { // another node may be creating one
			return nil, err
		}
	}
}

// createAuditKey makes the first audit key in tx, and keeps it once tx has committed.
func (s *Service) createAuditKey(ctx context.Context, tx Tx, k *auditKeySet) (*auditKeySet, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("creating an audit key: %w", err)
	}
	kid, err := historychain.KeyID(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	raw, err := priv.Bytes()
	if err != nil {
		return nil, fmt.Errorf("encoding the audit key: %w", err)
	}
	if err := tx.InsertAuditKey(ctx, SealedAuditKey{ID: kid, Sealed: s.keys.auditSeal.Seal(raw, auditKeyAAD(kid))}); err != nil {
		return nil, fmt.Errorf("storing the audit key: %w", err)
	}
	if err := k.add(kid, priv); err != nil {
		return nil, err
	}
	tx.AfterCommit(func() { s.audit.set(k) })
	return k, nil
}

// openAuditKeys reads the stored audit keys and opens those sealed under this server key.
func (s *Service) openAuditKeys(ctx context.Context, tx Tx) (*auditKeySet, error) {
	stored, err := tx.AuditKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading audit keys: %w", err)
	}
	k := &auditKeySet{public: historychain.KeySet{}, jwks: historychain.JWKS{Keys: []historychain.JWK{}}}
	for _, sk := range stored {
		raw, err := s.keys.auditSeal.Open(sk.Sealed, auditKeyAAD(sk.ID))
		if err != nil {
			// Sealed under another server key (a test's ephemeral one): not ours to sign with or
			// publish.
			continue
		}
		priv, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
		if err != nil {
			return nil, fmt.Errorf("audit key %s: %w", sk.ID, err)
		}
		if err := k.add(sk.ID, priv); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// add records an opened key; the first one added (the newest) signs.
func (k *auditKeySet) add(kid string, priv *ecdsa.PrivateKey) error {
	jwk, err := historychain.PublicJWK(kid, &priv.PublicKey)
	if err != nil {
		return fmt.Errorf("audit key %s: %w", kid, err)
	}
	if k.signer == nil {
		k.signer, k.signKID = priv, kid
	}
	k.public[kid] = &priv.PublicKey
	k.jwks.Keys = append(k.jwks.Keys, jwk)
	return nil
}

func (a *auditKeys) get() *auditKeySet {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keys
}

func (a *auditKeys) set(k *auditKeySet) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.keys == nil {
		a.keys = k
	}
}

// AuditKeySet is the public keys that verify this server's anchors (GET /bap/v1/audit/keys): a
// JSON Web Key Set an auditor keeps to check bundles offline.
func (s *Service) AuditKeySet(ctx context.Context) (historychain.JWKS, error) {
	a, err := s.auditSigner(ctx)
	if err != nil {
		return historychain.JWKS{}, err
	}
	return a.jwks, nil
}

// link chains e, the next event of t, to t's chain head and moves the head: e gets its
// prev_digest and digest, t its new chain_digest and chain_sha256.
func (k keyring) link(t *Task, e *Event) error {
	entry := historychain.Entry{Tenant: e.Tenant, TaskID: e.TaskID, Seq: e.Seq, EventID: e.ID, Type: e.Type,
		Time: e.Time, Actor: e.Actor, Cause: e.Cause, CommandID: e.CommandID, Data: e.DataJSON}
	canonical, err := entry.Canonical()
	if err != nil {
		return fmt.Errorf("chaining event %d of task %s: %w", e.Seq, t.ID, err)
	}
	prev, public := t.ChainDigest, t.ChainSHA256
	if prev == nil {
		prev, public = historychain.Genesis, historychain.Genesis
	}
	e.PrevDigest = prev
	c, _ := k.chains.Get().(*historychain.Chain)
	if c == nil {
		c = historychain.New(k.chain)
	}
	e.Digest = c.Link(canonical, prev)
	k.chains.Put(c)
	t.ChainDigest, t.ChainSHA256 = e.Digest, historychain.PublicLink(public, canonical)
	return nil
}

// anchorAtCommit anchors t's chain head as it is when the command's transaction commits: the
// events the command emits after its state change are anchored too.
func (c *commandCtx) anchorAtCommit(t *Task, reason string) {
	c.tx.BeforeCommit(func(ctx context.Context) error { return c.s.anchor(ctx, c.tx, t, reason) })
}

// anchor signs t's chain head and records it in tx.
func (s *Service) anchor(ctx context.Context, tx Tx, t *Task, reason string) error {
	if t.ChainDigest == nil {
		return nil // no chained event yet
	}
	a, err := s.auditKeysIn(ctx, tx)
	if err != nil {
		return err
	}
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	st := historychain.NewStatement(t.Tenant, t.ID, t.LastSeq, t.ChainDigest, t.ChainSHA256, reason, now)
	jws, err := historychain.Sign(a.signer, a.signKID, st)
	if err != nil {
		return err
	}
	return tx.InsertAnchor(ctx, &AnchorRecord{Tenant: t.Tenant, TaskID: t.ID, Seq: t.LastSeq, Digest: t.ChainDigest,
		HistorySHA256: t.ChainSHA256, Reason: reason, KeyID: a.signKID, Statement: jws, AnchoredAt: now})
}

// AnchorDue anchors, each in its own transaction, the tasks whose history grew since their last
// anchor and that were not anchored within interval, and reports how many it anchored.
func (s *Service) AnchorDue(ctx context.Context, interval time.Duration) (int, error) {
	refs, err := s.store.DueForAnchor(ctx, s.cfg.Now().Add(-interval), 100)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ref := range refs {
		err := s.store.InTx(ctx, func(tx Tx) error {
			t, err := tx.LockTask(ctx, ref.Tenant, ref.TaskID)
			if err != nil {
				return err
			}
			return s.anchor(ctx, tx, t, historychain.ReasonPeriodic)
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return n, fmt.Errorf("anchoring task %s: %w", ref.TaskID, err)
		}
		n++
	}
	return n, nil
}

// AuditReport is the outcome of verifying one task's history chain.
type AuditReport struct {
	TaskID  string
	Report  *historychain.Report
	Anchors []AnchorRecord
}

// VerifyAudit recomputes the keyed chain over a task's history and checks its anchors and their
// signatures: valid, or the first seq where the chain breaks.
func (s *Service) VerifyAudit(ctx context.Context, actor Actor, taskID string) (*AuditReport, error) {
	events, lastSeq, err := s.store.ChainedHistory(ctx, actor.Tenant, taskID)
	if err != nil {
		return nil, err
	}
	anchors, err := s.store.ListAnchors(ctx, actor.Tenant, taskID)
	if err != nil {
		return nil, err
	}
	a, err := s.auditSigner(ctx)
	if err != nil {
		return nil, err
	}
	hc := make([]historychain.Anchor, len(anchors))
	for i, an := range anchors {
		hc[i] = historychain.Anchor{Seq: an.Seq, Digest: an.Digest, HistorySHA256: an.HistorySHA256, Statement: an.Statement}
	}
	return &AuditReport{TaskID: taskID, Report: historychain.Verify(s.keys.chain, events, lastSeq, hc, a.public), Anchors: anchors}, nil
}

// AuditTasks lists up to limit tasks of every tenant after after (by id) for the operator's
// `bap audit verify`; with taskID, only that one.
func (s *Service) AuditTasks(ctx context.Context, taskID, after string, limit int) ([]TaskRef, error) {
	return s.store.AuditTaskRefs(ctx, taskID, after, limit)
}

// auditSealer is the sealer of the audit signing keys.
func auditSealer(k *serverkey.Key) *serverkey.Sealer {
	return k.Sealer(serverkey.PurposeAuditSigningKeys)
}
