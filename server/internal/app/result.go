package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/originweave/bap/server/internal/ids"
)

// A finished task's result (CONTRACT "Results", issue #23 item 5): `succeeded` says the task
// finished, result.verification says whether anyone checked. The runtime alone decides the
// verification, from the postcondition it evaluated itself and the evidence it captured: a task
// that ends succeeded without evidence is unverified, whatever a model or a worker claims. The
// result's digest is the SHA-256 of a canonical manifest of the task's receipts and its
// evidence's digests, stored as an artifact of kind result_manifest; verify_artifact on it
// re-builds the manifest from the records and compares.

// ArtifactKindResultManifest is the kind of a result's manifest artifact.
const ArtifactKindResultManifest = "result_manifest"

// ResultManifestFormat names the manifest's layout.
const ResultManifestFormat = "bap.result-manifest/1"

// resultManifest is the canonical manifest: JSON with keys in lexicographic order (fields are
// declared sorted), no insignificant white space, no HTML escaping.
type resultManifest struct {
	Evidence     []manifestEvidence   `json:"evidence"`
	Format       string               `json:"format"`
	Receipts     []manifestReceiptRow `json:"receipts"`
	State        string               `json:"state"`
	Summary      string               `json:"summary"`
	TaskID       string               `json:"task_id"`
	Verification manifestVerification `json:"verification"`
}

type manifestEvidence struct {
	ArtifactID string `json:"artifact_id"`
	Kind       string `json:"kind"`
	MediaType  string `json:"media_type"`
	SHA256     string `json:"sha256"`
}

type manifestReceiptRow struct {
	CommandID   string `json:"command_id"`
	Operation   string `json:"operation"`
	Outcome     string `json:"outcome"`
	ProblemCode string `json:"problem_code,omitempty"`
	ReceiptID   string `json:"receipt_id"`
}

type manifestVerification struct {
	Reason string `json:"reason"`
	State  string `json:"state"`
}

// buildManifest encodes the canonical manifest of a result of a task in state.
func buildManifest(state string, r *ResultRecord, receipts []ManifestReceipt) ([]byte, error) {
	m := resultManifest{
		Evidence: make([]manifestEvidence, 0, len(r.Evidence)), Format: ResultManifestFormat,
		Receipts: make([]manifestReceiptRow, 0, len(receipts)), State: state, Summary: r.Summary, TaskID: r.TaskID,
		Verification: manifestVerification{Reason: r.VerificationReason, State: r.VerificationState},
	}
	for _, a := range r.Evidence {
		m.Evidence = append(m.Evidence, manifestEvidence{ArtifactID: a.ID, Kind: a.Kind, MediaType: a.MediaType, SHA256: a.SHA256})
	}
	for _, rc := range receipts {
		m.Receipts = append(m.Receipts, manifestReceiptRow{CommandID: rc.CommandID, Operation: rc.Operation,
			Outcome: rc.Outcome, ProblemCode: rc.ProblemCode, ReceiptID: rc.ReceiptID})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("encoding the result manifest: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// judgeResult decides a closing task's verification and summary from what the runtime itself
// found: the postcondition's verdict (verified, unverified without one, unmet) and the evidence.
func judgeResult(state, verification string, clauses, unmet, evidence int) (vstate, reason, summary string) {
	switch {
	case state == "succeeded" && evidence == 0:
		vstate, reason = VerificationUnverified, "no evidence of the page was captured, so nothing shows the task did what it was for"
	case verification == "verified":
		vstate, reason = VerificationVerified, fmt.Sprintf("all %d postcondition clauses held on the page the evidence shows", clauses)
	case verification == "unmet":
		vstate, reason = VerificationUnverified, fmt.Sprintf("%d of %d postcondition clauses did not hold", unmet, clauses)
	default:
		vstate, reason = VerificationUnverified, "the task declared no postcondition, so nothing was checked"
	}
	summary = fmt.Sprintf("The task %s; its result is %s: %s.", state, vstate, reason)
	return vstate, reason, summary
}

// recordResult writes the result of the task close_task just ended (after its receipt, so the
// manifest covers every receipt up to the close's own) and sets it on c.t.
func (c *commandCtx) recordResult(ctx context.Context, verification string, clauses, unmet int) (*ResultRecord, error) {
	rt := c.tx
	evidence, err := rt.TaskEvidence(ctx, c.t.Tenant, c.t.ID)
	if err != nil {
		return nil, err
	}
	state := string(c.t.State)
	r := &ResultRecord{Tenant: c.t.Tenant, TaskID: c.t.ID, CommandID: c.cmd.ID, ThroughSeq: c.t.LastSeq,
		Evidence: evidence, CreatedAt: c.now}
	r.VerificationState, r.VerificationReason, r.Summary = judgeResult(state, verification, clauses, unmet, len(evidence))
	receipts, err := rt.ManifestReceipts(ctx, c.t.Tenant, c.t.ID, r.ThroughSeq)
	if err != nil {
		return nil, err
	}
	manifest, err := buildManifest(state, r, receipts)
	if err != nil {
		return nil, err
	}
	a := &Artifact{ID: ids.New(ids.Artifact), Tenant: c.t.Tenant, SHA256: sha256Hex(manifest), Size: int64(len(manifest)),
		MediaType: "application/json", Kind: ArtifactKindResultManifest, TaskID: c.t.ID, CommandID: c.cmd.ID, CreatedAt: c.now}
	if err := c.tx.InsertArtifact(ctx, a, manifest); err != nil {
		return nil, err
	}
	r.ManifestArtifactID, r.Digest = a.ID, a.SHA256
	if err := rt.InsertTaskResult(ctx, r); err != nil {
		return nil, err
	}
	c.t.Result = r
	return r, nil
}

// verifyManifest re-builds the manifest of the result a manifest artifact belongs to from the
// records as they are now; ok is false when it differs from the stored one (a receipt, an
// evidence digest or the result changed since the task closed). isManifest is false for an
// artifact that is no result's manifest.
func (s *Service) verifyManifest(ctx context.Context, a *Artifact, stored []byte) (isManifest, ok bool, err error) {
	if a.Kind != ArtifactKindResultManifest {
		return false, false, nil
	}
	rs := s.store
	r, err := rs.TaskResultByManifest(ctx, a.Tenant, a.ID)
	if err != nil {
		if AsError(err) != nil {
			return true, false, nil // a manifest no result names does not verify
		}
		return true, false, err
	}
	t, err := s.store.GetTask(ctx, a.Tenant, r.TaskID)
	if err != nil {
		return true, false, err
	}
	receipts, err := rs.ManifestReceipts(ctx, a.Tenant, r.TaskID, r.ThroughSeq)
	if err != nil {
		return true, false, err
	}
	rebuilt, err := buildManifest(string(t.State), r, receipts)
	if err != nil {
		return true, false, err
	}
	return true, bytes.Equal(rebuilt, stored) && sha256Hex(rebuilt) == r.Digest, nil
}
