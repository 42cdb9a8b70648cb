package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
)

// The planner's proposal is validated against the step schema before anything runs: only the
// public vocabulary, closed arguments, one target.
func TestValidateProposal(t *testing.T) {
	ok := []string{
		`{"op":"navigate","args":{"url":"https://shop.example.com/cart"}}`,
		`{"op":"observe","args":{}}`,
		`{"op":"observe"}`,
		`{"op":"act","args":{"action":"fill","query":{"label":"Email"},"value":"a@b.c"}}`,
		`{"op":"act","args":{"action":"click","node_id":"nd_abc"}}`,
		`{"op":"act","args":{"action":"fill","query":{"label":"Password"},"secret_ref":"sec_Xq4Lm9Tz2Rb7"}}`, // by reference (issue #17)
		`{"op":"extract","args":{"kind":"text"}}`,
		`{"op":"capture_evidence","args":{"kinds":["screenshot","dom_snapshot"]}}`,
	}
	for _, s := range ok {
		var p proposal
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			t.Fatal(err)
		}
		st, err := validateProposal(p)
		if err != nil || st.Op != p.Op || st.MaxAttempts != 1 {
			t.Errorf("%s: %+v, %v", s, st, err)
		}
	}
	bad := []string{
		`{"op":"evaluate","args":{"script":"alert(1)"}}`,                                               // not in the vocabulary
		`{"op":"navigate","args":{"url":"javascript:alert(1)"}}`,                                       // not http(s)
		`{"op":"navigate","args":{"url":"https://x.test","headers":{"a":"b"}}}`,                        // unknown field
		`{"op":"act","args":{"action":"click"}}`,                                                       // no target
		`{"op":"act","args":{"action":"click","node_id":"nd_a","query":{"role":"button"}}}`,            // two targets
		`{"op":"act","args":{"action":"eval","query":{"role":"button"}}}`,                              // unknown action
		`{"op":"act","args":{"action":"fill","query":{"label":"Email"}}}`,                              // fill without value
		`{"op":"act","args":{"action":"fill","query":{"label":"P"},"value":"x","secret_ref":"sec_a"}}`, // value and reference
		`{"op":"act","args":{"action":"click","query":{"label":"P"},"secret_ref":"sec_a"}}`,            // a reference outside a fill
		`{"op":"act","args":{"action":"fill","query":{"label":"P"},"secret_ref":"shop-login"}}`,        // a name, not a reference
		`{"op":"act","args":{"action":"click","query":{}}}`,                                            // empty query
		`{"op":"act","args":{"action":"click","query":{"css":"#x"}}}`,                                  // selectors do not exist
		`{"op":"extract","args":{"kind":"cookies"}}`,                                                   // unknown kind
		`{"op":"capture_evidence","args":{"kinds":["har"]}}`,                                           // unknown kind
		`{"op":"capture_evidence","args":{}}`,                                                          // no kind
		`{"op":"navigate","args":{"url":"https://x.test","timeout_ms":999999999}}`,                     // out of range
	}
	for _, s := range bad {
		var p proposal
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			t.Fatal(err)
		}
		if _, err := validateProposal(p); err == nil {
			t.Errorf("%s: accepted", s)
		}
	}
	if !json.Valid(plannerSchema) || !json.Valid(verifierSchema) {
		t.Fatal("a model answer schema is not valid JSON")
	}
}

// What a fill types is masked in stored and recorded arguments; a page's form values are masked,
// and values the run filled are scrubbed wherever the page echoes them.
func TestMasking(t *testing.T) {
	const secret = "hunter2-CANARY"
	args := maskArgs("act", json.RawMessage(`{"action":"fill","query":{"label":"Password"},"value":"`+secret+`"}`))
	if strings.Contains(string(args), secret) || !strings.Contains(string(args), `"value":"***"`) {
		t.Fatalf("masked args: %s", args)
	}
	if got := maskArgs("navigate", json.RawMessage(`{"url":"https://x.test"}`)); string(got) != `{"url":"https://x.test"}` {
		t.Fatalf("navigate args changed: %s", got)
	}
	sc := &scrubber{}
	sc.add(filledValue(app.PlanStep{Op: "act", Args: json.RawMessage(`{"action":"fill","value":"` + secret + `"}`)}))
	sc.add("ab") // too short to scrub from text
	snap := &page.Snapshot{URL: "https://x.test/?q=" + secret, Title: "Hello " + secret, Nodes: []page.Node{
		{Role: "textbox", Name: "User", Value: "alice"},
		{Role: "textbox", Name: "Password", InputType: "password"},
		{Role: "paragraph", Children: []page.Node{{Role: "text", Value: "you typed " + secret + " ab"}}},
		{Role: "combobox", Name: "Country", Value: "France", Options: []string{"France", secret}},
	}}
	obs := maskSnapshot(snap, sc)
	raw, _ := json.Marshal(obs)
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "alice") {
		t.Fatalf("observation leaks: %s", raw)
	}
	if !strings.Contains(string(raw), "you typed *** ab") || obs.Nodes[0].Value != "***" {
		t.Fatalf("observation: %s", raw)
	}
	if snap.Nodes[0].Value != "alice" {
		t.Fatal("masking changed the snapshot it copied")
	}
	if got := scrubJSON(json.RawMessage(`{"reason":"I typed `+secret+`"}`), sc); strings.Contains(string(got), secret) {
		t.Fatalf("scrubJSON: %s", got)
	}
}
