package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// Checkpoints (ADR 0010). checkpoint_browser_session stores a session's restorable state (cookies,
// Web Storage per origin, URLs, viewport) as an artifact of kind "checkpoint" and records a
// task_checkpoint naming it with the versions and policy digest it was taken under.
// create_browser_session {from_checkpoint} and resume_task restore it into a fresh session (a new
// epoch: node handles and epochs are never revived) after checking that the checkpoint is the
// task's own (409 checkpoint_foreign), was taken by a compatible build under the same policy
// (409 checkpoint_incompatible: the same software version, BAP protocol version and policy digest,
// exactly — docs/compatibility.md), restores into the engine it was taken on (409
// checkpoint_incompatible too, ADR 0025) and is fresh enough (409 checkpoint_stale). The state holds
// credentials, so its artifact is never served by get_artifact and no event carries it.

// Checkpoint is a task_checkpoint row.
type Checkpoint struct {
	ID              string
	Tenant          string
	TaskID          string
	SessionID       string
	ArtifactID      string // the state, an artifact of kind "checkpoint"
	SoftwareVersion string
	ProtocolVersion string
	PolicyDigest    string // SHA-256 (hex) of the task policy's JSON
	Format          string // of the state artifact
	URL             string // of the primary context
	EpochID         string // of the primary context
	// Engine is the browser engine of the session it was taken of (its session's, read back
	// through it): it restores only into a session of the same engine.
	Engine    string
	CreatedAt time.Time
}

// CheckpointResult is the result of checkpoint_browser_session.
type CheckpointResult struct {
	Checkpoint *Checkpoint
	Receipt    *Receipt
}

// ResumeResult is the result of resume_task.
type ResumeResult struct {
	Task    *Task
	Session *SessionRecord
	Receipt *Receipt
}

// checkpointFormat names the layout of the state artifact; a build reads only its own.
const checkpointFormat = "bap.checkpoint/1"

// ArtifactKindCheckpoint is the kind of a checkpoint's state artifact, which holds credentials
// and is never served to clients.
const ArtifactKindCheckpoint = "checkpoint"

// checkpointMediaType is the media type of a sealed state artifact.
const checkpointMediaType = "application/vnd.bap.sealed"

// checkpointAAD binds a sealed state to its artifact: it never opens as another's.
func checkpointAAD(tenant, artifactID string) []byte {
	return []byte("bap-checkpoint-state/v1\x00" + tenant + "\x00" + artifactID)
}

// checkpointDoc is the content of a state artifact (sealed in the database).
type checkpointDoc struct {
	Format string             `json:"format"`
	State  *page.StorageState `json:"state"`
}

// policyDigest is the SHA-256 of the task policy's JSON encoding (its fields in a fixed order).
func policyDigest(t *Task) (string, error) {
	b, err := json.Marshal(t.Policy)
	if err != nil {
		return "", fmt.Errorf("encoding the task policy: %w", err)
	}
	return sha256Hex(b), nil
}

// CheckpointBrowserSession stores the restorable state of an open session of a running task.
// Reading the state changes nothing in the browser.
func (s *Service) CheckpointBrowserSession(ctx context.Context, call Call, sessionID string, r Responder[*CheckpointResult]) (Response, error) {
	if resp, ok, err := s.replayFirst(ctx, call); ok || err != nil {
		return resp, err
	}
	if _, err := s.browserOrUnavailable(); err != nil {
		return Response{}, err
	}
	taskID, err := s.sessionTask(ctx, call.Actor, sessionID)
	if err != nil {
		return Response{}, err
	}
	return runTwoPhase(ctx, s, call, taskID, r, twoPhase[*sessionPlan, *page.StorageState, *CheckpointResult]{
		prepare: prepareSession(sessionID, defaultCommandTimeout),
		dispatch: onLiveSession(s, 0, func(ctx context.Context, sess BrowserSession, _ *sessionPlan) (*page.StorageState, error) {
			return sess.ExportState(ctx)
		}),
		finish: func(ctx context.Context, c *commandCtx, plan *sessionPlan, st *page.StorageState, dispatchErr error) (*CheckpointResult, task.Outcome, error) {
			rec := plan.rec
			if dispatchErr != nil {
				return finishFailed[*CheckpointResult](ctx, c, rec, dispatchErr, false)
			}
			cp, err := c.storeCheckpoint(ctx, rec, st)
			if err != nil {
				return nil, "", err
			}
			// The event names the checkpoint, never its content.
			if err := c.emit(ctx, c.t, "checkpoint.created", "checkpoint_browser_session", map[string]any{
				"checkpoint_id": cp.ID, "session_id": rec.ID,
			}); err != nil {
				return nil, "", err
			}
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return nil, "", err
			}
			return &CheckpointResult{Checkpoint: cp, Receipt: rc}, "", nil
		},
	})
}

