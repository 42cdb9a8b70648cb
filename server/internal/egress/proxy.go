package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/originweave/bap/server/internal/policy"
)

// Reason says why a request was refused; the values are the spec's RequestBlockedData.reason.
type Reason string

// The reasons of a refusal.
const (
	// ReasonOriginNotAllowed: no allowed origin pattern matches the request's origin.
	ReasonOriginNotAllowed Reason = "origin_not_allowed"
	// ReasonPrivateNetwork: the host is or resolves to a private address ([policy.PrivateAddr])
	// that the policy does not name explicitly.
	ReasonPrivateNetwork Reason = "private_network"
	// ReasonUnclassifiable: the request could not be read or checked.
	ReasonUnclassifiable Reason = "unclassifiable"
	// ReasonRedirectNotAllowed: an allowed request was answered with a redirect to a URL the
	// policy does not allow. The response is relayed as it is (the proxy never follows redirects);
	// the hop is refused when the browser tries it, if it does, by whichever layer it meets first
	// (the CSP, interception or this proxy). Reported for plain HTTP only: inside a tunnel the
	// proxy sees no response.
	ReasonRedirectNotAllowed Reason = "redirect_not_allowed"
	// ReasonNotInArchive: the proxy serves a replay from its task's archive ([Proxy.ServeFrom])
	// and the archive holds no answer to the request (or it is a tunnel, whose content was never
	// recorded). Nothing was sent to the network.
	ReasonNotInArchive Reason = "not_in_archive"
	// ReasonDryRun: the proxy carries a dry run ([Proxy.RefuseUnsafe]), which sends only
	// requests with a safe method over plain HTTP: this one had another method, was an upgrade, or
	// was a tunnel, whose requests the proxy cannot see.
	ReasonDryRun Reason = "dry_run"
)

// Blocked describes one refused request or connection.
type Blocked struct {
	// URL is what was refused, without userinfo, query or fragment: scheme://host[:port]/path for
	// an HTTP request, host:port for a tunnel (its scheme and path are inside it, unseen).
	URL string
	// ResourceType is the request's Sec-Fetch-Dest (document, worker, serviceworker, empty, …),
	// "websocket" for an upgrade, "tunnel" for a CONNECT, "" when unknown.
	ResourceType string
	// Reason is why it was refused.
	Reason Reason
}

// Resolver looks up the addresses of a host name (net.Resolver implements it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a [Proxy].
type Config struct {
	// Policy returns the session's current policy; nil refuses everything (a warm context has no
	// session yet). It is called for every request.
	Policy func() *policy.Policy
	// OnBlocked, when set, is told of every refusal. It must not block.
	OnBlocked func(Blocked)
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds one connection attempt to an upstream address; 0 means 15 s.
	DialTimeout time.Duration
	// Forbidden lists addresses no policy can open: the server's own listeners (a page must never
	// reach BAP's API, whatever its policy names). An unspecified address forbids its port on every
	// address; a loopback one, its port on every loopback address.
	Forbidden []netip.AddrPort
	// Logger receives operational logs (never URLs' queries); nil discards them.
	Logger *slog.Logger
	// DocumentCSP, when set, returns a Content-Security-Policy that the proxy adds, once, to every
	// plain-HTTP response that can become a document or a worker's global scope (by the request's
	// Sec-Fetch-Dest; when the browser sends none, as it does to origins that are not potentially
	// trustworthy, to every response). "" adds nothing. Responses inside a CONNECT tunnel (TLS)
	// are bytes the proxy cannot see: the browser adds the policy to those itself.
	DocumentCSP func() string
	// Certs, when set, lets the proxy open TLS tunnels while it records, answers from an archive
	// or carries a dry run (ADR 0037): it presents a certificate of Certs for the tunnel's host,
	// serves the requests inside as it serves plain-HTTP ones (https URLs, the same checks, the
	// same archive), and sends them on over TLS it verifies itself (UpstreamTLS). The browser must
	// trust Certs, and nothing else may. nil keeps every tunnel opaque.
	Certs CertSource
	// UpstreamTLS configures TLS towards the sites of opened tunnels; nil verifies their
	// certificates against the system's roots (tests set RootCAs).
	UpstreamTLS *tls.Config
}

