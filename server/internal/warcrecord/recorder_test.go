package warcrecord

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"

	"github.com/originweave/bap/server/internal/egress"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/waitfor"
)

// archive is a recorder's output, safe to read while exchanges write to it.
type archive struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (a *archive) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.Write(p)
}

func (a *archive) bytes() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return bytes.Clone(a.buf.Bytes())
}

// rec is a record read back.
type rec = Record

// records waits until the archive holds n whole records (an exchange is written when the proxy
// closes the site's body, which may come after the client has read all of it), and reads them.
func (p *proxied) records(t *testing.T, n int) ([]rec, []byte) {
	t.Helper()
	var b []byte
	waitfor.Until(t, 10*time.Second, "the archive's records", func() (bool, string) {
		b = p.out.bytes()
		got, err := ReadAll(bytes.NewReader(b), 1<<20)
		if err != nil {
			return false, err.Error()
		}
		return len(got) >= n, fmt.Sprintf("%d records", len(got))
	})
	recs, err := ReadAll(bytes.NewReader(b), 1<<20) // checks every block and payload digest
	if err != nil {
		t.Fatal(err)
	}
	return recs, b
}

// sha is the WARC digest of b as the recorder writes it.
func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// payload is the block after its HTTP head.
func payload(t *testing.T, block []byte) []byte {
	t.Helper()
	i := bytes.Index(block, []byte("\r\n\r\n"))
	if i < 0 {
		t.Fatalf("no HTTP head in %q", block)
	}
	return block[i+4:]
}

// proxied is a site behind a real egress proxy that records into a recorder.
type proxied struct {
	site   *httptest.Server
	client *http.Client
	out    *archive
	rec    *Recorder
	mu     sync.Mutex
	truncs []Truncation
}

func newProxied(t *testing.T, cfg Config, h http.Handler, before ...func(*httptest.Server)) *proxied {
	t.Helper()
	site := httptest.NewUnstartedServer(h)
	for _, f := range before { // set up before it serves (its ConnState, …)
		f(site)
	}
	site.Start()
	p := &proxied{site: site, out: &archive{}}
	t.Cleanup(p.site.Close)
	pol, err := policy.ParsePolicy([]string{p.site.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Out = p.out
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = t.TempDir()
	}
	cfg.Info = []Field{{"bap-task", "tsk_test"}}
	cfg.OnTruncated = func(tr Truncation) {
		p.mu.Lock()
		p.truncs = append(p.truncs, tr)
		p.mu.Unlock()
	}
	if p.rec, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	px, err := egress.Listen(egress.Config{Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	px.SetRecorder(p.rec)
	pu, _ := url.Parse(px.URL())
	p.client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableCompression: true}}
	t.Cleanup(p.client.CloseIdleConnections)
	return p
}

// do sends a request through the proxy and reads its whole answer (the exchange is archived
// when the proxy closes the site's body, before the client sees the end of it).
func (p *proxied) do(t *testing.T, method, path, ctype, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, p.site.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (p *proxied) truncations() []Truncation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Truncation(nil), p.truncs...)
}

