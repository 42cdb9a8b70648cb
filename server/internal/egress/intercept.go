package egress

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// CertSource mints the certificate the proxy presents, in a site's place, inside a tunnel it
// intercepts (tlsmint.Authority implements it; ADR 0037).
type CertSource interface {
	Certificate(host string) (*tls.Certificate, error)
}

// intercepting tells whether a CONNECT is to be opened and its requests seen: the proxy can mint
// certificates, and it records, answers from an archive or carries a dry run (each needs the
// requests, which an opaque tunnel hides).
func (p *Proxy) intercepting() bool {
	return p.cfg.Certs != nil && (p.recorder() != nil || p.archived() != nil || p.dryRun.Load())
}

// errSNIMismatch refuses a TLS handshake that names another host than the tunnel's authority.
var errSNIMismatch = errors.New("egress: the TLS server name is not the tunnel's host")

// intercept opens a CONNECT tunnel whose authority the policy allows and serves the HTTP/1.1
// requests inside it as it serves plain ones: checked, recorded, answered from an archive or
// refused in a dry run, then sent to the site over TLS the proxy verifies itself. Inside, TLS is
// terminated with a certificate of Config.Certs for the authority's host; a tunnel that does not
// start with a TLS handshake carries plain HTTP (a WebSocket's upgrade). Nothing is dialled
// before a request inside is allowed.
func (p *Proxy) intercept(w http.ResponseWriter, r *http.Request) {
	host, port, _, ok := p.checkTunnel(w, r)
	if !ok {
		return
	}
	hostport := net.JoinHostPort(host, port)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	if !p.track(conn) {
		return
	}
	defer p.untrack(conn)
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	client := &peekedConn{Conn: conn, r: brw.Reader}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	first, err := client.r.Peek(1)
	if err != nil {
		return
	}
	var inner net.Conn = client
	scheme := "http"
	if first[0] == 0x16 { // a TLS record of type handshake
		scheme = "https"
		tc := tls.Server(client, &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"}, // one request at a time, as the proxy reads them
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if sni := strings.TrimSuffix(hello.ServerName, "."); sni != "" && !strings.EqualFold(sni, host) {
					return nil, errSNIMismatch
				}
				return p.cfg.Certs.Certificate(host)
			},
		})
		if err := tc.Handshake(); err != nil {
			p.cfg.Logger.Debug("egress: intercepted TLS handshake failed", "host", hostport, "err", err)
			if errors.Is(err, errSNIMismatch) && p.cfg.OnBlocked != nil {
				p.cfg.OnBlocked(Blocked{URL: hostport, ResourceType: "tunnel", Reason: ReasonUnclassifiable})
			}
			return
		}
		inner = tc
	}
	_ = conn.SetReadDeadline(time.Time{})
	ln := newOneConnListener(inner)
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serveTunneled(w, r, scheme, host, port) }),
		ReadHeaderTimeout: 30 * time.Second,
		MaxHeaderBytes:    256 << 10,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          p.srv.ErrorLog,
	}
	_ = srv.Serve(ln) // returns once the connection has closed
}

// checkTunnel reads a CONNECT's authority and checks it against the policy, refusing (ok=false)
// one that is malformed or not allowed; named says whether the policy names it explicitly.
func (p *Proxy) checkTunnel(w http.ResponseWriter, r *http.Request) (host, port string, named, ok bool) {
	host, port, ok = authority(r.Host)
	if !ok {
		p.refuse(w, Blocked{ResourceType: "tunnel", Reason: ReasonUnclassifiable}, http.StatusBadRequest)
		return "", "", false, false
	}
	hostport := net.JoinHostPort(host, port)
	allowed, named := p.tunnelPolicy(hostport)
	if !allowed {
		p.refuse(w, Blocked{URL: hostport, ResourceType: "tunnel", Reason: ReasonOriginNotAllowed}, http.StatusForbidden)
		return "", "", false, false
	}
	return host, port, named, true
}

// tunnelPolicy tells whether the policy allows hostport as an https or http origin (ws and wss
// are the same origins), and whether it names it explicitly (so a private address may be reached).
func (p *Proxy) tunnelPolicy(hostport string) (allowed, named bool) {
	pol := p.cfg.Policy()
	for _, scheme := range []string{"https", "http"} {
		u := &url.URL{Scheme: scheme, Host: hostport}
		if pol.AllowsURL(u) {
			allowed = true
			named = named || pol.NamesExplicitly(u)
		}
	}
	return allowed, named
}

// serveTunneled serves one request read inside an intercepted tunnel to host:port. It must be in
// origin form and its Host must be the tunnel's authority; then it is served as a plain request
// to scheme://host[:port]/path would be.
func (p *Proxy) serveTunneled(w http.ResponseWriter, r *http.Request, scheme, host, port string) {
	hostport := net.JoinHostPort(host, port)
	if r.Method == http.MethodConnect || r.URL.IsAbs() || r.URL.Host != "" || !strings.HasPrefix(r.URL.Path, "/") {
		p.refuse(w, Blocked{URL: scheme + "://" + hostport, ResourceType: dest(r), Reason: ReasonUnclassifiable}, http.StatusBadRequest)
		return
	}
	defaultPort := "80"
	if scheme == "https" {
		defaultPort = "443"
	}
	hh := r.Host
	if _, _, err := net.SplitHostPort(hh); err != nil {
		hh = net.JoinHostPort(strings.Trim(hh, "[]"), defaultPort)
	}
	if h, p2, ok := authority(hh); !ok || h != host || p2 != port {
		// The Host must name the tunnel's site: another name would let a page reach a site the
		// policy checked under one name by another.
		p.refuse(w, Blocked{URL: scheme + "://" + hostport, ResourceType: dest(r), Reason: ReasonUnclassifiable}, http.StatusBadRequest)
		return
	}
	canonical := hostport
	if port == defaultPort {
		canonical = host
		if strings.Contains(host, ":") {
			canonical = "[" + host + "]"
		}
	}
	r.URL.Scheme, r.URL.Host = scheme, canonical
	r.Host = canonical
	if p.unsafeInDryRun(r) {
		p.refuse(w, Blocked{URL: strip(r.URL), ResourceType: dest(r), Reason: ReasonDryRun}, http.StatusForbidden)
		return
	}
	p.forward(w, r, r.URL)
}

// peekedConn is a hijacked connection read through the server's buffer, which may hold what the
// client sent after its CONNECT.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// oneConnListener hands out one connection, then blocks until it is closed and reports the
// listener closed: http.Server.Serve on it returns when the tunnel ends.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{})}
	l.conn = &notifyConn{Conn: c, closed: l.closed}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.conn })
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// notifyConn closes its channel once when it is closed.
type notifyConn struct {
	net.Conn
	closed chan struct{}
	once   sync.Once
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}