// Recorder archives what the proxy forwards (a task's policy.record; package warcrecord
// implements it). Its methods must not block on the network; a failure to archive is its own to
// report: the exchange goes on as it would unrecorded.
type Recorder interface {
	// Exchange is called with each plain-HTTP request as it goes upstream (after the policy
	// allowed it); it may replace req.Body with a reader that copies what is sent. The function it
	// returns (nil: record nothing) is called once: with the response as the site sent it, before
	// the proxy adds its own headers (it may replace resp.Body; the exchange ends when that is
	// closed), or with nil when no response came.
	Exchange(req *http.Request) func(resp *http.Response)
	// Tunnel is called for each CONNECT tunnel opened, whose content the proxy cannot read.
	Tunnel(hostport string)
	// Close ends recording; the proxy calls it when it closes.
	Close() error
}

// Archive answers a replay's requests from a recorded archive instead of the network
// (warcrecord.Archive implements it).
type Archive interface {
	// Serve returns the recorded response to req (it may read req.Body), or ok=false when the
	// archive holds none.
	Serve(req *http.Request) (resp *http.Response, ok bool)
}

// Proxy is an HTTP forward proxy on a loopback port of its own, for one browser context. It is
// safe for concurrent use.
type Proxy struct {
	cfg       Config
	ln        net.Listener
	srv       *http.Server
	rp        *httputil.ReverseProxy
	transport *http.Transport
	rec       atomic.Pointer[recorderBox]
	archive   atomic.Pointer[archiveBox]
	dryRun    atomic.Bool

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
	done    chan struct{}
}

// Listen starts a proxy on 127.0.0.1 at a port of its own.
func Listen(cfg Config) (*Proxy, error) {
	p, err := newProxy(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("egress: listening on loopback: %w", err)
	}
	p.ln = ln
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		MaxHeaderBytes:    256 << 10,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(p.cfg.Logger.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// newProxy is a proxy that does not listen yet: its handler and its upstream transport.
func newProxy(cfg Config) (*Proxy, error) {
	if cfg.Policy == nil {
		return nil, errors.New("egress: Config.Policy is required")
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{cfg: cfg, tunnels: make(map[net.Conn]struct{}), done: make(chan struct{})}
	p.transport = &http.Transport{
		Proxy:                 nil, // never another proxy: the proxy connects itself, to checked addresses
		DialContext:           p.dialChecked,
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: 0, // a slow site is the page's business; the browser times it out
		DisableCompression:    true,
	}
	if cfg.UpstreamTLS != nil {
		p.transport.TLSClientConfig = cfg.UpstreamTLS.Clone()
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Absolute-form in, origin-form out: the URL is the checked one, no X-Forwarded-*.
			pr.Out.URL = pr.In.URL
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del("Proxy-Connection")
			pr.Out.Header.Del("Proxy-Authorization")
			if rec := p.recorder(); rec != nil {
				if pm, _ := pr.Out.Context().Value(permitKey{}).(*permit); pm != nil {
					if done := rec.Exchange(pr.Out); done != nil {
						pm.rec = &recording{done: done}
					}
				}
			}
		},
		Transport:      p.transport,
		FlushInterval:  -1, // stream every write: event streams and long polls must not wait
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
		ErrorHandler:   p.upstreamError,
		ModifyResponse: p.modifyResponse,
	}
	return p, nil
}

// modifyResponse is what the proxy does to a response it relays: it refuses one whose status no
// HTTP response has (Go's client reads "000" as 0; relaying it panicked the handler), reports a
// redirect it must not follow and adds the document CSP.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	if resp.StatusCode < 100 || resp.StatusCode > 999 {
		return fmt.Errorf("egress: unclassifiable response status %d", resp.StatusCode) // a bare 502
	}
	if resp.Request != nil {
		if pm, _ := resp.Request.Context().Value(permitKey{}).(*permit); pm != nil && pm.rec != nil {
			pm.rec.end(resp) // as the site sent it: before the CSP below
		}
	}
	p.addDocumentCSP(resp)
	return p.checkRedirect(resp)
}