func TestExchangesAreRequestAndResponseRecordsWithSHA256Digests(t *testing.T) {
	p := newProxied(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s got %d bytes", r.Method, r.URL.Path, len(b))
	}))
	if got := p.do(t, "GET", "/page?q=1", "", ""); got != "GET /page got 0 bytes" {
		t.Fatalf("the site answered %q", got)
	}
	if got := p.do(t, "POST", "/form", "application/x-www-form-urlencoded", "a=1&b=two"); got != "POST /form got 9 bytes" {
		t.Fatalf("the site answered %q", got)
	}
	recs, _ := p.records(t, 5)
	if len(recs) != 5 {
		t.Fatalf("%d records, want warcinfo and two exchanges of two", len(recs))
	}
	if recs[0].Type != "warcinfo" || !bytes.Contains(recs[0].Block, []byte("bap-task: tsk_test\r\n")) {
		t.Fatalf("first record: %s %q", recs[0].Type, recs[0].Block)
	}
	infoID := recs[0].Header.Get(gowarc.WarcRecordID)
	for i, want := range []struct{ target, method, reqBody, respBody string }{
		{p.site.URL + "/page?q=1", "GET", "", "GET /page got 0 bytes"},
		{p.site.URL + "/form", "POST", "a=1&b=two", "POST /form got 9 bytes"},
	} {
		req, resp := recs[1+2*i], recs[2+2*i]
		if req.Type != "request" || resp.Type != "response" {
			t.Fatalf("exchange %d: records %s, %s", i, req.Type, resp.Type)
		}
		for _, r := range []rec{req, resp} {
			h := r.Header
			if h.Get(gowarc.WarcTargetURI) != want.target || h.Get(gowarc.WarcWarcinfoID) != infoID || h.Get(gowarc.WarcDate) == "" {
				t.Errorf("exchange %d %s: target %q, warcinfo %q, date %q", i, r.Type, h.Get(gowarc.WarcTargetURI), h.Get(gowarc.WarcWarcinfoID), h.Get(gowarc.WarcDate))
			}
			if got := h.Get(gowarc.ContentType); got != "application/http;msgtype="+r.Type {
				t.Errorf("exchange %d %s: Content-Type %q", i, r.Type, got)
			}
			if got := h.Get(gowarc.WarcBlockDigest); got != sha(r.Block) {
				t.Errorf("exchange %d %s: WARC-Block-Digest %q, the block's is %q", i, r.Type, got, sha(r.Block))
			}
			if got := h.Get(gowarc.WarcPayloadDigest); got != sha(payload(t, r.Block)) {
				t.Errorf("exchange %d %s: WARC-Payload-Digest %q, the payload's is %q", i, r.Type, got, sha(payload(t, r.Block)))
			}
			if h.Get(gowarc.WarcTruncated) != "" || h.Get("BAP-Masked") != "" {
				t.Errorf("exchange %d %s: truncated %q, masked %q", i, r.Type, h.Get(gowarc.WarcTruncated), h.Get("BAP-Masked"))
			}
		}
		if req.Header.Get(gowarc.WarcConcurrentTo) != resp.Header.Get(gowarc.WarcRecordID) ||
			resp.Header.Get(gowarc.WarcConcurrentTo) != req.Header.Get(gowarc.WarcRecordID) {
			t.Errorf("exchange %d: the records do not name each other", i)
		}
		u, _ := url.Parse(want.target)
		if line := want.method + " " + u.RequestURI() + " HTTP/1.1\r\n"; !bytes.HasPrefix(req.Block, []byte(line)) {
			t.Errorf("exchange %d: request block starts %q, want %q", i, req.Block[:min(len(req.Block), 60)], line)
		}
		if got := string(payload(t, req.Block)); got != want.reqBody {
			t.Errorf("exchange %d: request body %q, want %q", i, got, want.reqBody)
		}
		if !bytes.HasPrefix(resp.Block, []byte("HTTP/1.1 200 OK\r\n")) || string(payload(t, resp.Block)) != want.respBody {
			t.Errorf("exchange %d: response block %q", i, resp.Block)
		}
	}
	if tr := p.truncations(); len(tr) != 0 {
		t.Errorf("truncations reported: %+v", tr)
	}
}

