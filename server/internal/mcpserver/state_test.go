//go:build mcpconformance

package mcpserver_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/mcpserver"
)

// TestRequestStateIsSealed: the MRTR requestState the server hands out is bound by HMAC to the
// caller, the method, the tool and its arguments, and expires; anything else is -32602.
func TestRequestStateIsSealed(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64
	b := setup(t, func(o *mcpserver.Options) {
		o.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	const tool = "test_input_required_result_request_state"
	var first struct {
		ResultType   string `json:"resultType"`
		RequestState string `json:"requestState"`
	}
	b.rpc(t, "/mcp-conformance", "tools/call", map[string]any{"name": tool, "arguments": map[string]any{}}).result(t, &first)
	if first.ResultType != "input_required" || first.RequestState == "" {
		t.Fatalf("round 1: %+v", first)
	}
	answer := map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"ok": true}}}
	retry := func(state string, args map[string]any, headers ...string) reply {
		return b.rpc(t, "/mcp-conformance", "tools/call", map[string]any{"name": tool, "arguments": args,
			"inputResponses": answer, "requestState": state}, headers...)
	}
	ok := retry(first.RequestState, map[string]any{})
	var done toolResult
	ok.result(t, &done)
	if done.ResultType != "complete" {
		t.Fatalf("retry with the issued state: %s", ok.raw)
	}
	// Presenting it again for the same call (a re-issued request) is fine.
	if r := retry(first.RequestState, map[string]any{}); r.msg.Error != nil {
		t.Fatalf("second presentation: %s", r.raw)
	}
	for name, r := range map[string]reply{
		"tampered":        retry(first.RequestState+"-TAMPERED", map[string]any{}),
		"altered MAC":     retry(alter(first.RequestState), map[string]any{}),
		"other arguments": retry(first.RequestState, map[string]any{"x": 1}),
		"other caller":    retry(first.RequestState, map[string]any{}, "X-Test-Tenant", "globex"),
		"not sealed":      retry("confirm", map[string]any{}),
	} {
		if r.status != http.StatusBadRequest || r.code() != -32602 {
			t.Errorf("%s: HTTP %d %s", name, r.status, r.raw)
		}
	}
	skew.Store(int64(time.Hour))
	if r := retry(first.RequestState, map[string]any{}); r.code() != -32602 {
		t.Errorf("expired state: %s", r.raw)
	}
}

// alter changes the last character of s.
func alter(s string) string {
	last := byte('A')
	if s[len(s)-1] == 'A' {
		last = 'B'
	}
	return s[:len(s)-1] + string(last)
}
