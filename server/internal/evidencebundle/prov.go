package evidencebundle

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/originweave/bap/server/internal/historychain"
)

// ProvNamespace is the namespace of BAP's PROV identifiers and attributes.
const ProvNamespace = "urn:bap:"

// Provenance is a W3C PROV-JSON document (PROV-JSON, W3C Member Submission 2013): the agents
// (clients, people, the runtime, models), the activities (the task, its commands, its approvals),
// the entities (artifacts, the pages each document epoch showed) and how they relate.
type Provenance struct {
	Prefix            map[string]string         `json:"prefix"`
	Entity            map[string]map[string]any `json:"entity"`
	Activity          map[string]map[string]any `json:"activity"`
	Agent             map[string]map[string]any `json:"agent"`
	WasGeneratedBy    map[string]map[string]any `json:"wasGeneratedBy"`
	Used              map[string]map[string]any `json:"used"`
	WasAssociatedWith map[string]map[string]any `json:"wasAssociatedWith"`
	WasInformedBy     map[string]map[string]any `json:"wasInformedBy"`
	WasAttributedTo   map[string]map[string]any `json:"wasAttributedTo"`
}

// TaskFacts is what the provenance says of the task beyond its history.
type TaskFacts struct {
	TaskID, CreatedBy, Goal string
	// ResultArtifactID is the result manifest ("" without a result).
	ResultArtifactID string
}

// ArtifactFacts is one artifact as the provenance describes it.
type ArtifactFacts struct {
	ID, Kind, MediaType, SHA256, CommandID, SourceURL string
}

var unsafeQName = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// qname makes a PROV qualified name of BAP's namespace from an identifier (actors hold ':').
func qname(kind, id string) string {
	return "bap:" + kind + "-" + unsafeQName.ReplaceAllString(id, "_")
}