// addDocumentCSP adds Config.DocumentCSP to a response whose request may make a document or a
// worker's global scope. The header is added beside any the site sent (policies intersect: a
// page's own CSP can only narrow further), at every status: a 304 carries it into the cached
// response it revalidates, which then holds the current policy.
func (p *Proxy) addDocumentCSP(resp *http.Response) {
	if p.cfg.DocumentCSP == nil || resp.Request == nil {
		return
	}
	csp := p.cfg.DocumentCSP()
	if csp == "" || !mayRunCode(resp.Request) {
		return
	}
	resp.Header.Add("Content-Security-Policy", csp)
}

// mayRunCode tells whether a request's response may become a document or a worker's global scope,
// by its Sec-Fetch-Dest. A request without one (the browser sends none to origins that are not
// potentially trustworthy) or with one this proxy does not know counts as one: failing closed
// costs a header the browser ignores on anything else.
func mayRunCode(r *http.Request) bool {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return false
	}
	switch dest(r) {
	case "audio", "audioworklet", "font", "image", "manifest", "paintworklet", "report", "style",
		"track", "video", "xslt", "empty":
		// Subresources and fetches: a CSP on them is ignored. Worklets take their document's.
		return false
	}
	return true
}

// checkRedirect reports a redirect to a URL the policy does not allow (ReasonRedirectNotAllowed),
// naming its target: the browser's CSP refuses a fetch's redirect before any request exists, and
// reports it under the URL before the redirect, so this is the only layer that can say where it
// led. The response itself goes on unchanged.
func (p *Proxy) checkRedirect(resp *http.Response) error {
	if p.cfg.OnBlocked == nil || resp.StatusCode < 300 || resp.StatusCode > 399 || resp.Request == nil {
		return nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil
	}
	target, err := resp.Request.URL.Parse(loc)
	if err != nil || !target.IsAbs() || target.Host == "" {
		return nil // not a URL a browser would follow
	}
	if p.cfg.Policy().AllowsURL(target) {
		return nil
	}
	d := ""
	if pm, _ := resp.Request.Context().Value(permitKey{}).(*permit); pm != nil {
		d = pm.dest
	}
	p.cfg.OnBlocked(Blocked{URL: strip(target), ResourceType: d, Reason: ReasonRedirectNotAllowed})
	return nil
}

// archiveBox holds an Archive for an atomic pointer.
type archiveBox struct{ a Archive }

// ServeFrom makes the proxy answer every request from a from now on, and never reach the
// network again (a replay, ADR 0035): a request the archive has no answer to, and every
// CONNECT, is refused with ReasonNotInArchive. It cannot be undone: a nil a, or a second
// archive, changes nothing.
func (p *Proxy) ServeFrom(a Archive) {
	if a == nil {
		return
	}
	p.archive.CompareAndSwap(nil, &archiveBox{a: a})
	p.transport.CloseIdleConnections() // no kept-alive connection is reused either
}

// RefuseUnsafe makes the proxy carry a dry run from now on (a live dry-run replay, ADR 0035):
// only plain-HTTP requests with a safe method (GET, HEAD, OPTIONS, TRACE) that are not upgrades
// go on; any other request, and every CONNECT (its requests are unseen), is refused with
// ReasonDryRun. It cannot be undone.
func (p *Proxy) RefuseUnsafe() { p.dryRun.Store(true) }

// unsafeInDryRun tells whether r must be refused because the proxy carries a dry run.
func (p *Proxy) unsafeInDryRun(r *http.Request) bool {
	if !p.dryRun.Load() {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return r.Header.Get("Upgrade") != ""
	}
	return true
}

