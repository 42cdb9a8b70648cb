package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// Evidence kinds capture_evidence takes.
const (
	EvidenceScreenshot  = "screenshot"
	EvidenceDOMSnapshot = "dom_snapshot"
	EvidenceAXSnapshot  = "ax_snapshot"
)

// Artifact is an artifact reference: stored bytes (content-addressed by SHA-256) and where they
// came from.
type Artifact struct {
	ID        string
	Tenant    string
	SHA256    string // 64 lowercase hex characters
	Size      int64
	MediaType string
	Kind      string
	TaskID    string
	SessionID string
	ContextID string // not stored: known at capture only
	EpochID   string
	CommandID string
	SourceURL string
	CreatedAt time.Time
}

// ArtifactChain is what the provenance rows an artifact names say: each check is true when the
// row exists in the artifact's tenant and agrees with the reference.
type ArtifactChain struct {
	TaskOK    bool   // the task exists
	SessionOK bool   // no session named, or it is a session of that task
	EpochOK   bool   // no epoch named, or it is a document epoch of that session
	CommandOK bool   // no command named, or it is a command of that task
	ReceiptID string // the receipt of the command ("" when none)
}

// EvidenceResult is the result of capture_evidence.
type EvidenceResult struct {
	Artifacts []*Artifact
	Receipt   *Receipt
}

// VerifyResult is the result of verify_artifact.
type VerifyResult struct {
	Artifact  *Artifact
	Valid     bool
	ReceiptID string
}

// capturedBlob is one captured piece of evidence, before it is stored.
type capturedBlob struct {
	kind, mediaType string
	content         []byte
}

type evidenceOut struct {
	contextID, epochID, url string
	blobs                   []capturedBlob
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CaptureEvidence captures screenshots, DOM (MHTML) and accessibility snapshots of a browsing
// context and stores them as artifacts with their provenance.
func (s *Service) CaptureEvidence(ctx context.Context, call Call, sessionID string, req EvidenceRequest, r Responder[*EvidenceResult]) (Response, error) {
	if resp, ok, err := s.replayFirst(ctx, call); ok || err != nil {
		return resp, err
	}
	if _, err := s.browserOrUnavailable(); err != nil {
		return Response{}, err
	}
	kinds := req.Kinds
	if req.FullPage && req.NodeID != "" {
		return Response{}, &Error{Code: CodeInvalidRequest, Detail: "give full_page or node_id, not both"}
	}
	if len(kinds) == 0 {
		return Response{}, &Error{Code: CodeInvalidRequest, Detail: "kinds must name at least one evidence kind"}
	}
	for _, k := range kinds {
		switch k {
		case EvidenceScreenshot, EvidenceDOMSnapshot, EvidenceAXSnapshot:
		default:
			return Response{}, Errorf(CodeInvalidRequest, "unknown evidence kind %q", k)
		}
	}
	rec, err := s.sessionOf(ctx, call.Actor, sessionID)
	if err != nil {
		return Response{}, err
	}
	if slices.Contains(kinds, EvidenceDOMSnapshot) { // refused before it becomes a command
		if err := s.requireCapability(rec.Engine, CapMHTMLEvidence, "capture dom_snapshot evidence (an MHTML archive)"); err != nil {
			return Response{}, err
		}
	}
	return runTwoPhase(ctx, s, call, rec.TaskID, r, twoPhase[*sessionPlan, *evidenceOut, *EvidenceResult]{
		sideEffecting: false, // reading the page changes nothing
		prepare:       prepareSession(sessionID, defaultCommandTimeout),
		dispatch: onLiveSession(s, 0, func(ctx context.Context, sess BrowserSession, _ *sessionPlan) (*evidenceOut, error) {
			return captureEvidence(ctx, sess, req)
		}),
		finish: func(ctx context.Context, c *commandCtx, plan *sessionPlan, ev *evidenceOut, dispatchErr error) (*EvidenceResult, task.Outcome, error) {
			rec := plan.rec
			if dispatchErr != nil {
				return finishFailed[*EvidenceResult](ctx, c, rec, dispatchErr, false)
			}
			if err := c.tx.RecordEpoch(ctx, c.t.Tenant, rec.ID, ev.contextID, ev.epochID, ev.url); err != nil {
				return nil, "", err
			}
			res := &EvidenceResult{}
			data := make([]map[string]any, 0, len(ev.blobs))
			for _, b := range ev.blobs {
				a := &Artifact{
					ID: ids.New(ids.Artifact), Tenant: c.t.Tenant, SHA256: sha256Hex(b.content), Size: int64(len(b.content)),
					MediaType: b.mediaType, Kind: b.kind, TaskID: c.t.ID, SessionID: rec.ID, ContextID: ev.contextID,
					EpochID: ev.epochID, CommandID: c.cmd.ID, SourceURL: ev.url, CreatedAt: c.now,
				}
				if err := c.tx.InsertArtifact(ctx, a, b.content); err != nil {
					return nil, "", err
				}
				res.Artifacts = append(res.Artifacts, a)
				data = append(data, map[string]any{
					"artifact_id": a.ID, "kind": a.Kind, "media_type": a.MediaType, "sha256": a.SHA256, "size": a.Size,
				})
			}
			// The event names the artifacts, never their content.
			if err := c.emit(ctx, c.t, "evidence.captured", "capture_evidence", map[string]any{
				"session_id": rec.ID, "context_id": ev.contextID, "epoch_id": ev.epochID, "artifacts": data,
			}); err != nil {
				return nil, "", err
			}
			s.noteUse(c.t.ID, rec.ID, ev.contextID)
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return nil, "", err
			}
			res.Receipt = rc
			return res, "", nil
		},
	})
}

