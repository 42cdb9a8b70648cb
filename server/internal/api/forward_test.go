package api

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

var testClusterKey = bytes.Repeat([]byte{7}, 32)

// captured is what the owner node received.
type captured struct {
	method, uri string
	header      http.Header
	body        []byte
}

// TestForwardSendsTheNodeCredentialNeverTheClientsToken forwards a client's request the way a
// non-owner node does and checks, on the wire at the owner, that the client's bearer token (and
// every other header but the few forwarded) is gone, that the Idempotency-Key and body arrive
// unchanged, that the node credential carries the verified caller bound to this exact request and
// verifies once at the owner, and that the owner's response is relayed as it is.
func TestForwardSendsTheNodeCredentialNeverTheClientsToken(t *testing.T) {
	t.Parallel()
	got := make(chan captured, 1)
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- captured{method: r.Method, uri: r.URL.RequestURI(), header: r.Header.Clone(), body: b}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Set-Cookie", "owner=secret")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"from":"owner"}`)
	}))
	defer owner.Close()

	now := time.Now()
	f, err := newForwarder(&Cluster{NodeID: "node_a", Key: testClusterKey, Now: func() time.Time { return now }}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"url":"https://example.com/"}`
	uri := "/bap/v1/browser-sessions/bs_1/navigate?x=1"
	in := httptest.NewRequest("POST", "http://lb.example"+uri, strings.NewReader(body))
	in.Header.Set("Authorization", "Bearer client-access-token")
	in.Header.Set("Cookie", "session=client")
	in.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	in.Header.Set("X-Custom", "client")
	in.Header.Set("Content-Type", "application/json")
	in.Header.Set("Idempotency-Key", "nav-1")
	in.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	p := Principal{Actor: app.Actor{Tenant: "acme", Subject: "client:c1"}, ClientID: "c1",
		Scopes: map[string]bool{"bap:browser.act": true, "bap:tasks.read": true}}
	rec := httptest.NewRecorder()
	f.send(rec, in, "navigate", p, app.NodeRef{NodeID: "node_b", URL: owner.URL + "/", Live: true}, []byte(body))

	c := <-got
	for _, h := range []string{"Authorization", "Cookie", "Proxy-Authorization", "X-Custom"} {
		if v := c.header.Get(h); v != "" {
			t.Errorf("the owner received %s: %q", h, v)
		}
	}
	for name, vals := range c.header {
		for _, v := range vals {
			if strings.Contains(v, "client-access-token") {
				t.Fatalf("the client's token reached the owner in %s", name)
			}
		}
	}
	if c.method != "POST" || c.uri != uri || string(c.body) != body {
		t.Errorf("owner got %s %s %q", c.method, c.uri, c.body)
	}
	if c.header.Get("Idempotency-Key") != "nav-1" || c.header.Get("Content-Type") != "application/json" ||
		c.header.Get("Traceparent") == "" {
		t.Errorf("forwarded headers: %v", c.header)
	}
	cred := c.header.Get(NodeCredentialHeader)
	if cred == "" {
		t.Fatal("no node credential")
	}

	// The owner (node_b) accepts it once, for this request, and learns the caller from it.
	v := newNodeVerifier("node_b", testClusterKey, func() time.Time { return now.Add(time.Second) })
	pr, err := v.verify(cred, "POST", uri, c.body, "nav-1", true)
	if err != nil {
		t.Fatalf("the owner refused the credential: %v", err)
	}
	if pr.Actor != p.Actor || pr.ClientID != "c1" || len(pr.Scopes) != 2 || !pr.Scopes["bap:browser.act"] || !pr.Scopes["bap:tasks.read"] {
		t.Errorf("vouched caller %+v, want %+v", pr, p)
	}
	if _, err := v.verify(cred, "POST", uri, c.body, "nav-1", false); err == nil {
		t.Error("a replayed credential was accepted for a read")
	}
	// A command's credential presented again is the forwarding node's redelivery: it passes with
	// the same delivery, which the inbox answers from the first response (never running it again).
	if pr.delivery == nil || pr.delivery.Source != "node:node_a" || pr.delivery.ID == "" {
		t.Fatalf("the command's delivery: %+v", pr.delivery)
	}
	again, err := v.verify(cred, "POST", uri, c.body, "nav-1", true)
	if err != nil || again.delivery == nil || *again.delivery != *pr.delivery {
		t.Errorf("the redelivered command: %+v, %v; first %+v", again.delivery, err, pr.delivery)
	}

	// The response is relayed: status, body and the BAP headers, not the owner's cookies.
	if rec.Code != 200 || rec.Body.String() != `{"from":"owner"}` || rec.Header().Get("Idempotent-Replayed") != "true" ||
		rec.Header().Get("Set-Cookie") != "" {
		t.Errorf("relayed %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
}

// TestNodeCredentialRefusals: a credential is accepted only by its audience, for its exact
// request, with the cluster key, within its lifetime, once.
func TestNodeCredentialRefusals(t *testing.T) {
	t.Parallel()
	now := time.Now()
	p := Principal{Actor: app.Actor{Tenant: "acme", Subject: "client:c1"}, Scopes: map[string]bool{"bap:browser.act": true}}
	uri, body := "/bap/v1/browser-sessions/bs_1/act", []byte(`{"action":"click"}`)
	fresh := func() NodeCredential { return NewNodeCredential("node_a", "node_b", p, "POST", uri, body, "k1", now) }
	verifier := func() *nodeVerifier {
		return newNodeVerifier("node_b", testClusterKey, func() time.Time { return now })
	}

	if _, err := verifier().verify(SignNodeCredential(testClusterKey, fresh()), "POST", uri, body, "k1", true); err != nil {
		t.Fatalf("a good credential was refused: %v", err)
	}
	tampered := func(edit func(*NodeCredential)) string {
		c := fresh()
		edit(&c)
		return SignNodeCredential(testClusterKey, c)
	}
	good := SignNodeCredential(testClusterKey, fresh())
	payload, _, _ := strings.Cut(good, ".")
	cases := []struct {
		name, cred, method, uri, key string
		body                         []byte
	}{
		{"another key (forged)", SignNodeCredential(bytes.Repeat([]byte{8}, 32), fresh()), "POST", uri, "k1", body},
		{"payload edited after signing", payload + "x." + strings.SplitN(good, ".", 2)[1], "POST", uri, "k1", body},
		{"no signature", payload, "POST", uri, "k1", body},
		{"another audience", tampered(func(c *NodeCredential) { c.Audience = "node_c" }), "POST", uri, "k1", body},
		{"issued by itself", tampered(func(c *NodeCredential) { c.Issuer = "node_b" }), "POST", uri, "k1", body},
		{"expired", tampered(func(c *NodeCredential) {
			c.IssuedAt, c.Expires = now.Add(-time.Minute).Unix(), now.Add(-30*time.Second).Unix()
		}), "POST", uri, "k1", body},
		{"too long-lived", tampered(func(c *NodeCredential) { c.Expires = now.Add(time.Hour).Unix() }), "POST", uri, "k1", body},
		{"from the future", tampered(func(c *NodeCredential) {
			c.IssuedAt, c.Expires = now.Add(time.Minute).Unix(), now.Add(80*time.Second).Unix()
		}), "POST", uri, "k1", body},
		{"another path", good, "POST", "/bap/v1/browser-sessions/bs_2/act", "k1", body},
		{"another method", good, "PUT", uri, "k1", body},
		{"another body", good, "POST", uri, "k1", []byte(`{"action":"fill"}`)},
		{"another idempotency key", good, "POST", uri, "k2", body},
		{"no idempotency key", good, "POST", uri, "", body},
	}
	for _, tc := range cases {
		_, err := verifier().verify(tc.cred, tc.method, tc.uri, tc.body, tc.key, true)
		if e := app.AsError(err); e == nil || e.Code != app.CodeUnauthenticated {
			t.Errorf("%s: %v, want unauthenticated", tc.name, err)
		}
	}
}

func TestOwnedKindAndTarget(t *testing.T) {
	t.Parallel()
	idx, err := loadSpec(apigen.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]app.OwnedKind{
		"navigate": app.OwnedSession, "observe": app.OwnedSession, "act": app.OwnedSession, "query_nodes": app.OwnedSession,
		"extract": app.OwnedSession, "capture_evidence": app.OwnedSession, "close_browser_session": app.OwnedSession,
		"checkpoint_browser_session": app.OwnedSession, "resolve_approval": app.OwnedApproval,
		"cancel_task": app.OwnedTask, "close_task": app.OwnedTask,
	}
	for _, op := range idx.ops {
		k, ok := ownedKind(op)
		if w, forwarded := want[op.ID]; ok != forwarded || k != w {
			t.Errorf("%s (%s): forwarded %v as %v, want %v %v", op.ID, op.Path, ok, k, forwarded, w)
		}
	}
	for path, id := range map[string]string{
		"/bap/v1/browser-sessions/bs_1/navigate": "bs_1", "/bap/v1/approvals/apr_1/resolve": "apr_1",
		"/bap/v1/tasks/tsk_1/cancel": "tsk_1", "/bap/v1": "",
	} {
		if got := targetID(path); got != id {
			t.Errorf("targetID(%q) = %q, want %q", path, got, id)
		}
	}
}

// TestForwardToAnOwnerThatCannotServe: when the owner's address does not answer, or answers
// with another node that refuses this node's credential (the owner was killed and a new node
// started on its address), or is unusable, the client gets 503 browser_unavailable with
// Retry-After — its retry finds the owner or, once it is known dead, is handled here — never a
// 500 (issue #23 item 7).
func TestForwardToAnOwnerThatCannotServe(t *testing.T) {
	t.Parallel()
	// The new node on the dead owner's address: it verifies credentials for itself, not node_b.
	successor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := newNodeVerifier("node_c", testClusterKey, time.Now)
		b, _ := io.ReadAll(r.Body)
		if _, err := v.verify(r.Header.Get(NodeCredentialHeader), r.Method, r.URL.RequestURI(), b, r.Header.Get("Idempotency-Key"), true); err != nil {
			writeProblem(w, app.AsError(err))
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer successor.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL
	gone.Close()

	f, err := newForwarder(&Cluster{NodeID: "node_a", Key: testClusterKey}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	p := Principal{Actor: app.Actor{Tenant: "acme", Subject: "client:c1"}, Scopes: map[string]bool{"bap:browser.act": true}}
	for _, tc := range []struct{ name, url string }{
		{"a new node on the owner's address refuses the credential", successor.URL},
		{"nothing listens on the owner's address", goneURL},
		{"the owner's address is unusable", "http://[::1"},
	} {
		body := `{"url":"https://example.com/"}`
		uri := "/bap/v1/browser-sessions/bs_1/navigate"
		in := httptest.NewRequest("POST", "http://lb.example"+uri, strings.NewReader(body))
		in.Header.Set("Idempotency-Key", "nav-1")
		rec := httptest.NewRecorder()
		f.send(rec, in, "navigate", p, app.NodeRef{NodeID: "node_b", URL: tc.url, Live: true}, []byte(body))
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
			!strings.Contains(rec.Body.String(), `"browser_unavailable"`) || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %v %s, want 503 browser_unavailable with Retry-After", tc.name, rec.Code, rec.Header(), rec.Body)
		}
	}
}
