package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/originweave/bap/server/internal/page"
)

// What a replay needs (issue #20 item 4, ADR 0035). The history of a task says that an act ran
// (action.performed: its action and node handle) but not on what, nor what the page showed
// after: a node handle is valid for one document epoch of one session, and a replay has neither.
// So each navigate and act of a recording task (policy.record) also leaves a record.step event:
// the navigate's URL; the act's action and its target described engine-neutrally (role,
// accessible name, and the URL of the frame holding it); a fill's value only as what kind it
// was (a secret, by its reference, or a plain value, whose value is kept sealed apart in
// task_fill_value for a replay to type again); and what followed: the page's URL, whether the document changed (an epoch
// transition), and a keyed digest of the observation. Only recording tasks pay for it: one
// observation before an act (to name its target) and one after each step.

// StepTarget is an act's target as a replay can find it again in another session.
type StepTarget struct {
	Role  string `json:"role"`
	Name  string `json:"name"`
	Frame string `json:"frame"` // the URL of the frame's document holding it; "" in the top document
}

// stepTrace is what a recording task's step observed, for its record.step event.
type stepTrace struct {
	target        *StepTarget
	effect        string // what ClassifyAction gave the act
	beforeEpoch   string
	url, epochID  string
	digest        string
	observedAfter bool
}

// traceTarget observes the page before an act to describe its target: the node its handle
// names, or its query's best match. nil when the target cannot be found (the act then fails on
// its own, or acts on what the browser resolves; the step records no target).
func (s *Service) traceTarget(ctx context.Context, sess BrowserSession, req page.ActRequest) (*StepTarget, string) {
	snap, err := sess.Observe(ctx, page.ObserveRequest{ContextID: req.ContextID})
	if err != nil {
		return nil, ""
	}
	nodeID := req.NodeID
	if nodeID == "" && req.Query != nil {
		res, err := sess.QueryNodes(ctx, page.QueryRequest{ContextID: req.ContextID, Query: *req.Query, Limit: 1})
		if err != nil || len(res.Nodes) == 0 {
			return nil, snap.EpochID
		}
		nodeID = res.Nodes[0].NodeID
		if t := findTarget(snap.Nodes, nodeID, ""); t != nil {
			return t, snap.EpochID
		}
		return &StepTarget{Role: res.Nodes[0].Role, Name: res.Nodes[0].Name}, snap.EpochID
	}
	return findTarget(snap.Nodes, nodeID, ""), snap.EpochID
}

// findTarget finds the node nodeID in a snapshot's tree; frame is the URL of the frame document
// the nodes are in.
func findTarget(nodes []page.Node, nodeID, frame string) *StepTarget {
	for i := range nodes {
		n := &nodes[i]
		if n.NodeID == nodeID && nodeID != "" {
			return &StepTarget{Role: n.Role, Name: n.Name, Frame: frame}
		}
		inner := frame
		if n.Role == "iframe" {
			inner = n.URL
		}
		if t := findTarget(n.Children, nodeID, inner); t != nil {
			return t
		}
	}
	return nil
}

// traceActBefore starts the trace of an act of a recording task: its target, and the epoch it
// acts in (the page as it is before the act).
func (s *Service) traceActBefore(ctx context.Context, sess BrowserSession, req page.ActRequest) *stepTrace {
	tr := &stepTrace{}
	tr.target, tr.beforeEpoch = s.traceTarget(ctx, sess, req)
	return tr
}

// traceActAfter ends an act's trace once it ran: its effect (the browser's, else effect) and the
// page after it.
func (s *Service) traceActAfter(ctx context.Context, sess BrowserSession, res *page.ActResult, effect string, tr *stepTrace) {
	tr.effect = res.Effect
	if tr.effect == "" {
		tr.effect = effect
	}
	s.traceAfter(ctx, sess, res.ContextID, tr)
}

// traceAfter observes the page after a step: its URL, epoch and the observation's digest.
func (s *Service) traceAfter(ctx context.Context, sess BrowserSession, contextID string, tr *stepTrace) {
	snap, err := sess.Observe(ctx, page.ObserveRequest{ContextID: contextID})
	if err != nil {
		return
	}
	tr.url, tr.epochID, tr.digest, tr.observedAfter = snap.URL, snap.EpochID, s.keys.observationDigest(snap), true
}

// observationDigest is a keyed digest of what a snapshot shows, without what differs from one
// session to another for the same page (node handles, observation ids, context ids): two
// sessions showing the same document the same way digest alike. Keyed, because a page may show
// a protected value (a form control holds what a fill typed).
func (k keyring) observationDigest(snap *page.Snapshot) string {
	type shown struct {
		URL   string      `json:"url"`
		Title string      `json:"title"`
		Nodes []page.Node `json:"nodes"`
	}
	b, err := json.Marshal(shown{URL: snap.URL, Title: snap.Title, Nodes: withoutHandles(snap.Nodes)})
	if err != nil {
		return ""
	}
	m := hmac.New(sha256.New, k.observation)
	m.Write(b)
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil))
}

// withoutHandles is a copy of nodes with their handles cleared.
func withoutHandles(nodes []page.Node) []page.Node {
	if len(nodes) == 0 {
		return nil
	}
	out := make([]page.Node, len(nodes))
	for i, n := range nodes {
		n.NodeID = ""
		n.Children = withoutHandles(n.Children)
		out[i] = n
	}
	return out
}

// stepData is the data of a record.step event. A fill's value never enters it: only whether it
// was a secret (by its reference) or a plain value.
func stepData(sessionID, commandID, op string, nav *page.NavigateRequest, act *page.ActRequest, tr *stepTrace) map[string]any {
	data := map[string]any{"session_id": sessionID, "command_id": commandID, "operation": op}
	if nav != nil {
		data["url"] = nav.URL
	}
	if act != nil {
		data["action"] = act.Action
		if tr.effect != "" {
			data["effect"] = tr.effect
		}
		if tr.target != nil {
			data["target"] = map[string]any{"role": tr.target.Role, "name": tr.target.Name, "frame": tr.target.Frame}
		}
		switch {
		case act.SecretRef != "":
			data["fill"], data["secret_ref"] = "secret", act.SecretRef
		case act.Action == "fill":
			data["fill"] = "plain" // its value is kept sealed apart (keepFill), never here
		}
		if act.Action == "select_option" && act.Value != "" {
			data["option"] = act.Value // an option is not a protected value (only fills are)
		}
		if act.Key != "" {
			data["key"] = act.Key
		}
		if len(act.Values) > 0 {
			data["values"] = act.Values
		}
	}
	if tr.observedAfter {
		data["page_url"], data["epoch_id"], data["observation_digest"] = tr.url, tr.epochID, tr.digest
		data["epoch_changed"] = nav != nil || tr.beforeEpoch != "" && tr.beforeEpoch != tr.epochID
	}
	return data
}