func TestCapsStopStoringBodiesAndReportOnce(t *testing.T) {
	big := strings.Repeat("x", 5000)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) })
	t.Run("body cap", func(t *testing.T) {
		p := newProxied(t, Config{MaxBodyBytes: 1000}, h)
		for range 3 {
			if got := p.do(t, "GET", "/big", "", ""); got != big {
				t.Fatalf("the browser got %d bytes, want the whole %d (the cap is the archive's, not the page's)", len(got), len(big))
			}
		}
		recs, _ := p.records(t, 7)
		if len(recs) != 7 {
			t.Fatalf("%d records", len(recs))
		}
		for _, r := range recs[2:] {
			if r.Type != "response" {
				continue
			}
			if got := len(payload(t, r.Block)); got != 1000 || r.Header.Get(gowarc.WarcTruncated) != "length" {
				t.Errorf("stored body %d bytes, WARC-Truncated %q; want 1000, length", got, r.Header.Get(gowarc.WarcTruncated))
			}
		}
		tr := p.truncations()
		if len(tr) != 1 || tr[0].Reason != ReasonBodyBytes || tr[0].Limit != 1000 || tr[0].URL != p.site.URL+"/big" {
			t.Fatalf("reported %+v, want body_bytes once", tr)
		}
	})
	t.Run("task cap", func(t *testing.T) {
		p := newProxied(t, Config{Budget: NewBudget(9000, 0)}, h)
		for range 4 {
			if got := p.do(t, "GET", "/big", "", ""); got != big {
				t.Fatalf("the browser got %d bytes", len(got))
			}
		}
		// The first exchange fits whole (about 6 KB), the next two only as heads (about 1 KB
		// each), the last not at all.
		recs, b := p.records(t, 5)
		if len(b) > 9000 {
			t.Fatalf("the archive holds %d bytes, over its cap of 9000", len(b))
		}
		var whole, cut int
		for _, r := range recs[1:] {
			if r.Type != "response" {
				continue
			}
			switch {
			case len(payload(t, r.Block)) == len(big) && r.Header.Get(gowarc.WarcTruncated) == "":
				whole++
			case len(payload(t, r.Block)) == 0 && r.Header.Get(gowarc.WarcTruncated) == "length":
				cut++
			default:
				t.Errorf("a response of %d body bytes, WARC-Truncated %q", len(payload(t, r.Block)), r.Header.Get(gowarc.WarcTruncated))
			}
		}
		if whole != 1 || cut < 1 {
			t.Errorf("%d whole responses and %d without body; want 1 and at least 1", whole, cut)
		}
		tr := p.truncations()
		if len(tr) != 1 || tr[0].Reason != ReasonTaskBytes || tr[0].Limit != 9000 {
			t.Fatalf("reported %+v, want task_bytes once", tr)
		}
	})
}

// canary is a protected value with a space, characters every encoding escapes, and a length
// past shortForm.
const canary = "pin 4242+canary&\"<x>/é"

func TestProtectedValuesAreMaskedInEveryEncoding(t *testing.T) {
	enc := map[string]string{
		"raw":        canary,
		"form":       url.QueryEscape(canary),
		"form %20":   strings.ReplaceAll(url.QueryEscape(canary), "+", "%20"),
		"form lower": strings.ToLower(url.QueryEscape(canary)),
		"json":       strings.Trim(mustJSON(canary, true), `"`),
		"json plain": strings.Trim(mustJSON(canary, false), `"`),
		"base64":     base64.StdEncoding.EncodeToString([]byte(canary)),
	}
	for name, form := range enc {
		t.Run(name, func(t *testing.T) {
			p := newProxied(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				w.Header().Set("X-Echo", r.URL.Query().Get("v"))
				_, _ = fmt.Fprintf(w, "you sent <%s> in %d bytes", b, len(b)) // the site echoes it
			}))
			p.rec.Protect("card_pin", canary)
			body := "before=1&v=" + form + "&after=2"
			p.do(t, "POST", "/form?v="+url.QueryEscape(canary), "application/x-www-form-urlencoded", body)
			recs, a := p.records(t, 3)
			for n, f := range enc {
				if bytes.Contains(a, []byte(f)) {
					t.Errorf("the archive holds the %s form of the value", n)
				}
			}
			req, resp := recs[1], recs[2]
			if got, want := string(payload(t, req.Block)), "before=1&v=[masked:card_pin]&after=2"; got != want {
				t.Errorf("stored request body %q, want %q", got, want)
			}
			if !bytes.Contains(resp.Block, []byte("you sent <before=1&v=[masked:card_pin]&after=2>")) ||
				!bytes.Contains(resp.Block, []byte("X-Echo: [masked:card_pin]\r\n")) {
				t.Errorf("stored response %q", resp.Block)
			}
			for _, c := range []struct {
				r    rec
				want []string
			}{
				{req, []string{"body;name=card_pin", "target;name=card_pin"}},
				{resp, []string{"body;name=card_pin", "header;name=card_pin"}},
			} {
				if got := c.r.Header.Values("BAP-Masked"); strings.Join(got, ",") != strings.Join(c.want, ",") {
					t.Errorf("%s BAP-Masked %q, want %q", c.r.Type, got, c.want)
				}
			}
			if !strings.Contains(req.Header.Get(gowarc.WarcTargetURI), "v=[masked:card_pin]") {
				t.Errorf("target %q", req.Header.Get(gowarc.WarcTargetURI))
			}
		})
	}
}

