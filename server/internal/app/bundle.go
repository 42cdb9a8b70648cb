package app

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/originweave/bap/server/internal/evidencebundle"
	"github.com/originweave/bap/server/internal/historychain"
)

// maxBundleArchive bounds the WARC a bundle carries (the recording's own per-task cap is lower by
// default; this guards a node configured without one).
const maxBundleArchive = 1 << 30

// PrepareBundle makes the evidence bundle of a task that has ended (issue #20 item 3, ADR 0036),
// ready to write: its history with the chain, anchors, receipts, the task and its result, its
// artifacts, the WARC of its sessions when it was recorded, and a PROV-JSON document, under a
// manifest signed with the audit key. When events followed the last anchor (a session closed
// after the task ended), the head is anchored first, so the bundle's whole history is pinned.
//
// The artifacts and the archive are not held in memory: each write of the bundle reads them
// again (within ctx, which must outlive the writes), one at a time, and checks them against the
// manifest.
func (s *Service) PrepareBundle(ctx context.Context, actor Actor, taskID string) (*evidencebundle.Bundle, error) {
	t, err := s.GetTask(ctx, actor, taskID)
	if err != nil {
		return nil, err
	}
	if !t.State.Terminal() {
		return nil, Errorf(CodeInvalidTransition, "task is %s; a bundle is exported once the task has ended", t.State)
	}
	if err := s.anchorHeadForExport(ctx, t); err != nil {
		return nil, err
	}
	keys, err := s.auditSigner(ctx)
	if err != nil {
		return nil, err
	}
	members, err := s.bundleMembers(ctx, actor, t)
	if err != nil {
		return nil, err
	}
	return evidencebundle.Prepare(t.Tenant, t.ID, s.cfg.Now(), members, evidencebundle.Signer{Key: keys.signer, KeyID: keys.signKID})
}

// anchorHeadForExport anchors t's chain head when it moved past the last anchor.
func (s *Service) anchorHeadForExport(ctx context.Context, t *Task) error {
	anchors, err := s.store.ListAnchors(ctx, t.Tenant, t.ID)
	if err != nil {
		return err
	}
	if len(anchors) > 0 && anchors[len(anchors)-1].Seq >= t.LastSeq {
		return nil
	}
	return s.store.InTx(ctx, func(tx Tx) error {
		locked, err := tx.LockTask(ctx, t.Tenant, t.ID)
		if err != nil {
			return err
		}
		return s.anchor(ctx, tx, locked, historychain.ReasonExported)
	})
}

// bundleTask is task.json: the task and its result as the bundle records them.
type bundleTask struct {
	TaskID       string                     `json:"task_id"`
	Tenant       string                     `json:"tenant_id"`
	Goal         string                     `json:"goal"`
	State        string                     `json:"state"`
	Verification string                     `json:"verification,omitempty"`
	Mode         string                     `json:"mode"`
	CreatedBy    string                     `json:"created_by"`
	CreatedAt    time.Time                  `json:"created_at"`
	EndedAt      *time.Time                 `json:"ended_at,omitempty"`
	LastSeq      int64                      `json:"last_seq"`
	Policy       bundlePolicy               `json:"policy"`
	Result       *bundleResult              `json:"result,omitempty"`
	Anchor       *evidencebundle.AnchorLine `json:"anchor,omitempty"`
}

type bundlePolicy struct {
	AllowedOrigins []string `json:"allowed_origins"`
	Record         bool     `json:"record"`
}

type bundleResult struct {
	Summary             string   `json:"summary"`
	VerificationState   string   `json:"verification_state"`
	VerificationReason  string   `json:"verification_reason"`
	Digest              string   `json:"digest"`
	ManifestArtifactID  string   `json:"manifest_artifact_id"`
	EvidenceArtifactIDs []string `json:"evidence_artifact_ids"`
}

type bundleReceipt struct {
	ReceiptID   string `json:"receipt_id"`
	CommandID   string `json:"command_id"`
	Operation   string `json:"operation"`
	Outcome     string `json:"outcome"`
	ProblemCode string `json:"problem_code,omitempty"`
}

