package warcrecord

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nlnwa/gowarc/v3"
)

// Defaults of [Config].
const (
	// DefaultMaxBytes is a task's archive cap when none is configured.
	DefaultMaxBytes int64 = 64 << 20
	// DefaultMaxBodyBytes is the cap of one stored request or response body.
	DefaultMaxBodyBytes int64 = 8 << 20
	// memBytes of a body are kept in memory; the rest is spooled to Config.SpoolDir.
	memBytes = 256 << 10
)

// Reason says why the archive lacks something; the values are the spec's
// RecordTruncatedData.reason.
type Reason string

// The reasons of a truncation.
const (
	// ReasonTaskBytes: the task's archive reached its cap; bodies are no longer stored, and once
	// not even an exchange's heads fit, nothing more is.
	ReasonTaskBytes Reason = "task_bytes"
	// ReasonBodyBytes: a body was longer than the per-body cap; its first bytes are stored.
	ReasonBodyBytes Reason = "body_bytes"
	// ReasonContentEncoding: a body was encoded in a way the recorder cannot decode (brotli,
	// zstd, …), so it could not be checked for protected values: it is not stored.
	ReasonContentEncoding Reason = "content_encoding"
	// ReasonWriteFailed: the archive could not be written (disk full, closed): what failed is
	// missing from it. The exchange itself went on.
	ReasonWriteFailed Reason = "write_failed"
)

// Truncation is what [Config.OnTruncated] is told, once per reason and recorder.
type Truncation struct {
	Reason Reason
	// Limit is the cap that was hit, in bytes (0 for content_encoding and write_failed).
	Limit int64
	// URL is the exchange it first happened to: scheme://host/path, masked, without query.
	URL string
}

// Budget is a task's archive cap, shared by the recorders of its sessions. Safe for concurrent
// use.
type Budget struct {
	mu        sync.Mutex
	max, used int64
	exhausted bool
}

// NewBudget is a cap of max bytes of which used are spent already (the task's earlier archives).
func NewBudget(max, used int64) *Budget {
	if max <= 0 {
		max = DefaultMaxBytes
	}
	return &Budget{max: max, used: used, exhausted: used >= max}
}

// Max is the cap in bytes.
func (b *Budget) Max() int64 { return b.max }

// take spends n bytes if they fit; once something did not fit, the budget counts as exhausted
// (no more bodies), though smaller records may still fit.
func (b *Budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		b.exhausted = true
		return false
	}
	b.used += n
	return true
}

// spend counts n bytes written whatever the cap (a warcinfo record: an archive file needs one).
func (b *Budget) spend(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += n
	b.exhausted = b.exhausted || b.used >= b.max
}

func (b *Budget) isExhausted() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.exhausted
}

// Field is one field of the warcinfo record.
type Field struct{ Name, Value string }

