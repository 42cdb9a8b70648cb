package app

import (
	"encoding/json"
	"testing"
)

// Each result a worker reads tells ForPlan its receipt and references, and the stored reply keeps
// what a replay of the worker's key needs: a held act answers 202 with its approval, an opened
// session its id. (It was one type switch over the results; each result now says it itself.)
func TestPlanResponderKeepsEachResultsReferences(t *testing.T) {
	rc := &Receipt{ID: "rcp_1", CommandID: "cmd_1", Outcome: "applied"}
	apr := &Approval{ID: "apr_1"}
	tests := []struct {
		name   string
		run    func(p *PlanResponder) (Response, error)
		status int
		want   PlanResponder // the fields the worker reads (Answered is always true)
		reply  StoredReply
	}{
		{"act done", func(p *PlanResponder) (Response, error) {
			return ForPlan[*ActOutcome](p).Success(&ActOutcome{Done: &ActResult{Receipt: rc}})
		}, 200, PlanResponder{Receipt: rc}, StoredReply{Receipt: toStored(rc)}},
		{"act held", func(p *PlanResponder) (Response, error) {
			return ForPlan[*ActOutcome](p).Success(&ActOutcome{Held: &HeldResult{Approval: apr, Receipt: rc}})
		}, 202, PlanResponder{Receipt: rc, ApprovalID: "apr_1"}, StoredReply{Receipt: toStored(rc), ApprovalID: "apr_1"}},
		{"request_approval", func(p *PlanResponder) (Response, error) {
			return ForPlan[*ApprovalResult](p).Success(&ApprovalResult{Approval: apr, Receipt: rc})
		}, 200, PlanResponder{ApprovalID: "apr_1"}, StoredReply{}},
		{"session", func(p *PlanResponder) (Response, error) {
			return ForPlan[*SessionResult](p).Success(&SessionResult{Session: &SessionRecord{ID: "bs_1"}, Receipt: rc})
		}, 200, PlanResponder{Receipt: rc, SessionID: "bs_1"}, StoredReply{Receipt: toStored(rc), SessionID: "bs_1"}},
		{"resume", func(p *PlanResponder) (Response, error) {
			return ForPlan[*ResumeResult](p).Success(&ResumeResult{Session: &SessionRecord{ID: "bs_2"}, Receipt: rc})
		}, 200, PlanResponder{Receipt: rc, SessionID: "bs_2"}, StoredReply{Receipt: toStored(rc), SessionID: "bs_2"}},
		{"checkpoint", func(p *PlanResponder) (Response, error) {
			return ForPlan[*CheckpointResult](p).Success(&CheckpointResult{Checkpoint: &Checkpoint{ID: "cp_1"}, Receipt: rc})
		}, 200, PlanResponder{Receipt: rc, CheckpointID: "cp_1"}, StoredReply{Receipt: toStored(rc)}},
		{"evidence", func(p *PlanResponder) (Response, error) {
			return ForPlan[*EvidenceResult](p).Success(&EvidenceResult{Artifacts: []*Artifact{{ID: "art_1"}, {ID: "art_2"}}, Receipt: rc})
		}, 200, PlanResponder{Receipt: rc, ArtifactID: "art_1"}, StoredReply{Receipt: toStored(rc)}},
		{"navigate", func(p *PlanResponder) (Response, error) {
			return ForPlan[*NavigateResult](p).Success(&NavigateResult{Receipt: rc})
		}, 200, PlanResponder{Receipt: rc}, StoredReply{Receipt: toStored(rc)}},
		{"close_task", func(p *PlanResponder) (Response, error) {
			return ForPlan[*CloseResult](p).Success(&CloseResult{Receipt: rc})
		}, 200, PlanResponder{Receipt: rc}, StoredReply{Receipt: toStored(rc)}},
		{"refused", func(p *PlanResponder) (Response, error) {
			return ForPlan[*NavigateResult](p).Failure(&Error{Code: CodeInvalidTransition, Detail: "no"}, rc)
		}, CodeInvalidTransition.Status(), PlanResponder{Receipt: rc, Problem: &Error{Code: CodeInvalidTransition, Detail: "no"}},
			StoredReply{Receipt: toStored(rc), Code: CodeInvalidTransition, Detail: "no"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &PlanResponder{}
			resp, err := tt.run(p)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tt.status {
				t.Errorf("status %d, want %d", resp.Status, tt.status)
			}
			tt.want.Answered = true
			if p.Receipt != tt.want.Receipt || p.ApprovalID != tt.want.ApprovalID || p.SessionID != tt.want.SessionID ||
				p.CheckpointID != tt.want.CheckpointID || p.ArtifactID != tt.want.ArtifactID || !p.Answered ||
				(p.Problem == nil) != (tt.want.Problem == nil) || (p.Problem != nil && *p.Problem != *tt.want.Problem) {
				t.Errorf("kept %+v, want %+v", *p, tt.want)
			}
			want, err := json.Marshal(tt.reply)
			if err != nil {
				t.Fatal(err)
			}
			if string(resp.Body) != string(want) {
				t.Errorf("stored reply %s, want %s", resp.Body, want)
			}
		})
	}
}
