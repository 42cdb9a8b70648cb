package orchestrator

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/app"
)

// FuzzErrorAnswer: the orchestrator's error answers (body and Retry-After, untrusted) are
// classified without panicking; a code is only ever an identifier; a refusal's error never
// carries more of the body than its code, and a retry delay stays bounded.
func FuzzErrorAnswer(f *testing.F) {
	for _, seed := range []struct {
		status      int
		body, retry string
	}{
		{429, `{"error":{"code":"rate_limit_exceeded","message":"request rate limit exceeded","detail":{"request_id":"x"}},"error_code":"rate_limit_exceeded"}`, ""},
		{429, `{"error":{"code":"budget_exceeded","message":"spend budget exceeded"}}`, "30"},
		{503, `{"error":{"code":"concurrency_limit_exceeded"}}`, ""},
		{503, `{"error":{"code":"overloaded"}}`, "2"},
		{500, `{"error":{"code":"internal_error","message":"internal server error"}}`, ""},
		{413, `{"error_code":"request_too_large"}`, ""},
		{400, `{"error":{"code":"invalid_request","message":"requested model 'x secret' is not configured"}}`, "-1"},
		{404, `{"error":{"code":42}}`, "99999999999999999999"},
		{429, `not json`, "Wed, 21 Oct 2015 07:28:00 GMT"},
	} {
		f.Add(seed.status, seed.body, seed.retry)
	}
	f.Fuzz(func(t *testing.T, status int, body, retry string) {
		code := errorCode([]byte(body))
		if code != "" && !identifier.MatchString(code) {
			t.Fatalf("code %q is not an identifier", code)
		}
		h := http.Header{}
		h.Set("Retry-After", retry)
		ref := classifyRefusal(status, code, h)
		reason := httpReason(status, []byte(body))
		if strings.Contains(reason, "secret") && !strings.Contains(code, "secret") {
			t.Fatalf("the reason %q carries the body's message", reason)
		}
		if ref == nil {
			return
		}
		p := newRetryPolicy(Config{})
		for attempt := range 40 {
			if d := p.delay(attempt, ref.retryAfter); d < 0 || d > 3600e9 {
				t.Fatalf("delay %s", d)
			}
		}
		err := ref.err("http://orchestrator", 0)
		if ref.kind == refusedBudget && !errors.Is(err, app.ErrOrchestratorBudget) {
			t.Fatalf("a budget refusal: %v", err)
		}
		if ref.kind != refusedBudget && !errors.Is(err, app.ErrOrchestratorUnavailable) {
			t.Fatalf("a refusal: %v", err)
		}
	})
}

// FuzzServedBy: whatever model name an answer gives, the recorded model is one asked for, an
// eligible one, or a dated snapshot of the one asked for — never a virtual model, and never an
// unrecognisable name.
func FuzzServedBy(f *testing.F) {
	for _, s := range []string{"", "m-a", "m-b", "m-a-2024-08-06", "m-a-0613", "contextual-orchestrator", "m-rogue", "m-a-../../x", "m-a\n", "mlx-community/gemma-4-31b-it-4bit"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	c := &Client{virtual: []string{VirtualModel}}
	eligible := []app.ModelInfo{{ID: "m-a"}, {ID: "m-b"}}
	f.Fuzz(func(t *testing.T, named string, askVirtual bool) {
		asked := eligible[0]
		if askVirtual {
			asked = app.ModelInfo{ID: VirtualModel}
		}
		m, why := c.servedBy(asked, named, eligible)
		if why != "" {
			return
		}
		switch {
		case c.isVirtual(m.ID):
			t.Fatalf("recorded the virtual model for %q", named)
		case m.ID == "m-a" || m.ID == "m-b":
		case !askVirtual && strings.HasPrefix(m.ID, "m-a-") && snapshotSuffix.MatchString(m.ID[len("m-a"):]):
		default:
			t.Fatalf("named %q recorded as %q", named, m.ID)
		}
	})
}
