package e2e

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/waitfor"
)

// heldServerKey is the server key of a stack whose held requests' digests a test computes itself.
var heldServerKey = bytes.Repeat([]byte{0x5a}, serverkey.Size)

// withServerKey runs the stack's service under the server key secret.
func withServerKey(t *testing.T, secret []byte) func(*app.Config) {
	t.Helper()
	k, err := serverkey.FromBytes(secret)
	if err != nil {
		t.Fatal(err)
	}
	return func(cfg *app.Config) { cfg.ServerKey = k }
}

// heldDigest is the keyed digest an approval must carry for a request held in session sessionID
// (HeldRequest.digest: HMAC-SHA-256 of its method, URL and body in that session), computed here
// from the server key's bytes rather than by the server's code: the key of ADR 0015's
// approval-action-digest purpose (HKDF-SHA-256), over the request as app.requestDigest encodes it.
func heldDigest(t *testing.T, secret []byte, sessionID, method, url string, body []byte) string {
	t.Helper()
	key, err := hkdf.Key(sha256.New, secret, nil, "bap/server-key/v1/approval-action-digest", 32)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := json.Marshal(struct {
		Op, Session, Method, URL string
		Body                     []byte
		BodyKnown                bool
	}{"request", sessionID, method, url, body, true})
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return hex.EncodeToString(m.Sum(nil))
}

// How single-page apps submit — form.submit() from a plain button, fetch POST or XMLHttpRequest
// POST from a div — under a form_submission rule: the act answers 202 with an approval that names
// the held request and shows the page; nothing reaches the site until the operator approves
// (exactly once), and deny means never. The approval's digest is the HMAC, under the server key,
// of the very body the site receives once approved (the same for each hold of that request). A
// POST the page sends on its own is refused and recorded.
func TestApprovalHoldsWhatLeavesTheBrowser(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"chromium", "firefox"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			sh := newShop(t)
			s := newStack(t, bothEngines(t), withServerKey(t, heldServerKey))
			op := s.operator()
			taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "spa-task", map[string]any{
				"goal": "pay, but ask first",
				"policy": map[string]any{"allowed_origins": []string{sh.srv.URL},
					"approval_rules": []any{map[string]any{"effect": "form_submission"}}},
			}).str("task", "task_id")
			sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "spa-session", map[string]any{"engine": engine}).str("session", "session_id")
			base := "/bap/v1/browser-sessions/" + sess
			// The digests of each button's holds, and the body its approved request reached the
			// site with: compared once all cases ran (a button's deny may come before its approve).
			digests, sent := map[string][]string{}, map[string][]byte{}
			for _, tt := range []struct {
				name, button, decision string
				orders                 int64
			}{
				{"fetch POST approved", "Pay now", "approve", 1},
				{"form.submit() denied", "Submit form", "deny", 1},
				{"form.submit() approved", "Submit form", "approve", 2},
				{"fetch POST denied", "Pay now", "deny", 2},
				{"XMLHttpRequest POST approved", "Pay by XHR", "approve", 3},
				{"XMLHttpRequest POST denied", "Pay by XHR", "deny", 3},
			} {
				key := func(k string) string {
					return strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(tt.name) + "-" + k
				}
				s.must(t, 200, "POST", base+"/navigate", key("nav"), map[string]any{"url": sh.srv.URL + "/spa-checkout"})
				held := s.must(t, 202, "POST", base+"/act", key("click"), map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": tt.button}})
				if got := held.str("approval", "held_request", "method"); got != "POST" || !strings.HasSuffix(held.str("approval", "held_request", "url"), "/order") {
					t.Fatalf("%s: the approval does not name the held request: %s", tt.name, held.raw)
				}
				// The bodies the page sends, as they would show in the answer (a bare "4242" also
				// turns up in a timestamp's nanoseconds now and then).
				for _, body := range []string{"4242424242424242", "card=4242", `card\":\"4242`, `"card":"4242"`} {
					if strings.Contains(string(held.raw), body) {
						t.Fatalf("%s: the held body shows (%s): %s", tt.name, body, held.raw)
					}
				}
				if want := tt.orders - map[string]int64{"approve": 1, "deny": 0}[tt.decision]; sh.orders.Load() != want {
					t.Fatalf("%s: %d orders while held, want %d", tt.name, sh.orders.Load(), want)
				}
				if status, h, b := s.getRaw(t, "/bap/v1/artifacts/"+held.str("approval", "screenshot_artifact_id")); status != 200 ||
					h.Get("Content-Type") != "image/png" || !strings.HasPrefix(string(b), "\x89PNG") {
					t.Errorf("%s: the hold's screenshot: %d %s", tt.name, status, h.Get("Content-Type"))
				}
				digests[tt.button] = append(digests[tt.button], held.str("approval", "held_request", "digest"))
				apr := held.str("approval", "approval_id")
				res := op.must(t, 200, "POST", "/bap/v1/approvals/"+apr+"/resolve", key("resolve"), map[string]any{"decision": tt.decision})
				if sh.orders.Load() != tt.orders {
					t.Fatalf("%s: %d orders after %s, want %d (%s)", tt.name, sh.orders.Load(), tt.decision, tt.orders, res.raw)
				}
				if tt.decision == "approve" {
					sent[tt.button] = *sh.orderBody.Load()
				}
				if tt.decision == "approve" && res.str("action_receipt", "outcome") != "applied" {
					t.Errorf("%s: %s", tt.name, res.raw)
				}
			}

			for button, ds := range digests {
				body, ok := sent[button]
				if !ok {
					t.Fatalf("%s: no approved request of this button reached the site", button)
				}
				want := heldDigest(t, heldServerKey, sess, "POST", sh.srv.URL+"/order", body)
				for _, d := range ds {
					if d != want {
						t.Errorf("%s: the approval's digest %q is not the keyed digest %q of the body the site received (%d bytes)", button, d, want, len(body))
					}
				}
			}

			// The page's own POST (a beacon at load): refused, recorded, never sent.
			before := sh.orders.Load()
			s.must(t, 200, "POST", base+"/navigate", "ping-nav", map[string]any{"url": sh.srv.URL + "/spa-checkout?again=1#ping"})
			// The history is written by the event recorder, asynchronously.
			waitfor.True(t, 15*time.Second, "a request.blocked event for the page's own POST", func() bool {
				for _, e := range s.events(t, taskID) {
					if d, _ := e["data"].(map[string]any); e["type"] == "request.blocked" && d["reason"] == "unapproved_side_effect" {
						return true
					}
				}
				return false
			})
			if sh.orders.Load() != before {
				t.Fatalf("the page's own POST reached the site")
			}
		})
	}
}