// Config configures a [Recorder].
type Config struct {
	// Out is the archive: records are appended to it, each whole, one at a time.
	Out io.Writer
	// Budget is the task's cap; nil is a fresh one of DefaultMaxBytes.
	Budget *Budget
	// MaxBodyBytes caps one stored body (after decoding); 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Protected are the values never to store; nil is a fresh empty set ([Recorder.Protect]).
	Protected *Protected
	// SpoolDir holds the bodies of exchanges in flight past their first 256 KiB ("" is the
	// system's temporary directory). Only masked bytes are spooled.
	SpoolDir string
	// Info are the warcinfo record's fields (after software and format).
	Info []Field
	// OnTruncated is told of the first truncation of each reason. It must not block.
	OnTruncated func(Truncation)
	// Logger receives operational logs (never a URL's query, a header or a body).
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Recorder writes a session's HTTP exchanges into a WARC 1.1 archive: a warcinfo record first,
// then for each exchange a request and a response record linked by WARC-Concurrent-To, and a
// metadata record for each tunnel whose content it cannot see. Every protected value is masked
// before anything is stored or spooled, and the digests are of what is stored. Safe for
// concurrent use.
type Recorder struct {
	cfg    Config
	infoID string

	mu     sync.Mutex  // serializes writes to Out
	closed atomic.Bool // set under mu: a write in progress finishes before Close returns

	rmu      sync.Mutex
	reported map[Reason]bool
}

// New writes the warcinfo record to cfg.Out and returns the recorder.
func New(cfg Config) (*Recorder, error) {
	if cfg.Out == nil {
		return nil, errors.New("warcrecord: Config.Out is required")
	}
	if cfg.Budget == nil {
		cfg.Budget = NewBudget(DefaultMaxBytes, 0)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Protected == nil {
		cfg.Protected = NewProtected()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Recorder{cfg: cfg, infoID: newID(), reported: make(map[Reason]bool)}
	var info bytes.Buffer
	info.WriteString("software: BAP runtime\r\nformat: WARC File Format 1.1\r\n" +
		"conformsTo: http://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/\r\n")
	for _, f := range cfg.Info {
		if !validName(f.Name) || strings.ContainsAny(f.Value, "\r\n") {
			return nil, fmt.Errorf("warcrecord: warcinfo field %q is not name: value on one line", f.Name)
		}
		fmt.Fprintf(&info, "%s: %s\r\n", f.Name, f.Value)
	}
	b := r.builder(gowarc.Warcinfo, r.infoID, cfg.Now())
	b.AddWarcHeader(gowarc.ContentType, gowarc.ApplicationWarcFields)
	if _, err := b.Write(info.Bytes()); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("warcrecord: warcinfo: %w", err)
	}
	rec, _, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("warcrecord: warcinfo: %w", err)
	}
	cfg.Budget.spend(size(rec))
	if err := r.write(rec); err != nil {
		return nil, fmt.Errorf("warcrecord: writing the warcinfo record: %w", err)
	}
	return r, nil
}

// Protect adds a value never to store (Protected.Add).
func (r *Recorder) Protect(name, value string) { r.cfg.Protected.Add(name, value) }

// Close ends recording: exchanges that finish later are not written (and reported as
// write_failed). It does not close Config.Out.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed.Store(true)
	return nil
}

func newID() string { return "<urn:uuid:" + uuid.NewString() + ">" }

// builder is a record builder with the recorder's options: WARC 1.1, SHA-256 digests in base16
// computed over what is stored, bodies past memBytes spooled to SpoolDir.
func (r *Recorder) builder(t gowarc.RecordType, id string, at time.Time) gowarc.WarcRecordBuilder {
	b := gowarc.NewRecordBuilder(t,
		gowarc.WithAddMissingDigest(true),
		gowarc.WithDefaultDigestAlgorithm("sha256"),
		gowarc.WithBufferTmpDir(r.cfg.SpoolDir),
		gowarc.WithBufferMaxMemBytes(memBytes),
	)
	b.AddWarcHeader(gowarc.WarcRecordID, id)
	b.AddWarcHeaderTime(gowarc.WarcDate, at)
	if t != gowarc.Warcinfo {
		b.AddWarcHeader(gowarc.WarcWarcinfoID, r.infoID)
	}
	return b
}