// EvidenceRequest is the input of capture_evidence: the kinds to capture of a browsing context
// ("" for the session's default one); a screenshot covers the viewport, the whole page
// (FullPage) or one node's box (NodeID).
type EvidenceRequest struct {
	ContextID string
	Kinds     []string
	FullPage  bool
	NodeID    string
}

// captureEvidence captures each kind once, in the order asked. A full observe first names the
// context, epoch and URL the evidence belongs to (and is itself the AX snapshot).
func captureEvidence(ctx context.Context, sess BrowserSession, req EvidenceRequest) (*evidenceOut, error) {
	kinds := req.Kinds
	snap, err := sess.Observe(ctx, page.ObserveRequest{ContextID: req.ContextID, Mode: "full"})
	if err != nil {
		return nil, err
	}
	out := &evidenceOut{contextID: snap.ContextID, epochID: snap.EpochID, url: snap.URL}
	seen := map[string]bool{}
	for _, k := range kinds {
		if seen[k] {
			continue
		}
		seen[k] = true
		var b capturedBlob
		switch k {
		case EvidenceScreenshot:
			png, err := sess.Screenshot(ctx, page.ScreenshotRequest{ContextID: snap.ContextID, FullPage: req.FullPage, NodeID: req.NodeID})
			if err != nil {
				return nil, err
			}
			b = capturedBlob{kind: k, mediaType: "image/png", content: png}
		case EvidenceDOMSnapshot:
			mhtml, err := sess.CaptureMHTML(ctx, snap.ContextID)
			if err != nil {
				return nil, err
			}
			b = capturedBlob{kind: k, mediaType: "multipart/related", content: mhtml}
		case EvidenceAXSnapshot:
			raw, err := json.Marshal(snap)
			if err != nil {
				return nil, fmt.Errorf("encoding the accessibility snapshot: %w", err)
			}
			b = capturedBlob{kind: k, mediaType: "application/json", content: raw}
		}
		out.blobs = append(out.blobs, b)
	}
	return out, nil
}

// GetArtifact reads an artifact of the actor's tenant with its bytes.
// A checkpoint's state holds credentials (cookies, storage) and is never served.
func (s *Service) GetArtifact(ctx context.Context, actor Actor, artifactID string) (*Artifact, []byte, error) {
	a, content, err := s.store.GetArtifact(ctx, actor.Tenant, artifactID)
	if err != nil {
		return nil, nil, err
	}
	if err := servable(a); err != nil {
		return nil, nil, err
	}
	return a, content, nil
}

// servable refuses the artifacts no caller may read — get_artifact serves none of them, and
// upload_file sends none of them into a page: a checkpoint's state holds the session's
// credentials (cookies, storage).
func servable(a *Artifact) *Error {
	if a.Kind == ArtifactKindCheckpoint {
		return &Error{Code: CodeNotFound, Detail: "checkpoint state is never served: it holds the session's credentials"}
	}
	return nil
}

// VerifyArtifact re-hashes an artifact's stored bytes and checks its provenance chain: the task,
// session, epoch and command it names exist in its tenant and agree, and the command has a
// receipt.
func (s *Service) VerifyArtifact(ctx context.Context, actor Actor, artifactID string) (*VerifyResult, error) {
	a, content, err := s.store.GetArtifact(ctx, actor.Tenant, artifactID)
	if err != nil {
		return nil, err
	}
	chain, err := s.store.ArtifactChain(ctx, a)
	if err != nil {
		return nil, err
	}
	valid := sha256Hex(content) == a.SHA256 && int64(len(content)) == a.Size &&
		chain.TaskOK && chain.SessionOK && chain.EpochOK && chain.CommandOK &&
		(a.CommandID == "" || chain.ReceiptID != "")
	// A task result's manifest is valid only while the records it was built from still build it
	// (result.go): its receipts, its evidence's digests, the result and the task's state.
	if isManifest, ok, err := s.verifyManifest(ctx, a, content); err != nil {
		return nil, err
	} else if isManifest && !ok {
		valid = false
	}
	return &VerifyResult{Artifact: a, Valid: valid, ReceiptID: chain.ReceiptID}, nil
}