// archived is the archive the proxy serves from, nil when it forwards to the network.
func (p *Proxy) archived() Archive {
	if b := p.archive.Load(); b != nil {
		return b.a
	}
	return nil
}

// serveArchived answers r from the archive, or refuses it. Nothing is dialled; the document CSP
// is added as to any response.
func (p *Proxy) serveArchived(w http.ResponseWriter, r *http.Request, a Archive, u *url.URL) {
	resp, ok := a.Serve(r)
	if !ok {
		p.refuse(w, Blocked{URL: strip(u), ResourceType: dest(r), Reason: ReasonNotInArchive}, http.StatusForbidden)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 100 || resp.StatusCode > 999 || resp.StatusCode == http.StatusSwitchingProtocols {
		p.refuse(w, Blocked{URL: strip(u), ResourceType: dest(r), Reason: ReasonUnclassifiable}, http.StatusBadGateway)
		return
	}
	resp.Request = r
	p.addDocumentCSP(resp)
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = append([]string(nil), vs...)
	}
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, resp.Body)
	}
}

// recorderBox holds a Recorder for an atomic pointer.
type recorderBox struct{ r Recorder }

// recording is one exchange being recorded; end is called once.
type recording struct {
	once sync.Once
	done func(*http.Response)
}

func (r *recording) end(resp *http.Response) { r.once.Do(func() { r.done(resp) }) }

// SetRecorder makes the proxy archive what it forwards from now on (nil: no more). A recorder
// replaced or left when the proxy closes is closed.
func (p *Proxy) SetRecorder(r Recorder) {
	var box *recorderBox
	if r != nil {
		box = &recorderBox{r: r}
	}
	old := p.rec.Swap(box)
	if old != nil && old.r != r {
		_ = old.r.Close()
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed && r != nil && p.rec.CompareAndSwap(box, nil) {
		_ = r.Close()
	}
}

// Record is SetRecorder for a recorder handed over by a narrower interface (page.Recorder, which
// the engine adapters receive): it must be a Recorder, else nothing is set and the error says so.
func (p *Proxy) Record(rec io.Closer) error {
	r, ok := rec.(Recorder)
	if !ok {
		return fmt.Errorf("egress: %T cannot record the proxy's exchanges", rec)
	}
	p.SetRecorder(r)
	return nil
}

// Replay is ServeFrom for an archive handed over by a narrower interface (page.Archive, which
// the engine adapters receive): it must be an Archive, else nothing is set and the error says so.
func (p *Proxy) Replay(a any) error {
	ar, ok := a.(Archive)
	if !ok || ar == nil {
		return fmt.Errorf("egress: %T cannot answer the proxy's requests", a)
	}
	p.ServeFrom(ar)
	return nil
}

func (p *Proxy) recorder() Recorder {
	if b := p.rec.Load(); b != nil {
		return b.r
	}
	return nil
}

// Addr is the proxy's address, 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's address as a browser's proxy setting: http://127.0.0.1:port.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Close stops the proxy: the listener, every connection and every tunnel.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for c := range p.tunnels {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	<-p.done
	p.transport.CloseIdleConnections()
	if old := p.rec.Swap(nil); old != nil {
		_ = old.r.Close()
	}
	return err
}