// storeCheckpoint records the exported state st of session rec as a checkpoint of c's task: the
// sealed state artifact, its epoch and the checkpoint row.
func (c *commandCtx) storeCheckpoint(ctx context.Context, rec *SessionRecord, st *page.StorageState) (*Checkpoint, error) {
	s := c.s
	doc, err := json.Marshal(checkpointDoc{Format: checkpointFormat, State: st})
	if err != nil {
		return nil, fmt.Errorf("encoding the checkpoint: %w", err)
	}
	// The state holds credentials (cookies, storage): the database keeps it sealed under
	// the server key for this artifact alone (ADR 0017).
	artID := ids.New(ids.Artifact)
	content := s.keys.checkpoint.Seal(doc, checkpointAAD(c.t.Tenant, artID))
	digest, err := policyDigest(c.t)
	if err != nil {
		return nil, err
	}
	var primary page.ContextState
	for _, cs := range st.Contexts {
		if cs.Primary {
			primary = cs
		}
	}
	art := &Artifact{
		ID: artID, Tenant: c.t.Tenant, SHA256: sha256Hex(content), Size: int64(len(content)),
		MediaType: checkpointMediaType, Kind: ArtifactKindCheckpoint, TaskID: c.t.ID, SessionID: rec.ID,
		ContextID: primary.ContextID, EpochID: primary.EpochID, CommandID: c.cmd.ID, SourceURL: primary.URL, CreatedAt: c.now,
	}
	if err := c.tx.RecordEpoch(ctx, c.t.Tenant, rec.ID, primary.ContextID, primary.EpochID, primary.URL); err != nil {
		return nil, err
	}
	if err := c.tx.InsertArtifact(ctx, art, content); err != nil {
		return nil, err
	}
	cp := &Checkpoint{
		ID: ids.New(ids.Checkpoint), Tenant: c.t.Tenant, TaskID: c.t.ID, SessionID: rec.ID, ArtifactID: art.ID,
		SoftwareVersion: s.cfg.SoftwareVersion, ProtocolVersion: s.cfg.ProtocolVersion, PolicyDigest: digest,
		Format: checkpointFormat, URL: primary.URL, EpochID: primary.EpochID, Engine: rec.Engine, CreatedAt: c.now,
	}
	if err := c.tx.InsertCheckpoint(ctx, cp); err != nil {
		return nil, err
	}
	return cp, nil
}

// ResumeTask restores a checkpointed task from a compatible checkpoint into a new browser session
// and moves it back to running.
func (s *Service) ResumeTask(ctx context.Context, call Call, taskID, checkpointID string, r Responder[*ResumeResult]) (Response, error) {
	return openSession(ctx, s, call, taskID, checkpointID, "", true, r,
		func(t *Task, rec *SessionRecord, rc *Receipt) *ResumeResult {
			return &ResumeResult{Task: t, Session: rec, Receipt: rc}
		})
}

// loadCheckpoint reads a checkpoint of the actor's tenant and decodes its state.
func (s *Service) loadCheckpoint(ctx context.Context, actor Actor, checkpointID string) (*Checkpoint, *page.StorageState, error) {
	cp, err := s.store.GetCheckpoint(ctx, actor.Tenant, checkpointID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil, &Error{Code: CodeNotFound, Detail: "no such checkpoint"}
		}
		return nil, nil, err
	}
	if cp.Format != checkpointFormat {
		return cp, nil, nil // refused by checkCheckpoint, recorded as a command
	}
	_, content, err := s.store.GetArtifact(ctx, actor.Tenant, cp.ArtifactID)
	if err != nil {
		return nil, nil, fmt.Errorf("reading checkpoint %s: %w", cp.ID, err)
	}
	if len(content) > 0 && content[0] != '{' { // sealed; a state in clear is from before ADR 0017
		if content, err = s.keys.checkpoint.Open(content, checkpointAAD(actor.Tenant, cp.ArtifactID)); err != nil {
			return nil, nil, fmt.Errorf("checkpoint %s does not open under the server key: %w", cp.ID, err)
		}
	}
	var doc checkpointDoc
	if err := json.Unmarshal(content, &doc); err != nil || doc.State == nil || doc.Format != cp.Format {
		return nil, nil, fmt.Errorf("checkpoint %s has an unreadable state artifact", cp.ID)
	}
	return cp, doc.State, nil
}