// write appends records to Out, whole and in order; false with an error when Out failed or the
// recorder is closed.
func (r *Recorder) write(recs ...gowarc.WarcRecord) error {
	defer func() {
		for _, rec := range recs {
			_ = rec.Close()
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return errors.New("warcrecord: the recorder is closed")
	}
	m := gowarc.NewMarshaler()
	for _, rec := range recs {
		if _, _, err := m.Marshal(r.cfg.Out, rec, 0); err != nil {
			return err
		}
	}
	return nil
}

// size is a record's length in the archive.
func size(rec gowarc.WarcRecord) int64 {
	var h bytes.Buffer
	_, _ = rec.WarcHeader().Write(&h)
	n, _ := rec.WarcHeader().GetInt64(gowarc.ContentLength)
	return int64(len(rec.Version().String())) + 2 + int64(h.Len()) + 2 + n + 4
}

// report tells OnTruncated of the first truncation of t's reason.
func (r *Recorder) report(t Truncation) {
	r.rmu.Lock()
	first := !r.reported[t.Reason]
	r.reported[t.Reason] = true
	r.rmu.Unlock()
	if first && r.cfg.OnTruncated != nil {
		r.cfg.OnTruncated(t)
	}
}

// failed reports an archive that could not be written: logged, and told once.
func (r *Recorder) failed(url string, err error) {
	r.cfg.Logger.Warn("warcrecord: an exchange could not be archived", "err", err)
	r.report(Truncation{Reason: ReasonWriteFailed, URL: url})
}

// Tunnel records that a CONNECT tunnel to hostport was opened: a metadata record saying that
// its content (TLS, or a WebSocket) is not in the archive.
func (r *Recorder) Tunnel(hostport string) {
	b := r.builder(gowarc.Metadata, newID(), r.cfg.Now())
	b.AddWarcHeader(gowarc.ContentType, gowarc.ApplicationWarcFields)
	b.AddWarcHeader(gowarc.WarcTargetURI, "tunnel://"+hostport)
	_, _ = fmt.Fprintf(b, "tunnel: %s\r\ncontent: not recorded (a CONNECT tunnel: TLS or a WebSocket, which the proxy cannot read)\r\n", hostport)
	rec, _, err := b.Build()
	if err != nil {
		r.failed(hostport, err)
		return
	}
	if !r.cfg.Budget.take(size(rec)) {
		_ = rec.Close()
		r.report(Truncation{Reason: ReasonTaskBytes, Limit: r.cfg.Budget.Max(), URL: hostport})
		return
	}
	if err := r.write(rec); err != nil {
		r.failed(hostport, err)
	}
}

// Exchange begins recording one plain-HTTP exchange with req as it goes upstream: it replaces
// req.Body with a reader that copies (masked) what is sent. The returned function is called
// once, with the response the proxy relays (its Body is replaced in turn; the exchange is written
// when it is closed), or with nil when no response came (nothing is written). nil when the
// recorder is closed.
func (r *Recorder) Exchange(req *http.Request) func(*http.Response) {
	if r.closed.Load() { // without the lock: a request never waits for an archive write
		return nil
	}
	pats := r.cfg.Protected.patterns()
	x := &exchange{r: r, pats: pats, at: r.cfg.Now(), reqID: newID(), respID: newID(),
		reqMasked: map[string]map[string]bool{}, respMasked: map[string]map[string]bool{}}
	x.target = x.mask(req.URL.String(), x.reqMasked, "target")
	x.url = x.mask(strings.ToLower(req.URL.Scheme)+"://"+strings.ToLower(req.URL.Host)+req.URL.EscapedPath(), nil, "")
	head := x.requestHead(req)
	noBody := req.Body == nil || req.Body == http.NoBody
	omit := ""
	if req.Header.Get("Content-Encoding") != "" {
		omit = "content_encoding" // a coded request body is not decoded: not stored
	}
	x.req = r.newCapture(gowarc.Request, x.reqID, x.at, head, omit, "")
	if omit != "" {
		r.report(Truncation{Reason: ReasonContentEncoding, URL: x.url})
	}
	if noBody {
		x.req.complete = true
	} else {
		req.Body = &tee{rc: req.Body, c: x.req, want: req.ContentLength}
	}
	var once sync.Once
	return func(resp *http.Response) {
		once.Do(func() { x.response(resp) })
	}
}

// exchange is one request and its response being recorded.
type exchange struct {
	r                     *Recorder
	pats                  []pattern
	at                    time.Time
	reqID, respID         string
	target, url           string
	req, resp             *capture
	respAt                time.Time
	reqMasked, respMasked map[string]map[string]bool // part → names
}

// mask masks s, noting the names under part in into (when into is not nil).
func (x *exchange) mask(s string, into map[string]map[string]bool, part string) string {
	names := map[string]bool{}
	out := maskString(s, x.pats, names)
	if into != nil && len(names) > 0 {
		if into[part] == nil {
			into[part] = map[string]bool{}
		}
		for n := range names {
			into[part][n] = true
		}
	}
	return out
}

// requestHead is the request line and headers as they go upstream, masked.
func (x *exchange) requestHead(req *http.Request) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", req.Method, x.mask(req.URL.RequestURI(), x.reqMasked, "target"))
	fmt.Fprintf(&b, "Host: %s\r\n", req.Host)
	h := req.Header.Clone()
	if req.ContentLength > 0 && h.Get("Content-Length") == "" {
		h.Set("Content-Length", strconv.FormatInt(req.ContentLength, 10))
	}
	x.writeHeaders(&b, h, x.reqMasked)
	return b.Bytes()
}