// ServeHTTP handles one proxied request: a CONNECT or an absolute-form HTTP request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		switch {
		case p.intercepting(): // its requests are seen, and checked one by one
			p.intercept(w, r)
		case p.dryRun.Load(): // its requests would be unseen
			p.refuse(w, Blocked{URL: r.Host, ResourceType: "tunnel", Reason: ReasonDryRun}, http.StatusForbidden)
		case p.archived() != nil: // a replay: opaque tunnels were never recorded, and nothing is dialled
			p.refuse(w, Blocked{URL: r.Host, ResourceType: "tunnel", Reason: ReasonNotInArchive}, http.StatusForbidden)
		default:
			p.connect(w, r)
		}
		return
	}
	if p.unsafeInDryRun(r) {
		b := Blocked{ResourceType: dest(r), Reason: ReasonDryRun}
		if r.URL.IsAbs() {
			b.URL = strip(r.URL)
		}
		p.refuse(w, b, http.StatusForbidden)
		return
	}
	u := r.URL
	if !u.IsAbs() || u.Host == "" || u.Opaque != "" || u.User != nil {
		p.refuse(w, Blocked{URL: "", ResourceType: dest(r), Reason: ReasonUnclassifiable}, http.StatusBadRequest)
		return
	}
	if !strings.EqualFold(u.Scheme, "http") {
		// https travels in a CONNECT tunnel and ws over http; anything else is not ours to carry.
		p.refuse(w, Blocked{URL: strip(u), ResourceType: dest(r), Reason: ReasonUnclassifiable}, http.StatusBadRequest)
		return
	}
	p.forward(w, r, u)
}

// forward checks and sends on a request for u (http, or https read inside an opened tunnel), or
// answers it from the archive. Its caller refused it already if the proxy carries a dry run and
// it is not safe.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, u *url.URL) {
	if !strings.EqualFold(r.Host, u.Host) {
		// A Host header that disagrees with the checked URL would let the site see another name.
		p.refuse(w, Blocked{URL: strip(u), ResourceType: dest(r), Reason: ReasonUnclassifiable}, http.StatusBadRequest)
		return
	}
	pol := p.cfg.Policy()
	if !pol.AllowsURL(u) {
		p.refuse(w, Blocked{URL: strip(u), ResourceType: dest(r), Reason: ReasonOriginNotAllowed}, http.StatusForbidden)
		return
	}
	if a := p.archived(); a != nil {
		p.serveArchived(w, r, a, u)
		return
	}
	ctx := context.WithValue(r.Context(), permitKey{}, &permit{named: pol.NamesExplicitly(u), url: strip(u), dest: dest(r)})
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// connect handles a CONNECT (a TLS connection, or a WebSocket): the policy must allow the
// authority as an http or https origin (ws and wss are the same origins).
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	host, port, named, ok := p.checkTunnel(w, r)
	if !ok {
		return
	}
	hostport := net.JoinHostPort(host, port)
	ctx := context.WithValue(r.Context(), permitKey{}, &permit{named: named, url: hostport, dest: "tunnel"})
	up, err := p.dialChecked(ctx, "tcp", hostport)
	if err != nil {
		var refused *refusedError
		if errors.As(err, &refused) {
			p.refuse(w, refused.b, http.StatusForbidden)
			return
		}
		http.Error(w, "the proxy could not connect", http.StatusBadGateway)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	if !p.track(conn, up) {
		return
	}
	defer p.untrack(conn, up)
	if rec := p.recorder(); rec != nil {
		rec.Tunnel(hostport) // its content stays unseen: the archive says so
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(conn, brw.Reader, up)
}

// track registers a tunnel's two connections so that Close ends them; false when closed already.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.tunnels, c)
	}
}

