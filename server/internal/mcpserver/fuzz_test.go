package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/version"
)

// fuzzAuth authenticates every request as one caller holding browser.observe only.
type fuzzAuth struct{}

func (fuzzAuth) Authenticate(*http.Request) (Caller, error) {
	return Caller{Actor: app.Actor{Tenant: "acme", Subject: "client:fuzz"}, Scopes: map[string]bool{"bap:browser.observe": true}}, nil
}

func (fuzzAuth) Challenge(error, string) string { return "" }

// guardCodes are the JSON-RPC error codes the guard itself may answer with.
var guardCodes = map[int64]bool{-32700: true, -32600: true, -32020: true, -32022: true}

// FuzzGuard sends arbitrary bodies and header values through the MCP endpoint's guard, in front
// of a stand-in for the SDK. Properties: nothing panics; every refusal is a 4xx with a JSON-RPC
// error of a code the guard may use (or the BAP problem of a missing scope), echoing the request
// id only when one was read; and what passes on is exactly one JSON-RPC 2.0 request of the only
// revision, with the version header equal to a present _meta version, no duplicate member, a
// decoded Mcp-Name, the body unchanged and within the limit.
func FuzzGuard(f *testing.F) {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, s := range []struct{ body, version, method, name string }{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`, "2026-07-28", "tools/list", ""},
		{`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"get_task","arguments":{"task_id":"tsk_x"},` + meta + `}}`, "2026-07-28", "tools/call", "get_task"},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"act","arguments":{}}}`, "2026-07-28", "tools/call", "=?base64?YWN0?="},
		{`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"mtk_1",` + meta + `}}`, "2026-07-28", "tasks/get", "mtk_2"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999"}}}`, "2026-07-28", "tools/list", ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "2026-07-28", "", ""},
		{`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`, "2026-07-28", "tools/list", ""},
		{`{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}`, "2026-07-28", "tools/list", ""},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, "", "", ""},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, "2025-11-25", "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}`, "2026-07-28", "tools/list", "=?base64?!!?="},
		{"\xff\xfe", "2026-07-28", "x", ""},
		{strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 300), "2026-07-28", "", ""},
	} {
		f.Add([]byte(s.body), s.version, s.method, s.name)
	}
	const maxBody = 4 << 10
	f.Fuzz(func(t *testing.T, body []byte, protoVersion, method, name string) {
		var passed *http.Request
		var passedBody []byte
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = r
			passedBody, _ = io.ReadAll(r.Body)
			w.WriteHeader(http.StatusTeapot)
		})
		g := &guard{auth: fuzzAuth{}, next: next, maxBody: maxBody, log: slog.New(slog.DiscardHandler),
			scopeOf: func(tool string) (string, bool) { return "bap:browser.act", tool == "act" }}
		req := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range map[string]string{"MCP-Protocol-Version": protoVersion, "Mcp-Method": method, "Mcp-Name": name} {
			if v != "" {
				req.Header[http.CanonicalHeaderKey(k)] = []string{v} // as sent, without Set's trimming
			}
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, req)

		if passed != nil {
			if w.Code != http.StatusTeapot {
				t.Fatalf("passed on, then answered %d", w.Code)
			}
			if !bytes.Equal(passedBody, body) || len(body) > maxBody {
				t.Fatalf("the body passed on differs or exceeds the limit")
			}
			msg, id, rerr := parseEnvelope(body)
			if rerr != nil || id == nil || msg.JSONRPC != "2.0" || duplicateMember(bytes.TrimSpace(body)) != "" {
				t.Fatalf("passed on a message the guard must refuse: %v", rerr)
			}
			if strings.TrimSpace(passed.Header.Get("Mcp-Protocol-Version")) != version.MCP {
				t.Fatalf("passed on version %q", passed.Header.Get("Mcp-Protocol-Version"))
			}
			var p struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			_ = json.Unmarshal(msg.Params, &p)
			var mv string
			if raw, ok := p.Meta[mcp.MetaKeyProtocolVersion]; ok && json.Unmarshal(raw, &mv) == nil && mv != "" && mv != version.MCP {
				t.Fatalf("passed on _meta version %q", mv)
			}
			if n := passed.Header.Get("Mcp-Name"); strings.HasPrefix(n, base64Prefix) && strings.HasSuffix(n, base64Suffix) {
				if _, err := decodeHeaderValue(n); err == nil && n != strings.TrimSpace(name) {
					t.Fatalf("Mcp-Name %q passed on still encoded", n)
				}
			}
			if _, ok := CallerFrom(passed.Context()); !ok {
				t.Fatal("passed on without the caller")
			}
			return
		}
		if w.Code == http.StatusAccepted {
			if _, id, rerr := parseEnvelope(body); rerr != nil || id != nil {
				t.Fatalf("202 for something that is not a notification")
			}
			return
		}
		if w.Code < 400 || w.Code >= 500 {
			t.Fatalf("refused with %d", w.Code)
		}
		if w.Header().Get("Content-Type") == "application/problem+json" {
			var pr problem
			if err := json.Unmarshal(w.Body.Bytes(), &pr); err != nil || pr.Code != app.CodeInsufficientScope || w.Code != http.StatusForbidden {
				t.Fatalf("problem %d %s", w.Code, w.Body.Bytes())
			}
			return
		}
		var resp struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   *struct {
				Code    int64  `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.JSONRPC != "2.0" || resp.Error == nil {
			t.Fatalf("refusal %d is not a JSON-RPC error: %s", w.Code, w.Body.Bytes())
		}
		if !guardCodes[resp.Error.Code] {
			t.Fatalf("unexpected code %d", resp.Error.Code)
		}
		if string(resp.ID) != "null" {
			if _, id, _ := parseEnvelope(body); !bytes.Equal(id, resp.ID) {
				t.Fatalf("the error echoes id %s, the request had %s", resp.ID, id)
			}
		}
	})
}

// FuzzRequestState opens arbitrary request states (SEP-2322: the client echoes whatever it
// likes). Properties: nothing panics; every refusal is errBadState; a state opens only for the
// binding it was sealed for, and a genuine state round-trips its payload.
func FuzzRequestState(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	s := sealer{key: bytes.Repeat([]byte{9}, 32), ttl: time.Minute, now: func() time.Time { return now }}
	b := stateBinding{owner: "acme/client:a", method: "tools/call", name: "act", args: json.RawMessage(`{"b":1,"a":[2]}`)}
	f.Add(s.seal(b, "step=2"), "step=2", `{"a":[2],"b":1}`)
	f.Add(s.seal(b, ""), "", `{}`)
	f.Add("AAAAAAAAAAA.AAAA", "x", `{"b":1}`)
	f.Add("not-a-state", "", "")
	f.Add(".", "", "null")
	f.Fuzz(func(t *testing.T, state, payload, args string) {
		other := stateBinding{owner: b.owner, method: b.method, name: b.name, args: json.RawMessage(args)}
		got, err := s.open(other, state)
		if err != nil {
			if !errors.Is(err, errBadState) {
				t.Fatalf("untyped refusal %v", err)
			}
		} else if !bytes.Equal(canonicalJSON(other.args), canonicalJSON(b.args)) {
			// Opened for other arguments: only possible with a state sealed for them.
			if _, err := s.open(b, state); err == nil {
				t.Fatalf("one state opens for two bindings")
			}
		} else if got != "step=2" && got != "" {
			t.Fatalf("a state opened with a payload nobody sealed: %q", got)
		}
		// A genuine state opens for its binding, with its payload, and for no other owner.
		sealed := s.seal(other, payload)
		if p, err := s.open(other, sealed); err != nil || p != payload {
			t.Fatalf("round trip: %q %v", p, err)
		}
		stranger := other
		stranger.owner = "acme/client:b"
		if _, err := s.open(stranger, sealed); !errors.Is(err, errBadState) {
			t.Fatalf("another caller opened the state: %v", err)
		}
		later := s
		later.now = func() time.Time { return now.Add(2 * time.Minute) }
		if _, err := later.open(other, sealed); !errors.Is(err, errBadState) {
			t.Fatalf("an expired state opened: %v", err)
		}
	})
}
