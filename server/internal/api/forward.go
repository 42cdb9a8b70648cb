package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// Forwarding between the nodes of a cluster (ADR 0012, docs/scale-out.md). A browser session, an
// action held for approval and the in-flight commands of a task live in one node's memory. A
// request for one of them that reaches another node is authenticated there (the client's token
// is verified and stays there), then sent to the owner at its advertised URL with a node
// credential (nodecred.go) instead of the client's credentials, with the same method, path,
// Idempotency-Key and body: the owner records and runs the command, and its response is relayed
// as it is. A forwarded request is never forwarded again. A dead owner is never forwarded to (the
// request is handled here, and its session reported lost).

// Cluster configures the transport for several nodes on one database.
type Cluster struct {
	// NodeID is this node's id: the audience of the node credentials it accepts.
	NodeID string
	// Key signs and verifies node credentials; every node of the cluster has the same (at least
	// 32 bytes, derived from the cluster secret).
	Key []byte
	// Client sends forwarded requests (default: connect and TLS handshake within 5 s, no redirects).
	Client *http.Client
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// forwardedRequestHeaders are the only request headers a forwarded request carries besides the
// node credential: never Authorization, cookies or anything else the client sent.
var forwardedRequestHeaders = []string{"Content-Type", "Accept", "Idempotency-Key", "Traceparent", "Tracestate"}

// relayedResponseHeaders are the owner's response headers relayed to the client.
var relayedResponseHeaders = []string{"Content-Type", "Idempotent-Replayed", "Retry-After", "Repr-Digest", "Cache-Control"}

// forwarder sends requests to their owner node.
type forwarder struct {
	self   string
	key    []byte
	client *http.Client
	now    func() time.Time
	log    *slog.Logger
	verify *nodeVerifier
}

func newForwarder(c *Cluster, log *slog.Logger) (*forwarder, error) {
	if c.NodeID == "" || len(c.Key) < 32 {
		return nil, errors.New("api: Cluster needs NodeID and a Key of at least 32 bytes")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Client == nil {
		c.Client = &http.Client{
			Transport: &http.Transport{
				Proxy:               nil, // node to node: never through an environment proxy
				DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				TLSHandshakeTimeout: 5 * time.Second,
				MaxIdleConnsPerHost: 32,
				IdleConnTimeout:     90 * time.Second,
				ForceAttemptHTTP2:   true,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &forwarder{self: c.NodeID, key: c.Key, client: c.Client, now: c.Now, log: log,
		verify: newNodeVerifier(c.NodeID, c.Key, c.Now)}, nil
}

// ownedKind says whether op works on an object with an owner node, and which.
func ownedKind(op *operation) (app.OwnedKind, bool) {
	switch {
	case strings.HasPrefix(op.Path, "/bap/v1/browser-sessions/{session_id}/"):
		return app.OwnedSession, true
	case op.ID == "resolve_approval":
		return app.OwnedApproval, true
	case op.ID == "cancel_task" || op.ID == "close_task":
		return app.OwnedTask, true
	}
	return 0, false
}

// targetID is the object id of a forwardable route: /bap/v1/{collection}/{id}/….
func targetID(path string) string {
	parts := strings.SplitN(path, "/", 6)
	if len(parts) < 5 {
		return ""
	}
	return parts[4]
}

// authenticateRequest identifies the caller: the in-process caller, a node credential (only on
// the routes that are forwarded), or the transport's authenticator. forwarded reports a request
// another node forwarded here.
func (s *server) authenticateRequest(w http.ResponseWriter, r *http.Request, op *operation) (p Principal, forwarded bool, err error) {
	raw, present := r.Header[NodeCredentialHeader]
	if _, inProcess := r.Context().Value(inProcessKey{}).(Principal); inProcess || !present {
		p, err := authenticateCaller(s.auth, r)
		return p, false, err
	}
	if _, ok := ownedKind(op); !ok || s.fwd == nil || len(raw) != 1 || len(r.Header.Values("Authorization")) > 0 {
		s.log.Warn("node credential refused", "operation", op.ID, "reason", "not a forwarding route, no cluster, or other credentials too")
		return Principal{}, false, errNodeCredential
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return Principal{}, false, app.Errorf(app.CodePayloadTooLarge, "the body is larger than %d bytes", s.maxBody)
		}
		return Principal{}, false, &app.Error{Code: app.CodeInvalidRequest, Detail: "the body could not be read"}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p, err = s.fwd.verify.verify(raw[0], r.Method, r.URL.RequestURI(), body, r.Header.Get("Idempotency-Key"), op.Mutating)
	if err != nil {
		s.log.Warn("node credential refused", "operation", op.ID, "err", err.Error())
		return Principal{}, false, err
	}
	return p, true, nil
}

// forward sends the request to the live node that owns its object, when that is another node,
// and relays the answer; it reports whether it did (the request is then answered).
func (s *server) forward(w http.ResponseWriter, r *http.Request, op *operation, p Principal) bool {
	if s.fwd == nil {
		return false
	}
	kind, ok := ownedKind(op)
	if !ok {
		return false
	}
	ref, remote, err := s.svc.RemoteOwner(r.Context(), p.Actor, kind, targetID(r.URL.Path))
	if err != nil {
		s.log.Warn("finding the owner node failed; handling the request here", "operation", op.ID, "err", err)
		return false
	}
	if !remote {
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, app.Errorf(app.CodePayloadTooLarge, "the body is larger than %d bytes", s.maxBody))
		} else {
			writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the body could not be read"})
		}
		return true
	}
	s.fwd.send(w, r, op.ID, p, ref, body)
	return true
}

// send forwards r (with body) for p to the node ref and relays its response to w.
func (f *forwarder) send(w http.ResponseWriter, r *http.Request, opID string, p Principal, ref app.NodeRef, body []byte) {
	uri := r.URL.RequestURI()
	out, err := http.NewRequestWithContext(r.Context(), r.Method, strings.TrimRight(ref.URL, "/")+uri, bytes.NewReader(body))
	if err != nil {
		f.log.Error("forwarding: bad owner URL", "node_id", ref.NodeID, "err", err)
		writeProblem(w, ownerUnavailable("the node that holds this object has an unusable address; retry shortly"))
		return
	}
	for _, h := range forwardedRequestHeaders {
		if vs := r.Header.Values(h); len(vs) > 0 {
			out.Header[h] = append([]string(nil), vs...)
		}
	}
	cred := NewNodeCredential(f.self, ref.NodeID, p, r.Method, uri, body, r.Header.Get("Idempotency-Key"), f.now())
	out.Header.Set(NodeCredentialHeader, SignNodeCredential(f.key, cred))
	resp, err := f.client.Do(out)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		f.log.Warn("forwarding: the owner node did not answer", "operation", opID, "node_id", ref.NodeID, "err", err)
		writeProblem(w, ownerUnavailable("the node that holds this object did not answer; retry shortly (if it died, its sessions are reported lost)"))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		// Our own credential was refused. Most often another process now serves the owner's
		// address (it was killed and a new node started there, which marks it stopped: the retry
		// is handled here); otherwise a cluster misconfiguration (clocks, secret). Either way
		// not the client's fault, and nothing ran on the owner.
		f.log.Warn("forwarding: the owner node refused this node's credential", "operation", opID, "node_id", ref.NodeID)
		writeProblem(w, ownerUnavailable("the node that held this object no longer answers for it; retry shortly (if it died, its sessions are reported lost)"))
		return
	}
	for _, h := range relayedResponseHeaders {
		if vs := resp.Header.Values(h); len(vs) > 0 {
			w.Header()[h] = append([]string(nil), vs...)
		}
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil && !errors.Is(err, context.Canceled) {
		f.log.Warn("forwarding: relaying the owner's response failed", "operation", opID, "node_id", ref.NodeID, "err", err)
	}
}

// ownerUnavailable is the answer when the owner node cannot take a forwarded request: 503 with
// Retry-After, never a 500 — the client's retry (same key) finds the owner again or, once it is
// known dead, is handled here.
func ownerUnavailable(detail string) *app.Error {
	return &app.Error{Code: app.CodeBrowserUnavailable, RetryAfter: 2 * time.Second, Detail: detail}
}
