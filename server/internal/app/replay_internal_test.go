package app

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/page"
)

// A replayed step is compared with the recorded one field by field in the order a step happens,
// and the first field that differs is the one reported.
func TestCompareStepsNamesTheFirstFieldThatDiffers(t *testing.T) {
	yes, no := true, false
	base := recordedStep{Operation: "act", Action: "click", Target: &StepTarget{Role: "button", Name: "Place order"},
		PageURL: "http://shop.test/thanks?order=1", EpochChanged: &yes, ObservationDigest: "hmac-sha256:aa"}
	for _, tt := range []struct {
		name  string
		edit  func(s *recordedStep)
		field string
	}{
		{"identical", func(*recordedStep) {}, ""},
		{"another action", func(s *recordedStep) { s.Action = "hover"; s.PageURL = "x" }, "operation"},
		{"another frame", func(s *recordedStep) {
			s.Target = &StepTarget{Role: "button", Name: "Place order", Frame: "http://pay.test/"}
		}, "target"},
		{"no target", func(s *recordedStep) { s.Target = nil }, "target"},
		{"another page", func(s *recordedStep) { s.PageURL = "http://shop.test/thanks?order=2"; s.ObservationDigest = "x" }, "url"},
		{"no new document", func(s *recordedStep) { s.EpochChanged = &no }, "epoch"},
		{"another observation", func(s *recordedStep) { s.ObservationDigest = "hmac-sha256:bb" }, "observation"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := base
			tt.edit(&got)
			d := compareSteps(base, got)
			switch {
			case tt.field == "" && d != nil:
				t.Errorf("diverged: %+v", d)
			case tt.field != "" && (d == nil || d.field != tt.field):
				t.Errorf("diff %+v, want field %s", d, tt.field)
			}
		})
	}
}

// The plan of a replay repeats each recorded step once, an act by exact role and name, a fill of
// a secret by its reference, a plain fill with the value it kept; a step it cannot repeat
// faithfully refuses the replay.
func TestReplayPlanRepeatsOnlyWhatItCan(t *testing.T) {
	steps := []recordedStep{
		{Operation: "navigate", URL: "http://shop.test/checkout"},
		{Operation: "act", Action: "fill", Fill: "secret", SecretRef: "sec_1", Target: &StepTarget{Role: "textbox", Name: "Email"}},
		{Operation: "act", Action: "select_option", Option: "fr", Target: &StepTarget{Role: "combobox", Name: "Country"}},
		{Operation: "act", Action: "press_key", Key: "Enter"},
		{CommandID: "cmd_plain", Operation: "act", Action: "fill", Fill: "plain", Target: &StepTarget{Role: "textbox", Name: "Full name"}},
	}
	plan, err := replayPlan(steps, map[string]string{"cmd_plain": "Ada Plain"})
	if err != nil || len(plan) != 5 {
		t.Fatalf("%d steps, %v", len(plan), err)
	}
	var fill map[string]any
	_ = json.Unmarshal(plan[1].Args, &fill)
	if fill["secret_ref"] != "sec_1" || fill["value"] != nil || plan[1].MaxAttempts != 1 ||
		fill["query"].(map[string]any)["exact"] != true || fill["query"].(map[string]any)["name"] != "Email" {
		t.Errorf("the fill step: %s", plan[1].Args)
	}
	var plain map[string]any
	_ = json.Unmarshal(plan[4].Args, &plain)
	if plain["value"] != "Ada Plain" || plain["secret_ref"] != nil {
		t.Errorf("the plain fill step: %s", plan[4].Args)
	}
	for name, bad := range map[string]recordedStep{
		"a plain fill not kept": {CommandID: "cmd_other", Operation: "act", Action: "fill", Fill: "plain", Target: &StepTarget{Role: "textbox"}},
		"an upload":             {Operation: "act", Action: "upload_file", Target: &StepTarget{Role: "button"}},
		"a click on no target":  {Operation: "act", Action: "click"},
		"an unknown operation":  {Operation: "extract"},
	} {
		_, err := replayPlan(append(steps[:1:1], bad), map[string]string{"cmd_plain": "Ada Plain"})
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeReplayNotPossible || !strings.Contains(e.Detail, "step 1") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A live dry run stops before the first act that sent a side effect, or whose effect was not
// recorded (fail closed).
func TestADryRunStopsBeforeTheFirstSideEffect(t *testing.T) {
	nav := recordedStep{Operation: "navigate"}
	fill := recordedStep{Operation: "act", Action: "fill", Effect: page.EffectAnyAction}
	submit := recordedStep{Operation: "act", Action: "click", Effect: page.EffectFormSubmission}
	unknown := recordedStep{Operation: "act", Action: "click"}
	for name, tt := range map[string]struct {
		in   []recordedStep
		want int
	}{
		"up to the submit":      {[]recordedStep{nav, fill, submit, nav}, 2},
		"no side effect at all": {[]recordedStep{nav, fill, nav}, 3},
		"an unrecorded effect":  {[]recordedStep{nav, unknown, fill}, 1},
		"a side effect first":   {[]recordedStep{submit, nav}, 0},
	} {
		if got := len(beforeSideEffect(tt.in)); got != tt.want {
			t.Errorf("%s: %d steps, want %d", name, got, tt.want)
		}
	}
}

// A snapshot's digest does not depend on its node handles (another session hands out others), and
// is keyed: another server key digests the same page otherwise.
func TestObservationDigestIgnoresHandlesAndIsKeyed(t *testing.T) {
	snap := func(handle string) *page.Snapshot {
		return &page.Snapshot{URL: "http://shop.test/", Title: "Shop", ObservationID: "ob_" + handle,
			Nodes: []page.Node{{NodeID: "nd_" + handle, Role: "main", Children: []page.Node{{NodeID: "nd_x" + handle, Role: "textbox", Name: "Email", Value: "a@b.c"}}}}}
	}
	k1, k2 := newKeyring(nil), newKeyring(nil)
	if k1.observationDigest(snap("1")) != k1.observationDigest(snap("2")) {
		t.Error("the digest depends on node handles")
	}
	if k1.observationDigest(snap("1")) == k2.observationDigest(snap("1")) {
		t.Error("the digest is not keyed")
	}
	other := snap("1")
	other.Nodes[0].Children[0].Value = "c@d.e"
	if k1.observationDigest(snap("1")) == k1.observationDigest(other) {
		t.Error("a changed value digests alike")
	}
	if got := findTarget(snap("1").Nodes, "nd_x1", ""); got == nil || got.Role != "textbox" || got.Name != "Email" {
		t.Errorf("findTarget: %+v", got)
	}
}