// writeHeaders writes h sorted by name, each value masked; a header whose name holds a protected
// value is left out (a name cannot carry a mask).
func (x *exchange) writeHeaders(b *bytes.Buffer, h http.Header, masked map[string]map[string]bool) {
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}) {
		if x.mask(k, masked, "header") != k {
			continue
		}
		for _, v := range h[k] {
			v = x.mask(v, masked, "header")
			if cv, name := maskCredential(k, v); name != "" {
				v = cv
				if masked["header"] == nil {
					masked["header"] = map[string]bool{}
				}
				masked["header"][name] = true
			}
			fmt.Fprintf(b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
}

// maskCredential masks the credentials a header carries whatever the task declared protected:
// a session cookie or a bearer token is as good as a password to whoever reads the archive (an
// evidence bundle goes to third parties). Cookie and Set-Cookie keep their names and attributes,
// Authorization and Proxy-Authorization their scheme. name is the mask's name, "" for a header
// that carries none.
func maskCredential(key, v string) (masked, name string) {
	switch http.CanonicalHeaderKey(key) {
	case "Authorization", "Proxy-Authorization":
		scheme, _, _ := strings.Cut(strings.TrimSpace(v), " ")
		if len(scheme) > 32 || strings.ContainsAny(scheme, "=,;\"") {
			scheme = ""
		}
		return strings.TrimSpace(scheme + " " + string(maskText("authorization"))), "authorization"
	case "Cookie":
		pairs := strings.Split(v, ";")
		for i, p := range pairs {
			n, _, _ := strings.Cut(p, "=")
			pairs[i] = n + "=" + string(maskText("cookie"))
		}
		return strings.Join(pairs, ";"), "cookie"
	case "Set-Cookie":
		first, attrs, hasAttrs := strings.Cut(v, ";")
		n, _, _ := strings.Cut(first, "=")
		out := n + "=" + string(maskText("cookie"))
		if hasAttrs {
			out += ";" + attrs
		}
		return out, "cookie"
	}
	return v, ""
}

// response starts recording the response (nil: no response came; the request is dropped).
func (x *exchange) response(resp *http.Response) {
	if resp == nil {
		x.req.discard()
		return
	}
	x.respAt = x.r.cfg.Now()
	x.pats = x.r.cfg.Protected.patterns() // what was added while the request went out too
	h := resp.Header.Clone()
	omit, decoded := "", ""
	switch ce := strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding"))); {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		omit = "upgrade" // the body is the upgraded connection (a WebSocket): not ours to read
	case ce == "" || ce == "identity":
	case len(h.Values("Content-Encoding")) == 1 && (ce == "gzip" || ce == "x-gzip" || ce == "deflate"):
		decoded = ce // stored decoded, so that masking sees the text
		h.Del("Content-Encoding")
		h.Del("Content-Length")
	default:
		omit = "content_encoding"
	}
	var b bytes.Buffer
	proto := resp.Proto
	if proto != "HTTP/1.0" {
		proto = "HTTP/1.1"
	}
	reason := strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)))
	fmt.Fprintf(&b, "%s %03d %s\r\n", proto, resp.StatusCode, x.mask(reason, x.respMasked, "status"))
	x.writeHeaders(&b, h, x.respMasked)
	x.resp = x.r.newCapture(gowarc.Response, x.respID, x.respAt, b.Bytes(), omit, decoded)
	if omit != "" {
		if omit == "content_encoding" {
			x.r.report(Truncation{Reason: ReasonContentEncoding, URL: x.url})
		}
		x.finish()
		return
	}
	resp.Body = &tee{rc: resp.Body, c: x.resp, want: resp.ContentLength, onClose: x.finish}
}

// finish writes the exchange: both records whole if the task's budget has room, else both
// without their bodies (WARC-Truncated: length), else nothing.
func (x *exchange) finish() {
	r := x.r
	x.req.seal()
	x.resp.seal()
	for _, c := range []*capture{x.req, x.resp} {
		if c.truncated == "length" && c.limit == r.cfg.MaxBodyBytes {
			r.report(Truncation{Reason: ReasonBodyBytes, Limit: r.cfg.MaxBodyBytes, URL: x.url})
		}
	}
	if c := x.req.err; c != nil {
		x.discard()
		r.failed(x.url, c)
		return
	}
	if c := x.resp.err; c != nil {
		x.discard()
		r.failed(x.url, c)
		return
	}
	reqRec, err := x.record(x.req, gowarc.Request, false)
	if err != nil {
		x.discard()
		r.failed(x.url, err)
		return
	}
	respRec, err := x.record(x.resp, gowarc.Response, false)
	if err != nil {
		_ = reqRec.Close()
		x.discard()
		r.failed(x.url, err)
		return
	}
	if !r.cfg.Budget.take(size(reqRec) + size(respRec)) {
		_ = reqRec.Close()
		_ = respRec.Close()
		r.report(Truncation{Reason: ReasonTaskBytes, Limit: r.cfg.Budget.Max(), URL: x.url})
		if reqRec, err = x.record(x.req, gowarc.Request, true); err == nil {
			if respRec, err = x.record(x.resp, gowarc.Response, true); err != nil {
				_ = reqRec.Close()
			}
		}
		if err != nil {
			r.failed(x.url, err)
			return
		}
		if !r.cfg.Budget.take(size(reqRec) + size(respRec)) {
			_ = reqRec.Close()
			_ = respRec.Close()
			return // not even the heads fit: reported above
		}
	}
	if err := r.write(reqRec, respRec); err != nil {
		r.failed(x.url, err)
	}
}