// BuildProvenance derives the PROV document from a task's history and artifacts: every event is
// already a durable record, so the provenance states nothing the chain does not pin.
func BuildProvenance(t TaskFacts, events []historychain.Event, artifacts []ArtifactFacts) ([]byte, error) {
	p := Provenance{
		Prefix: map[string]string{"bap": ProvNamespace}, Entity: map[string]map[string]any{}, Activity: map[string]map[string]any{},
		Agent: map[string]map[string]any{}, WasGeneratedBy: map[string]map[string]any{}, Used: map[string]map[string]any{},
		WasAssociatedWith: map[string]map[string]any{}, WasInformedBy: map[string]map[string]any{}, WasAttributedTo: map[string]map[string]any{},
	}
	n := 0
	rel := func(m map[string]map[string]any, attrs map[string]any) {
		n++
		m[fmt.Sprintf("_:r%d", n)] = attrs
	}
	agent := func(id string) string {
		q := qname("actor", id)
		if _, ok := p.Agent[q]; !ok {
			typ := "prov:SoftwareAgent"
			if len(id) > 9 && (id[:9] == "operator:" || id[:9] == "approver:") || len(id) > 5 && id[:5] == "user:" {
				typ = "prov:Person"
			}
			p.Agent[q] = map[string]any{"prov:type": typ, "bap:actor": id}
		}
		return q
	}
	taskQ := qname("task", t.TaskID)
	p.Activity[taskQ] = map[string]any{"prov:type": "bap:task", "bap:task_id": t.TaskID, "bap:goal": t.Goal}
	if t.CreatedBy != "" {
		rel(p.WasAssociatedWith, map[string]any{"prov:activity": taskQ, "prov:agent": agent(t.CreatedBy), "prov:role": "bap:creator"})
	}
	pageOfEpoch := map[string]string{}
	for _, e := range events {
		var d map[string]any
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return nil, fmt.Errorf("event %d: %w", e.Seq, err)
		}
		at := historychain.FormatTime(e.Time)
		str := func(k string) string { s, _ := d[k].(string); return s }
		switch e.Type {
		case "task.created":
			p.Activity[taskQ]["prov:startTime"] = at
		case "task.state_changed":
			if to := str("to"); to == "succeeded" || to == "failed" || to == "cancelled" || to == "expired" {
				p.Activity[taskQ]["prov:endTime"] = at
				p.Activity[taskQ]["bap:state"] = to
			}
		case "command.recorded":
			cmd := qname("command", str("command_id"))
			p.Activity[cmd] = map[string]any{"prov:type": "bap:command", "bap:command_id": str("command_id"),
				"bap:operation": str("operation"), "prov:startTime": at}
			rel(p.WasAssociatedWith, map[string]any{"prov:activity": cmd, "prov:agent": agent(e.Actor)})
			rel(p.WasInformedBy, map[string]any{"prov:informed": cmd, "prov:informant": taskQ})
			if a := str("approval_id"); a != "" {
				rel(p.WasInformedBy, map[string]any{"prov:informed": cmd, "prov:informant": qname("approval", a)})
			}
		case "receipt.issued":
			if act, ok := p.Activity[qname("command", str("command_id"))]; ok {
				act["prov:endTime"] = at
				act["bap:outcome"] = str("outcome")
				act["bap:receipt_id"] = str("receipt_id")
			}
		case "approval.requested":
			a := qname("approval", str("approval_id"))
			p.Activity[a] = map[string]any{"prov:type": "bap:approval", "bap:approval_id": str("approval_id"),
				"bap:reason": str("reason"), "prov:startTime": at}
			if c := str("command_id"); c != "" {
				rel(p.WasInformedBy, map[string]any{"prov:informed": a, "prov:informant": qname("command", c)})
			}
		case "approval.resolved":
			a := qname("approval", str("approval_id"))
			if act, ok := p.Activity[a]; ok {
				act["prov:endTime"] = at
				act["bap:decision"] = str("decision")
			}
			if by := str("resolved_by"); by != "" {
				rel(p.WasAssociatedWith, map[string]any{"prov:activity": a, "prov:agent": agent(by), "prov:role": "bap:approver"})
			}
		case "navigation.committed":
			page := qname("page", str("epoch_id"))
			pageOfEpoch[str("epoch_id")] = page
			p.Entity[page] = map[string]any{"prov:type": "bap:page", "prov:location": str("url"), "bap:epoch_id": str("epoch_id")}
			if e.CommandID != "" {
				rel(p.WasGeneratedBy, map[string]any{"prov:entity": page, "prov:activity": qname("command", e.CommandID), "prov:time": at})
			}
		case "action.performed":
			if page, ok := pageOfEpoch[str("epoch_id")]; ok && e.CommandID != "" {
				rel(p.Used, map[string]any{"prov:activity": qname("command", e.CommandID), "prov:entity": page, "prov:time": at})
			}
		case "model.called":
			model := qname("model", str("provider")+"/"+str("model"))
			p.Agent[model] = map[string]any{"prov:type": "prov:SoftwareAgent", "bap:provider": str("provider"), "bap:model": str("model")}
			rel(p.WasAssociatedWith, map[string]any{"prov:activity": taskQ, "prov:agent": model, "prov:role": "bap:" + str("role")})
		}
	}
	for _, a := range artifacts {
		q := qname("artifact", a.ID)
		p.Entity[q] = map[string]any{"prov:type": "bap:" + a.Kind, "bap:artifact_id": a.ID, "bap:media_type": a.MediaType,
			"bap:sha256": a.SHA256, "bap:member": ArtifactMember(a.ID)}
		if a.SourceURL != "" {
			p.Entity[q]["prov:location"] = a.SourceURL
		}
		gen := taskQ
		if _, ok := p.Activity[qname("command", a.CommandID)]; ok && a.CommandID != "" {
			gen = qname("command", a.CommandID)
		}
		rel(p.WasGeneratedBy, map[string]any{"prov:entity": q, "prov:activity": gen})
		if t.CreatedBy != "" {
			rel(p.WasAttributedTo, map[string]any{"prov:entity": q, "prov:agent": agent(t.CreatedBy)})
		}
	}
	if t.ResultArtifactID != "" {
		if e, ok := p.Entity[qname("artifact", t.ResultArtifactID)]; ok {
			e["prov:type"] = "bap:result_manifest"
		}
	}
	// Deterministic: encoding/json sorts map keys, and relation ids follow the history's order.
	return json.MarshalIndent(p, "", "  ")
}
