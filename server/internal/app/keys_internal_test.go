package app

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/serverkey"
)

// A plan's fill values are sealed when the task is recorded: its args keep them masked, and only
// the step itself, under the same server key, opens them again.
func TestPlanValuesAreSealedPerStep(t *testing.T) {
	t.Parallel()
	key := serverkey.Ephemeral()
	k := newKeyring(key)
	const pin = "PIN-CANARY-4711"
	plan := []PlanStep{
		{Op: "navigate", Args: json.RawMessage(`{"url":"https://shop.example.com/pin"}`)},
		{Op: "act", Args: json.RawMessage(`{"action":"fill","query":{"label":"PIN"},"value":"` + pin + `","timeout_ms":1500}`)},
		{Op: "act", Args: json.RawMessage(`{"action":"click","query":{"role":"button","name":"Send"}}`)},
	}
	sealed, err := k.sealPlan("acme", "tsk_1", plan)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range sealed {
		if bytes.Contains(st.Args, []byte(pin)) || bytes.Contains(st.Sealed, []byte(pin)) {
			t.Fatalf("step %d keeps the fill value in clear: %s", i, st.Args)
		}
		if (len(st.Sealed) > 0) != (i == 1) {
			t.Fatalf("step %d sealed %d bytes", i, len(st.Sealed))
		}
	}
	var masked map[string]any
	if err := json.Unmarshal(sealed[1].Args, &masked); err != nil || masked["value"] != "***" || masked["action"] != "fill" {
		t.Fatalf("masked args: %s", sealed[1].Args)
	}
	if string(sealed[0].Args) != string(plan[0].Args) || string(sealed[2].Args) != string(plan[2].Args) {
		t.Fatal("a step without protected values changed")
	}

	opened, e := k.openStep("acme", "tsk_1", 1, sealed[1])
	if e != nil {
		t.Fatal(e)
	}
	var a struct {
		Value     string      `json:"value"`
		TimeoutMs int         `json:"timeout_ms"`
		Query     *page.Query `json:"query"`
	}
	if err := json.Unmarshal(opened.Args, &a); err != nil || a.Value != pin || a.TimeoutMs != 1500 || a.Query == nil || a.Query.Label != "PIN" {
		t.Fatalf("opened args: %s (%v)", opened.Args, err)
	}
	if opened.Sealed != nil {
		t.Fatal("an opened step still carries its seal")
	}
	// Bound to the step, the task, the tenant and the key.
	for name, open := range map[string]func() *Error{
		"another step":   func() *Error { _, e := k.openStep("acme", "tsk_1", 2, sealed[1]); return e },
		"another task":   func() *Error { _, e := k.openStep("acme", "tsk_2", 1, sealed[1]); return e },
		"another tenant": func() *Error { _, e := k.openStep("umbrella", "tsk_1", 1, sealed[1]); return e },
		"another key": func() *Error {
			_, e := newKeyring(serverkey.Ephemeral()).openStep("acme", "tsk_1", 1, sealed[1])
			return e
		},
	} {
		e := open()
		if e == nil || e.Code != CodeInvalidRequest { // fatal to a worker (worker.TestClassify)
			t.Errorf("%s: %v, want invalid_request", name, e)
		}
		if e != nil && strings.Contains(e.Detail, pin) {
			t.Errorf("%s: the refusal repeats the value", name)
		}
	}
	// A step recorded before sealing existed (no seal) runs with its args as they are.
	if st, e := k.openStep("acme", "tsk_1", 1, plan[1]); e != nil || string(st.Args) != string(plan[1].Args) {
		t.Fatalf("an unsealed step: %s %v", st.Args, e)
	}
}

// The digest of a held action is keyed: the same action under another server key has another
// digest, and trying every 4-digit PIN without the key never finds the stored one.
func TestActionDigestIsKeyed(t *testing.T) {
	t.Parallel()
	s := &Service{keys: newKeyring(serverkey.Ephemeral())}
	other := &Service{keys: newKeyring(serverkey.Ephemeral())}
	req := page.ActRequest{Action: "fill", NodeID: "nd_1", Value: "4711"}
	d := s.actionDigest("bs_1", req)
	if len(d) != 32 || !bytes.Equal(d, s.actionDigest("bs_1", req)) {
		t.Fatalf("digest %x is not a stable 32-byte HMAC", d)
	}
	for pin := 0; pin < 10000; pin++ {
		guess := req
		guess.Value = strings.Repeat("0", 4-len(itoa(pin))) + itoa(pin)
		if bytes.Equal(other.actionDigest("bs_1", guess), d) {
			t.Fatalf("PIN %s recovered without the server key", guess.Value)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