func mustJSON(s string, escHTML bool) string {
	var b bytes.Buffer
	e := jsonEncoder(&b, escHTML)
	_ = e.Encode(s)
	return strings.TrimSpace(b.String())
}

func TestCompressedResponsesAreStoredDecodedAndMasked(t *testing.T) {
	page := "<p>your pin is " + canary + "</p>"
	p := newProxied(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/deflate" {
			w.Header().Set("Content-Encoding", "deflate")
			z := zlib.NewWriter(w)
			_, _ = io.WriteString(z, page)
			_ = z.Close()
			return
		}
		if r.URL.Path == "/br" {
			w.Header().Set("Content-Encoding", "br")
			_, _ = io.WriteString(w, "opaque bytes "+canary)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		_, _ = io.WriteString(gz, page)
		_ = gz.Close()
	}))
	p.rec.Protect("card_pin", canary)
	p.do(t, "GET", "/gz", "", "")
	p.do(t, "GET", "/br", "", "")
	p.do(t, "GET", "/deflate", "", "")
	recs, a := p.records(t, 7)
	if bytes.Contains(a, []byte(canary)) {
		t.Fatal("the archive holds the value")
	}
	gz, br := recs[2], recs[4]
	if got := string(payload(t, gz.Block)); got != "<p>your pin is [masked:card_pin]</p>" || gz.Header.Get("BAP-Decoded") != "gzip" ||
		bytes.Contains(gz.Block, []byte("Content-Encoding")) {
		t.Errorf("gzip response stored as %q (BAP-Decoded %q)", gz.Block, gz.Header.Get("BAP-Decoded"))
	}
	if len(payload(t, br.Block)) != 0 || br.Header.Get(gowarc.WarcTruncated) != "unspecified" || br.Header.Get("BAP-Omitted") != "body;reason=content_encoding" {
		t.Errorf("brotli response stored as %q, truncated %q, omitted %q", br.Block, br.Header.Get(gowarc.WarcTruncated), br.Header.Get("BAP-Omitted"))
	}
	if got := string(payload(t, recs[6].Block)); got != "<p>your pin is [masked:card_pin]</p>" || recs[6].Header.Get("BAP-Decoded") != "deflate" {
		t.Errorf("deflate response stored as %q", recs[6].Block)
	}
	if tr := p.truncations(); len(tr) != 1 || tr[0].Reason != ReasonContentEncoding {
		t.Errorf("reported %+v, want content_encoding once", tr)
	}
}

