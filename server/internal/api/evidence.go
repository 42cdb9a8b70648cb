package api

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// Evidence and artifacts: capture_evidence stores screenshots, MHTML and accessibility snapshots
// as content-addressed artifacts; get_artifact answers their bytes, verify_artifact re-hashes them
// and checks their provenance.

func toArtifact(a *app.Artifact) apigen.Artifact {
	out := apigen.Artifact{ArtifactId: a.ID, MediaType: a.MediaType, Sha256: a.SHA256, Size: int(a.Size),
		TaskId: ptr(a.TaskID)}
	if a.Kind != "" {
		out.Kind = ptr(apigen.ArtifactKind(a.Kind))
	}
	if !a.CreatedAt.IsZero() {
		out.CreatedAt = ptr(a.CreatedAt)
	}
	return out
}

var evidenceResponder = responder[*app.EvidenceResult]{status: 200, render: func(res *app.EvidenceResult) (any, error) {
	out := apigen.CaptureEvidenceResponse{Artifacts: make([]apigen.Artifact, 0, len(res.Artifacts)), Receipt: toReceipt(res.Receipt)}
	for _, a := range res.Artifacts {
		out.Artifacts = append(out.Artifacts, toArtifact(a))
	}
	return out, nil
}}

// CaptureEvidence implements apigen.ServerInterface.
func (s *server) CaptureEvidence(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CaptureEvidenceParams) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	var body apigen.CaptureEvidenceRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	kinds := make([]string, 0, len(body.Kinds))
	for _, k := range body.Kinds {
		kinds = append(kinds, string(k))
	}
	resp, err := s.svc.CaptureEvidence(r.Context(), req.call, id, app.EvidenceRequest{
		ContextID: deref(body.ContextId), Kinds: kinds, FullPage: deref(body.FullPage), NodeID: deref(body.NodeId),
	}, evidenceResponder)
	s.reply(w, r, resp, err)
}

// reprDigest is the RFC 9530 Repr-Digest field value of b.
func reprDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return reprDigestOf(sum[:])
}

// reprDigestOf is the Repr-Digest field (RFC 9530) of a representation whose SHA-256 is sum.
func reprDigestOf(sum []byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum) + ":"
}

// GetArtifact implements apigen.ServerInterface: the artifact's bytes as they are stored.
func (s *server) GetArtifact(w http.ResponseWriter, r *http.Request, id apigen.ArtifactId) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	a, content, err := s.svc.GetArtifact(r.Context(), req.principal.Actor, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Repr-Digest", reprDigest(content))
	h.Set("Content-Length", strconv.Itoa(len(content)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
	writeRaw(w, http.StatusOK, a.MediaType, content)
}

// VerifyArtifact implements apigen.ServerInterface.
func (s *server) VerifyArtifact(w http.ResponseWriter, r *http.Request, id apigen.ArtifactId) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	var body apigen.VerifyArtifactRequest
	if len(req.body) > 0 && !s.decodeBody(w, req, &body) {
		return
	}
	res, err := s.svc.VerifyArtifact(r.Context(), req.principal.Actor, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	a := res.Artifact
	valid := res.Valid && (body.Sha256 == nil || *body.Sha256 == a.SHA256)
	prov := apigen.Provenance{ArtifactId: a.ID, TaskId: a.TaskID, CapturedAt: a.CreatedAt}
	for dst, v := range map[**string]string{
		&prov.SessionId: a.SessionID, &prov.EpochId: a.EpochID, &prov.CommandId: a.CommandID,
		&prov.ReceiptId: res.ReceiptID, &prov.Url: a.SourceURL,
	} {
		if v != "" {
			*dst = ptr(v)
		}
	}
	writeJSON(w, http.StatusOK, apigen.VerifyArtifactResponse{ArtifactId: ptr(a.ID), Sha256: a.SHA256, Size: ptr(int(a.Size)),
		Valid: valid, Provenance: prov})
}