type bundleArtifact struct {
	ArtifactID string    `json:"artifact_id"`
	Kind       string    `json:"kind"`
	MediaType  string    `json:"media_type"`
	SHA256     string    `json:"sha256"`
	Size       int64     `json:"size"`
	SessionID  string    `json:"session_id,omitempty"`
	EpochID    string    `json:"epoch_id,omitempty"`
	CommandID  string    `json:"command_id,omitempty"`
	SourceURL  string    `json:"source_url,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	Member     string    `json:"member"`
}

func anchorLine(a *AnchorRecord) evidencebundle.AnchorLine {
	return evidencebundle.AnchorLine{Seq: a.Seq, Digest: hex.EncodeToString(a.Digest), HistorySHA256: hex.EncodeToString(a.HistorySHA256),
		Reason: a.Reason, KeyID: a.KeyID, Statement: a.Statement, AnchoredAt: a.AnchoredAt.UTC().Format(time.RFC3339Nano)}
}

// bundleMembers reads everything a bundle of t holds.
func (s *Service) bundleMembers(ctx context.Context, actor Actor, t *Task) ([]evidencebundle.Member, error) {
	events, _, err := s.store.ChainedHistory(ctx, t.Tenant, t.ID)
	if err != nil {
		return nil, err
	}
	anchors, err := s.store.ListAnchors(ctx, t.Tenant, t.ID)
	if err != nil {
		return nil, err
	}
	lines := make([]evidencebundle.AnchorLine, len(anchors))
	for i := range anchors {
		lines[i] = anchorLine(&anchors[i])
	}
	var head int64
	if len(events) > 0 {
		head = events[len(events)-1].Seq
	}
	receipts, err := s.store.ManifestReceipts(ctx, t.Tenant, t.ID, head)
	if err != nil {
		return nil, err
	}
	stored, err := s.store.TaskArtifacts(ctx, t.Tenant, t.ID)
	if err != nil {
		return nil, err
	}
	var members []evidencebundle.Member
	add := func(name string, v any) error {
		raw, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding %s: %w", name, err)
		}
		members = append(members, evidencebundle.Member{Name: name, Data: raw})
		return nil
	}
	history, err := evidencebundle.HistoryJSONL(events)
	if err != nil {
		return nil, err
	}
	members = append(members, evidencebundle.Member{Name: evidencebundle.HistoryName, Data: history})
	anchorsRaw, err := evidencebundle.AnchorsJSON(lines)
	if err != nil {
		return nil, err
	}
	members = append(members, evidencebundle.Member{Name: evidencebundle.AnchorsName, Data: anchorsRaw})

	bt := bundleTask{TaskID: t.ID, Tenant: t.Tenant, Goal: t.Goal, State: string(t.State), Verification: t.Verification, Mode: t.Mode,
		CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt, EndedAt: t.EndedAt, LastSeq: head,
		Policy: bundlePolicy{AllowedOrigins: t.Policy.AllowedOrigins, Record: t.Policy.Record}}
	facts := evidencebundle.TaskFacts{TaskID: t.ID, CreatedBy: t.CreatedBy, Goal: t.Goal}
	if r := t.Result; r != nil {
		br := &bundleResult{Summary: r.Summary, VerificationState: r.VerificationState, VerificationReason: r.VerificationReason,
			Digest: r.Digest, ManifestArtifactID: r.ManifestArtifactID, EvidenceArtifactIDs: []string{}}
		for _, a := range r.Evidence {
			br.EvidenceArtifactIDs = append(br.EvidenceArtifactIDs, a.ID)
		}
		bt.Result, facts.ResultArtifactID = br, r.ManifestArtifactID
		if r.Anchor != nil {
			l := anchorLine(r.Anchor)
			bt.Anchor = &l
		}
	}
	if err := add(evidencebundle.TaskName, bt); err != nil {
		return nil, err
	}
	br := make([]bundleReceipt, 0, len(receipts))
	for _, r := range receipts {
		br = append(br, bundleReceipt(r))
	}
	if err := add(evidencebundle.ReceiptsName, br); err != nil {
		return nil, err
	}
	arts := make([]bundleArtifact, 0, len(stored))
	afacts := make([]evidencebundle.ArtifactFacts, 0, len(stored))
	var blobs []evidencebundle.Member
	for i := range stored {
		a := &stored[i]
		id := a.ID
		arts = append(arts, bundleArtifact{ArtifactID: a.ID, Kind: a.Kind, MediaType: a.MediaType, SHA256: a.SHA256, Size: a.Size,
			SessionID: a.SessionID, EpochID: a.EpochID, CommandID: a.CommandID, SourceURL: a.SourceURL, CreatedAt: a.CreatedAt,
			Member: evidencebundle.ArtifactMember(a.ID)})
		afacts = append(afacts, evidencebundle.ArtifactFacts{ID: a.ID, Kind: a.Kind, MediaType: a.MediaType, SHA256: a.SHA256,
			CommandID: a.CommandID, SourceURL: a.SourceURL})
		// Content-addressed: its digest is known, and each write reads it again and checks it.
		blobs = append(blobs, evidencebundle.Member{Name: evidencebundle.ArtifactMember(a.ID), SHA256: a.SHA256, Size: a.Size,
			Open: func() (io.ReadCloser, error) {
				_, data, err := s.store.GetArtifact(ctx, t.Tenant, id)
				if err != nil {
					return nil, fmt.Errorf("reading artifact %s: %w", id, err)
				}
				return io.NopCloser(bytes.NewReader(data)), nil
			}})
	}
	if err := add(evidencebundle.ArtifactsName, arts); err != nil {
		return nil, err
	}
	prov, err := evidencebundle.BuildProvenance(facts, events, afacts)
	if err != nil {
		return nil, err
	}
	members = append(members, evidencebundle.Member{Name: evidencebundle.ProvenanceName, Data: prov})
	members = append(members, blobs...)
	archive, err := s.TaskArchive(ctx, actor, t.ID)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("reading the task's archive: %w", err)
	default:
		archive.Close() // it exists; each write of the bundle reads it again
		// A session that closes after the task ended may still append its last records: the
		// bundle carries the archive as it was when it was digested.
		members = append(members, evidencebundle.Member{Name: evidencebundle.ArchiveMember("sessions.warc"), AppendOnly: true,
			Open: func() (io.ReadCloser, error) {
				r, err := s.TaskArchive(ctx, actor, t.ID)
				if err != nil {
					return nil, fmt.Errorf("reading the task's archive: %w", err)
				}
				return &cappedReader{r: r, left: maxBundleArchive}, nil
			}})
	}
	return members, nil
}

// cappedReader fails a read past its cap rather than ending quietly, so a bundle never carries
// a cut archive.
type cappedReader struct {
	r    io.ReadCloser
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, _ := io.ReadFull(c.r, one[:]); n > 0 {
			return 0, fmt.Errorf("the task's archive is larger than a bundle carries (%d bytes)", int64(maxBundleArchive))
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *cappedReader) Close() error { return c.r.Close() }
