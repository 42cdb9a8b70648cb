package api

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// GetTaskAudit implements apigen.ServerInterface: the server recomputes the task's history chain.
func (s *server) GetTaskAudit(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	rep, err := s.svc.VerifyAudit(r.Context(), req.principal.Actor, taskID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toTaskAudit(rep))
}

// toTaskAudit renders a verification report.
func toTaskAudit(rep *app.AuditReport) apigen.GetTaskAuditResponse {
	r := rep.Report
	out := apigen.GetTaskAuditResponse{TaskId: rep.TaskID, Status: apigen.GetTaskAuditResponseStatusValid, EventsChecked: r.Checked, HeadSeq: r.HeadSeq,
		Anchors: make([]apigen.AuditAnchor, 0, len(rep.Anchors))}
	if r.ChainedFrom > 0 {
		out.ChainedFromSeq = ptr(r.ChainedFrom)
		out.HeadDigest = ptr(hex.EncodeToString(r.HeadDigest))
		out.HistorySha256 = ptr(hex.EncodeToString(r.HistorySHA256))
	}
	if b := r.Break; b != nil {
		out.Status = apigen.GetTaskAuditResponseStatusBroken
		out.BrokenAt = &apigen.AuditBreak{Seq: b.Seq, Reason: apigen.AuditBreakReason(b.Reason), Detail: clip(b.Detail, 500)}
	}
	for i, a := range rep.Anchors {
		wa := toAuditAnchor(&a)
		if i < len(r.Anchors) {
			wa.Valid = ptr(r.Anchors[i].Valid)
		}
		out.Anchors = append(out.Anchors, wa)
	}
	return out
}

// toAuditAnchor renders an anchor.
func toAuditAnchor(a *app.AnchorRecord) apigen.AuditAnchor {
	return apigen.AuditAnchor{Seq: a.Seq, Digest: hex.EncodeToString(a.Digest), HistorySha256: hex.EncodeToString(a.HistorySHA256),
		Reason: apigen.AuditAnchorReason(a.Reason), KeyId: a.KeyID, Statement: a.Statement, AnchoredAt: a.AnchoredAt}
}

// GetAuditKeys implements apigen.ServerInterface: the public keys of the anchors, anonymous.
func (s *server) GetAuditKeys(w http.ResponseWriter, r *http.Request) {
	setOpLabel(r.Context(), "get_audit_keys")
	set, err := s.svc.AuditKeySet(r.Context())
	if err != nil {
		s.log.Error("reading the audit keys", "err", err)
		writeProblem(w, &app.Error{Code: app.CodeOverloaded, Detail: "the audit keys cannot be read now; retry", RetryAfter: time.Second})
		return
	}
	writeJSON(w, http.StatusOK, set)
}

// clip shortens s to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// bundleScope is what get_task_bundle needs beside bap:tasks.read: the bundle carries the task's
// artifacts, which get_artifact answers only with it.
const bundleScope = "bap:artifacts.read"

// GetTaskBundle implements apigen.ServerInterface: the task's evidence bundle, a tar file. The
// bundle is written twice and held in memory neither time: once to learn its length and digest
// (a failure then is a problem, never half a bundle), once to send it. A member that cannot be
// read again while it is sent cuts the response short of its Content-Length, which no client
// takes for a whole bundle.
func (s *server) GetTaskBundle(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	if !req.principal.Scopes[bundleScope] {
		if op, _ := r.Context().Value(opCtxKey{}).(*operation); op != nil {
			s.refused(r, op, req.principal, string(app.CodeInsufficientScope))
		}
		writeProblem(w, app.Errorf(app.CodeInsufficientScope,
			"a bundle carries the task's artifacts: it needs the %s capability too, as get_artifact does", bundleScope))
		return
	}
	b, err := s.svc.PrepareBundle(r.Context(), req.principal.Actor, taskID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sum := sha256.New()
	n, err := b.WriteTo(sum)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Repr-Digest", reprDigestOf(sum.Sum(nil)))
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", `attachment; filename="`+taskID+`.bundle.tar"`)
	writeRawHeader(w, http.StatusOK, "application/x-tar")
	if _, err := b.WriteTo(w); err != nil && r.Context().Err() == nil {
		s.log.Warn("a bundle stopped while it was sent", "task_id", taskID, "err", err)
	}
}