func TestAClosedArchiveIsReportedAndTheExchangeGoesOn(t *testing.T) {
	p := newProxied(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	p.rec.mu.Lock()
	p.rec.cfg.Out = failing{}
	p.rec.mu.Unlock()
	for range 2 {
		if got := p.do(t, "GET", "/", "", ""); got != "ok" {
			t.Fatalf("the browser got %q", got)
		}
	}
	if tr := p.truncations(); len(tr) != 1 || tr[0].Reason != ReasonWriteFailed {
		t.Fatalf("reported %+v, want write_failed once", tr)
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }

func jsonEncoder(w io.Writer, escHTML bool) *json.Encoder {
	e := json.NewEncoder(w)
	e.SetEscapeHTML(escHTML)
	return e
}

func TestTunnelsAreMetadataAndRefusalsAreNotRecorded(t *testing.T) {
	p := newProxied(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	pu, _ := url.Parse(p.site.URL)
	// A CONNECT tunnel to the site: the proxy sees only host:port.
	tr := &http.Transport{Proxy: p.client.Transport.(*http.Transport).Proxy, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	if _, err := (&http.Client{Transport: tr}).Get("https://" + pu.Host + "/"); err == nil {
		t.Fatal("a TLS request to a plain-HTTP site succeeded")
	}
	// Refused by the policy: nothing went out, nothing is archived.
	resp, err := p.client.Get("http://elsewhere.invalid/secret-path")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the refused request answered %d", resp.StatusCode)
	}
	p.do(t, "GET", "/after", "", "")
	recs, a := p.records(t, 4)
	if got := []string{recs[0].Type, recs[1].Type, recs[2].Type, recs[3].Type}; strings.Join(got, ",") != "warcinfo,metadata,request,response" || len(recs) != 4 {
		t.Fatalf("records %v (%d)", got, len(recs))
	}
	if got := recs[1].Header.Get(gowarc.WarcTargetURI); got != "tunnel://"+pu.Host || !bytes.Contains(recs[1].Block, []byte("content: not recorded")) {
		t.Errorf("tunnel record %q: %q", got, recs[1].Block)
	}
	if bytes.Contains(a, []byte("elsewhere.invalid")) {
		t.Error("the archive holds the refused request")
	}
}

// A request the site never answered is not archived, and a body spooled to disk is gone from the
// spool once its exchange is written.
func TestUnansweredRequestsAreDroppedAndSpoolFilesRemoved(t *testing.T) {
	big := strings.Repeat("y", 300<<10) // past memBytes: spooled
	spool := t.TempDir()
	p := newProxied(t, Config{SpoolDir: spool}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hangup" {
			_, _ = io.Copy(io.Discard, r.Body)
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = c.Close() // no response at all
			}
			return
		}
		_, _ = io.WriteString(w, big)
	}))
	req, _ := http.NewRequest("POST", p.site.URL+"/hangup", strings.NewReader(big))
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("the hung-up request answered %d", resp.StatusCode)
	}
	if got := p.do(t, "GET", "/big", "", ""); got != big {
		t.Fatalf("the browser got %d bytes", len(got))
	}
	recs, a := p.records(t, 3)
	if len(recs) != 3 || bytes.Contains(a, []byte("/hangup")) {
		t.Fatalf("%d records; the unanswered request archived: %v", len(recs), bytes.Contains(a, []byte("/hangup")))
	}
	if len(payload(t, recs[2].Block)) != len(big) {
		t.Fatalf("the spooled body was stored with %d bytes", len(payload(t, recs[2].Block)))
	}
	waitfor.True(t, 5*time.Second, "an empty spool", func() bool {
		left, _ := os.ReadDir(spool)
		return len(left) == 0
	})
}

