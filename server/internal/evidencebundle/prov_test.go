package evidencebundle

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/historychain"
)

// The PROV document relates what the history records: who ran which command, which approval a
// held command waited for and who decided it, which page each epoch showed and which command
// used it, which command generated each artifact, and which model the task called.
func TestBuildProvenance(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	ev := func(seq int64, typ, actor, cmd, data string) historychain.Event {
		return historychain.Event{Entry: historychain.Entry{Tenant: "local", TaskID: "tsk_a", Seq: seq, Type: typ, Actor: actor,
			CommandID: cmd, Time: at.Add(time.Duration(seq) * time.Second), Data: json.RawMessage(data)}}
	}
	events := []historychain.Event{
		ev(1, "task.created", "agent:local", "", `{}`),
		ev(2, "command.recorded", "agent:local", "cmd_nav", `{"command_id":"cmd_nav","operation":"navigate"}`),
		ev(3, "navigation.committed", "agent:local", "cmd_nav", `{"epoch_id":"ep_1","url":"http://shop.test/form"}`),
		ev(4, "receipt.issued", "agent:local", "cmd_nav", `{"command_id":"cmd_nav","outcome":"applied","receipt_id":"rcp_1"}`),
		ev(5, "approval.requested", "agent:local", "cmd_act", `{"approval_id":"apr_1","command_id":"cmd_act","reason":"pay"}`),
		ev(6, "approval.resolved", "operator:local", "", `{"approval_id":"apr_1","decision":"approve","resolved_by":"operator:local"}`),
		ev(7, "command.recorded", "agent:local", "cmd_act", `{"command_id":"cmd_act","operation":"act","approval_id":"apr_1"}`),
		ev(8, "action.performed", "agent:local", "cmd_act", `{"epoch_id":"ep_1","action":"click"}`),
		ev(9, "model.called", "system:runtime", "", `{"role":"planner","provider":"p","model":"m"}`),
		ev(10, "task.state_changed", "agent:local", "", `{"from":"running","to":"succeeded"}`),
	}
	raw, err := BuildProvenance(TaskFacts{TaskID: "tsk_a", CreatedBy: "agent:local", ResultArtifactID: "art_m"}, events,
		[]ArtifactFacts{{ID: "art_s", Kind: "screenshot", CommandID: "cmd_act", SourceURL: "http://shop.test/form"}, {ID: "art_m", Kind: "other"}})
	if err != nil {
		t.Fatal(err)
	}
	var p Provenance
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	has := func(rel map[string]map[string]any, a, b string, va, vb string) bool {
		for _, r := range rel {
			if r[a] == va && r[b] == vb {
				return true
			}
		}
		return false
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"the task ran from its creation to its end", p.Activity["bap:task-tsk_a"]["prov:endTime"] != nil && p.Activity["bap:task-tsk_a"]["prov:startTime"] != nil},
		{"the navigate's outcome", p.Activity["bap:command-cmd_nav"]["bap:outcome"] == "applied"},
		{"the agent ran the act", has(p.WasAssociatedWith, "prov:activity", "prov:agent", "bap:command-cmd_act", "bap:actor-agent_local")},
		{"the operator decided the approval", has(p.WasAssociatedWith, "prov:activity", "prov:agent", "bap:approval-apr_1", "bap:actor-operator_local")},
		{"the operator is a person", p.Agent["bap:actor-operator_local"]["prov:type"] == "prov:Person"},
		{"the act waited for the approval", has(p.WasInformedBy, "prov:informed", "prov:informant", "bap:command-cmd_act", "bap:approval-apr_1")},
		{"the navigate made the page", has(p.WasGeneratedBy, "prov:entity", "prov:activity", "bap:page-ep_1", "bap:command-cmd_nav")},
		{"the act used the page", has(p.Used, "prov:activity", "prov:entity", "bap:command-cmd_act", "bap:page-ep_1")},
		{"the act generated the screenshot", has(p.WasGeneratedBy, "prov:entity", "prov:activity", "bap:artifact-art_s", "bap:command-cmd_act")},
		{"the result manifest is typed", p.Entity["bap:artifact-art_m"]["prov:type"] == "bap:result_manifest"},
		{"the model is an agent of the task", has(p.WasAssociatedWith, "prov:activity", "prov:agent", "bap:task-tsk_a", "bap:model-p_m")},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: not in %s", c.what, raw)
		}
	}
	if _, err := BuildProvenance(TaskFacts{TaskID: "tsk_a"}, []historychain.Event{ev(1, "task.created", "a", "", `[`)}, nil); err == nil {
		t.Error("an event whose data is not JSON was accepted")
	}
}