func (x *exchange) discard() {
	x.req.discard()
	x.resp.discard()
}

// record builds the request or response record of c (headsOnly: without its body, as if it
// was cut at length 0).
func (x *exchange) record(c *capture, t gowarc.RecordType, headsOnly bool) (gowarc.WarcRecord, error) {
	id, other, at, masked, msgtype := x.reqID, x.respID, x.at, x.reqMasked, "request"
	if t == gowarc.Response {
		id, other, at, masked, msgtype = x.respID, x.reqID, x.respAt, x.respMasked, "response"
	}
	var b gowarc.WarcRecordBuilder
	truncated := c.truncated
	if headsOnly {
		b = x.r.builder(t, id, at)
		if _, err := b.Write(c.head); err != nil {
			_ = b.Close()
			return nil, err
		}
		if c.bodyBytes > 0 || truncated != "" {
			truncated = "length"
		}
	} else {
		b, c.b = c.b, nil
	}
	b.AddWarcHeader(gowarc.WarcTargetURI, x.target)
	b.AddWarcHeader(gowarc.WarcConcurrentTo, other)
	b.AddWarcHeader(gowarc.ContentType, "application/http;msgtype="+msgtype)
	if truncated != "" {
		b.AddWarcHeader(gowarc.WarcTruncated, truncated)
	}
	if c.omit != "" {
		b.AddWarcHeader("BAP-Omitted", "body;reason="+c.omit)
	}
	if c.decoded != "" {
		b.AddWarcHeader("BAP-Decoded", c.decoded)
	}
	for n := range c.masked() {
		addMasked(masked, "body", n)
	}
	for _, part := range slices.Sorted(keys(masked)) {
		for _, n := range slices.Sorted(keys(masked[part])) {
			b.AddWarcHeader("BAP-Masked", part+";name="+n)
		}
	}
	rec, _, err := b.Build()
	return rec, err
}

func addMasked(m map[string]map[string]bool, part, name string) {
	if m[part] == nil {
		m[part] = map[string]bool{}
	}
	m[part][name] = true
}

func keys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// capture collects one message of an exchange as it streams: its head, then its body masked,
// decoded if need be, and cut at the body cap, into a record builder.
type capture struct {
	head    []byte
	omit    string // why the body is not stored ("" when it is)
	decoded string // the content coding the body was stored without
	limit   int64

	mu        sync.Mutex
	b         gowarc.WarcRecordBuilder
	mask      *masker
	dec       *decoder
	bodyBytes int64  // stored body bytes
	truncated string // WARC-Truncated value ("" when whole)
	complete  bool   // the body was read to its end
	sealed    bool
	err       error
}

// newCapture begins the record t of id at at with head; the body follows.
func (r *Recorder) newCapture(t gowarc.RecordType, id string, at time.Time, head []byte, omit, decoded string) *capture {
	c := &capture{head: head, omit: omit, decoded: decoded, limit: r.cfg.MaxBodyBytes}
	if r.cfg.Budget.isExhausted() {
		c.limit = 0 // bodies are no longer stored (reported when it happened)
	}
	c.b = r.builder(t, id, at)
	if _, err := c.b.Write(head); err != nil {
		c.err = err
	}
	c.mask = newFollowingMasker(bodySink{c}, r.cfg.Protected)
	if omit != "" {
		c.truncated = "unspecified"
		c.complete = true
	}
	if decoded != "" {
		c.dec = newDecoder(decoded, lockedMasker{c})
	}
	return c
}

// lockedMasker is the decoder's way into the masker: under the capture's lock.
type lockedMasker struct{ c *capture }