// A compressed body stops being decoded at the body cap (a compression bomb costs the recorder
// no more than the cap), while the browser gets it whole.
func TestDecodingStopsAtTheBodyCap(t *testing.T) {
	var bomb bytes.Buffer
	gz := gzip.NewWriter(&bomb)
	_, _ = gz.Write(make([]byte, 4<<20))
	_ = gz.Close()
	p := newProxied(t, Config{MaxBodyBytes: 1000}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(bomb.Bytes())
	}))
	if got := p.do(t, "GET", "/bomb", "", ""); got != bomb.String() {
		t.Fatalf("the browser got %d bytes, want the %d the site sent", len(got), bomb.Len())
	}
	recs, _ := p.records(t, 3)
	if n := len(payload(t, recs[2].Block)); n != 1000 || recs[2].Header.Get(gowarc.WarcTruncated) != "length" {
		t.Fatalf("stored %d decoded bytes, WARC-Truncated %q", n, recs[2].Header.Get(gowarc.WarcTruncated))
	}
	if tr := p.truncations(); len(tr) != 1 || tr[0].Reason != ReasonBodyBytes {
		t.Fatalf("reported %+v", tr)
	}
}

// A value protected while a response streams (a long poll opened before the fill, echoing what
// was typed) is masked in the rest of that response.
func TestAValueProtectedMidStreamIsMaskedInTheRestOfIt(t *testing.T) {
	release := make(chan struct{})
	p := newProxied(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "event: waiting\n\n")
		http.NewResponseController(w).Flush()
		<-release
		_, _ = io.WriteString(w, "event: typed\ndata: "+canary+"\n\n")
	}))
	resp, err := p.client.Get(p.site.URL + "/poll")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	first := make([]byte, len("event: waiting\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	p.rec.Protect("card_pin", canary) // the fill, after the poll began
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), canary) {
		t.Fatalf("the page got %q", rest)
	}
	recs, a := p.records(t, 3)
	if bytes.Contains(a, []byte(canary)) || !bytes.HasSuffix(recs[2].Block, []byte("data: [masked:card_pin]\n\n")) {
		t.Fatalf("stored %q", recs[2].Block)
	}
}

// Credentials a site hands out or a browser sends back (session cookies, bearer tokens) are
// masked whatever the task declared protected: names, attributes and schemes stay, values go,
// and BAP-Masked says so.
func TestCredentialsInHeadersAreMasked(t *testing.T) {
	const (
		sessionID = "s3ss10n-9f8e7d6c5b4a"
		token     = "eyJhbGciOiJFUzI1NiJ9.tok3n"
	)
	p := newProxied(t, Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "sid="+sessionID+"; Path=/; HttpOnly; Secure")
		w.Header().Add("Set-Cookie", "theme=dark")
		fmt.Fprint(w, "ok")
	}))
	req, _ := http.NewRequest("GET", p.site.URL+"/account", http.NoBody)
	req.Header.Set("Cookie", "sid="+sessionID+"; cart=3")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	recs, all := p.records(t, 3)
	if bytes.Contains(all, []byte(sessionID)) || bytes.Contains(all, []byte(token)) {
		t.Fatalf("the archive holds a credential:\n%s", all)
	}
	reqRec, respRec := recs[1], recs[2]
	for _, want := range []string{"Authorization: Bearer [masked:authorization]\r\n", "Cookie: sid=[masked:cookie]; cart=[masked:cookie]\r\n"} {
		if !bytes.Contains(reqRec.Block, []byte(want)) {
			t.Errorf("the request record lacks %q:\n%s", want, reqRec.Block)
		}
	}
	for _, want := range []string{"Set-Cookie: sid=[masked:cookie]; Path=/; HttpOnly; Secure\r\n", "Set-Cookie: theme=[masked:cookie]\r\n"} {
		if !bytes.Contains(respRec.Block, []byte(want)) {
			t.Errorf("the response record lacks %q:\n%s", want, respRec.Block)
		}
	}
	if got := strings.Join(reqRec.Header.Values("BAP-Masked"), ","); got != "header;name=authorization,header;name=cookie" {
		t.Errorf("request BAP-Masked %q", got)
	}
	if got := strings.Join(respRec.Header.Values("BAP-Masked"), ","); got != "header;name=cookie" {
		t.Errorf("response BAP-Masked %q", got)
	}
}