// checkCheckpoint decides whether cp may be restored into a session of t now.
func (s *Service) checkCheckpoint(cp *Checkpoint, t *Task, now time.Time) *Error {
	if cp.TaskID != t.ID {
		return &Error{Code: CodeCheckpointForeign, Detail: "the checkpoint belongs to another task"}
	}
	switch digest, err := policyDigest(t); {
	case err != nil || digest != cp.PolicyDigest:
		return &Error{Code: CodeCheckpointIncompatible, Detail: "the checkpoint was taken under another policy"}
	case cp.Format != checkpointFormat:
		return Errorf(CodeCheckpointIncompatible, "the checkpoint's format %s is not %s", cp.Format, checkpointFormat)
	case cp.SoftwareVersion != s.cfg.SoftwareVersion:
		return Errorf(CodeCheckpointIncompatible, "the checkpoint was taken by runtime %s; this is %s, and only the same version restores it (docs/compatibility.md)", cp.SoftwareVersion, s.cfg.SoftwareVersion)
	case cp.ProtocolVersion != s.cfg.ProtocolVersion:
		return Errorf(CodeCheckpointIncompatible, "the checkpoint was taken under BAP %s; this is %s, and only the same version restores it (docs/compatibility.md)", cp.ProtocolVersion, s.cfg.ProtocolVersion)
	}
	if age := now.Sub(cp.CreatedAt); age > s.cfg.CheckpointMaxAge {
		return Errorf(CodeCheckpointStale, "the checkpoint is %s old; at most %s is restored", age.Round(time.Second), s.cfg.CheckpointMaxAge)
	}
	return nil
}

// afterSessionLost moves a running task whose last open session is gone to checkpointed when it
// has a checkpoint to resume from (CONTRACT lifecycle); without one the task stays running and
// the client opens a new session.
func (c *commandCtx) afterSessionLost(ctx context.Context, t *Task, cause string) error {
	if t.State != task.Running {
		return nil
	}
	n, err := c.tx.CountTaskOpenSessions(ctx, t.Tenant, t.ID)
	if err != nil || n > 0 {
		return err
	}
	ok, err := c.tx.TaskHasCheckpoint(ctx, t.Tenant, t.ID)
	if err != nil || !ok {
		return err
	}
	return c.transition(ctx, t, task.SessionsLost, cause)
}

// RecoverLostSessions marks lost the open sessions of nodes that stopped or stopped heartbeating
// (before staleBefore): their browsers are gone with them. A running task left without sessions
// and with a checkpoint becomes checkpointed.
func (s *Service) RecoverLostSessions(ctx context.Context, staleBefore time.Time) (int, error) {
	recs, err := s.store.OrphanedSessions(ctx, staleBefore, 100)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rec := range recs {
		err := s.store.InTx(ctx, func(tx Tx) error {
			t, err := tx.LockTask(ctx, rec.Tenant, rec.TaskID)
			if err != nil {
				return err
			}
			cur, err := tx.LockSession(ctx, rec.Tenant, rec.ID)
			if err != nil || cur.State != SessionOpen {
				return err
			}
			c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: systemActor, Tenant: rec.Tenant, Operation: "recovery"}, t: t, now: s.cfg.Now()}
			if err := c.loseSession(ctx, cur, "node_stopped", map[string]any{"session_id": rec.ID}, true); err != nil {
				return err
			}
			return tx.UpdateTask(ctx, t)
		})
		if err != nil {
			return n, fmt.Errorf("recovering session %s: %w", rec.ID, err)
		}
		n++
	}
	return n, nil
}