// errFull stops a decoder whose output reached the body cap: decoding further (a compression
// bomb) would store nothing more.
var errFull = errors.New("warcrecord: body cap reached")

func (l lockedMasker) Write(p []byte) (int, error) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	if l.c.err == nil {
		if _, err := l.c.mask.Write(p); err != nil {
			l.c.err = err
		}
	}
	if l.c.truncated == "length" {
		return 0, errFull
	}
	return len(p), nil
}

// bodySink stores masked body bytes up to the cap. Called with c.mu held.
type bodySink struct{ c *capture }

func (s bodySink) Write(p []byte) (int, error) {
	c := s.c
	n := int64(len(p))
	if room := c.limit - c.bodyBytes; n > room {
		p = p[:max(room, 0)]
		c.truncated = "length"
	}
	if len(p) > 0 && c.err == nil {
		if _, err := c.b.Write(p); err != nil {
			c.err = err
		}
		c.bodyBytes += int64(len(p))
	}
	return int(n), nil
}

// add takes body bytes as they pass. Errors stay in the capture: the exchange goes on.
func (c *capture) add(p []byte) {
	c.mu.Lock()
	if c.sealed || c.omit != "" || c.err != nil || c.truncated == "length" { // past the cap: not even masked
		c.mu.Unlock()
		return
	}
	if dec := c.dec; dec != nil {
		c.mu.Unlock()
		dec.write(p) // unlocked: the decoder takes the lock for what it writes
		return
	}
	defer c.mu.Unlock()
	if _, err := c.mask.Write(p); err != nil {
		c.err = err
	}
}

// seal ends the body: what is held back is flushed, what comes later is not stored.
func (c *capture) seal() {
	c.mu.Lock()
	if c.sealed {
		c.mu.Unlock()
		return
	}
	c.sealed = true
	dec := c.dec
	c.mu.Unlock()
	if dec != nil {
		dec.close() // waits for the decoder, which takes the lock for what it writes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if dec != nil && dec.failed && c.truncated == "" {
		c.truncated = "unspecified" // not valid in its coding: stored as far as it decoded
	}
	if c.omit == "" && c.err == nil {
		if err := c.mask.close(); err != nil {
			c.err = err
		}
	}
	if !c.complete && c.truncated == "" {
		c.truncated = "unspecified" // the message ended (or the exchange was written) before its body did
	}
}

func (c *capture) masked() map[string]bool { return c.mask.masked }

// discard frees what was spooled.
func (c *capture) discard() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sealed = true
	if c.b != nil {
		_ = c.b.Close()
		c.b = nil
	}
}

// decoder decodes a gzip or deflate body as it streams, into the masker: the tee writes the coded
// bytes into a pipe, a goroutine decodes them. A body that is not valid in its coding stops being
// stored where it fails; the pipe is drained all the same, so the tee never blocks on it.
type decoder struct {
	pw     *io.PipeWriter
	done   chan struct{}
	failed bool
}

func newDecoder(coding string, out io.Writer) *decoder {
	pr, pw := io.Pipe()
	d := &decoder{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		var rd io.ReadCloser
		var err error
		if coding == "deflate" {
			rd, err = zlib.NewReader(pr) // HTTP's deflate is the zlib format (RFC 9110 8.4.1.2)
		} else {
			rd, err = gzip.NewReader(pr)
		}
		if err == nil {
			_, err = io.Copy(out, rd)
		}
		if err != nil && !errors.Is(err, io.ErrClosedPipe) {
			d.failed = true
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return d
}

func (d *decoder) write(p []byte) { _, _ = d.pw.Write(p) }

func (d *decoder) close() {
	_ = d.pw.Close()
	<-d.done
}

// tee passes a body through and copies what passes into a capture; Close ends the capture (for
// a response: the exchange is written then).
type tee struct {
	rc      io.ReadCloser
	c       *capture
	want    int64 // the body's Content-Length, -1 when unknown
	n       int64
	onClose func()
	once    sync.Once
}

func (t *tee) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if n > 0 {
		t.c.add(p[:n])
		t.n += int64(n)
	}
	if errors.Is(err, io.EOF) || (t.want >= 0 && t.n == t.want) {
		t.c.mu.Lock()
		t.c.complete = true
		t.c.mu.Unlock()
	}
	return n, err
}

func (t *tee) Close() error {
	err := t.rc.Close()
	if t.onClose != nil {
		t.once.Do(t.onClose)
	}
	return err
}