// splice copies bytes both ways until either side ends; buffered holds what the client sent
// after its CONNECT request and the server read already.
func splice(client net.Conn, buffered *bufio.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(up, io.MultiReader(io.LimitReader(buffered, int64(buffered.Buffered())), client))
		if c, ok := up.(interface{ CloseWrite() error }); ok {
			_ = c.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, up)
		if c, ok := client.(interface{ CloseWrite() error }); ok {
			_ = c.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// permit carries what the handler decided to the dialer: whether the policy names the host
// (so that a private address may be reached), and how to report a refusal.
type permit struct {
	named     bool
	url, dest string
	rec       *recording // the exchange's recording, from the request to its response or failure
}

type permitKey struct{}

// refusedError is a connection the dialer refused by policy.
type refusedError struct{ b Blocked }

func (e *refusedError) Error() string {
	return fmt.Sprintf("egress: %s refused (%s)", e.b.URL, e.b.Reason)
}

// dialChecked resolves addr's host once, refuses private addresses the policy does not name, and
// connects to a checked address itself (so a second lookup cannot rebind the name). Without a
// permit in ctx (the handler's decision) it refuses.
func (p *Proxy) dialChecked(ctx context.Context, network, addr string) (net.Conn, error) {
	pm, _ := ctx.Value(permitKey{}).(*permit)
	if pm == nil {
		return nil, &refusedError{Blocked{URL: addr, Reason: ReasonUnclassifiable}}
	}
	if p.archived() != nil { // a replay never dials, whatever path led here
		return nil, &refusedError{Blocked{URL: pm.url, ResourceType: pm.dest, Reason: ReasonNotInArchive}}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &refusedError{Blocked{URL: pm.url, ResourceType: pm.dest, Reason: ReasonUnclassifiable}}
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		lctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		addrs, err = p.cfg.Resolver.LookupNetIP(lctx, "ip", host)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("egress: resolving %s: %w", host, err)
		}
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, &refusedError{Blocked{URL: pm.url, ResourceType: pm.dest, Reason: ReasonUnclassifiable}}
	}
	var allowed []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if p.forbidden(netip.AddrPortFrom(a, uint16(pn))) {
			continue
		}
		if !policy.PrivateAddr(a) || pm.named {
			allowed = append(allowed, a)
		}
	}
	if len(allowed) == 0 {
		return nil, &refusedError{Blocked{URL: pm.url, ResourceType: pm.dest, Reason: ReasonPrivateNetwork}}
	}
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	var last error
	for _, a := range allowed {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, fmt.Errorf("egress: connecting to %s: %w", host, last)
}

// forbidden tells whether ap is one of Config.Forbidden's addresses.
func (p *Proxy) forbidden(ap netip.AddrPort) bool {
	for _, f := range p.cfg.Forbidden {
		if f.Port() != ap.Port() {
			continue
		}
		fa := f.Addr().Unmap()
		if fa == ap.Addr() || fa.IsUnspecified() || fa.IsLoopback() && ap.Addr().IsLoopback() {
			return true
		}
	}
	return false
}

// upstreamError answers a request the proxy could not forward: refused at dial (a private
// address), or the site unreachable.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if pm, _ := r.Context().Value(permitKey{}).(*permit); pm != nil && pm.rec != nil {
		pm.rec.end(nil) // no response: nothing is archived
	}
	var refused *refusedError
	if errors.As(err, &refused) {
		p.refuse(w, refused.b, http.StatusForbidden)
		return
	}
	p.cfg.Logger.Debug("egress: upstream failed", "err", err)
	w.WriteHeader(http.StatusBadGateway)
}

// refuse answers a refused request and reports it. The answer carries nothing of the site.
func (p *Proxy) refuse(w http.ResponseWriter, b Blocked, status int) {
	if p.cfg.OnBlocked != nil {
		p.cfg.OnBlocked(b)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "refused by the task's policy ("+string(b.Reason)+")\n")
}

// dest is what the browser says the request is for.
func dest(r *http.Request) string {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return "websocket"
	}
	d := strings.ToLower(r.Header.Get("Sec-Fetch-Dest"))
	if len(d) > 32 || strings.ContainsFunc(d, func(c rune) bool { return (c < 'a' || c > 'z') && c != '-' }) {
		return ""
	}
	return d
}

// strip renders u without userinfo, query or fragment, and with its path clipped.
func strip(u *url.URL) string {
	path := u.EscapedPath()
	if len(path) > 512 {
		path = path[:512]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + path
}

// authority splits a CONNECT target host:port, with a decimal port 1–65535 and a host that is a
// DNS name or an IP literal; ok=false for anything else.
func authority(s string) (host, port string, ok bool) {
	h, p, err := net.SplitHostPort(s)
	if err != nil || h == "" || len(h) > 253 {
		return "", "", false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
		return "", "", false
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", "", false
		}
		return a.String(), p, true
	}
	for _, c := range h {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			return "", "", false
		}
	}
	return strings.ToLower(h), p, true
}
