package warcrecord

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Serving an archive (issue #20 item 4, ADR 0035): a replay's egress proxy answers every
// request from the task's own archive and never dials. An [Archive] indexes the exchanges
// ReadAll read back (each checked against its digests) by what a request must repeat to be
// answered: its method and target, and for a method that is not safe its body too. The archive
// holds every protected value masked, so a request is masked with the replay's own Protected
// set (the same secrets, by reference) before it is compared: a secret typed again matches its
// mask, and anything else that differs is a miss, refused.

// ErrNotReplayable reports an archive that cannot answer a replay faithfully: it holds a tunnel
// (HTTPS or a WebSocket, whose content was never recorded) or nothing at all.
var ErrNotReplayable = errors.New("warcrecord: the archive cannot be replayed")

// Archive answers requests from the exchanges of an archive. Safe for concurrent use.
type Archive struct {
	protected *Protected

	altered []string // the target URIs of exchanges whose records were changed after writing

	mu      sync.Mutex
	byKey   map[string][]*served // in recorded order
	next    map[string]int       // the next exchange of each key to serve
	entries int
}

// served is one recorded exchange, ready to answer: the response head and body as stored.
type served struct {
	status int
	header http.Header
	body   []byte
	// whole is false for an exchange whose response body is not all there (cut at a cap, or
	// omitted): it answers nothing, the miss is refused like any other.
	whole bool
}

// NewArchive indexes recs (as ReadAll returns them) for serving. protected is the replay's set
// of protected values (nil: none); requests are masked with it before they are looked up. An
// archive with a tunnel record, or without a single exchange, is ErrNotReplayable; a request
// record without its response, or a block that is not an HTTP message, fails the archive.
func NewArchive(recs []Record, protected *Protected) (*Archive, error) {
	if protected == nil {
		protected = NewProtected()
	}
	a := &Archive{protected: protected, byKey: map[string][]*served{}, next: map[string]int{}}
	responses := map[string]Record{}
	for _, r := range recs {
		if r.Type == "response" {
			id := r.Header.Get("WARC-Record-ID")
			if _, dup := responses[id]; dup || id == "" {
				return nil, fmt.Errorf("warcrecord: response record %q named twice or not at all", id)
			}
			responses[id] = r
		}
	}
	for i, r := range recs {
		switch r.Type {
		case "metadata":
			if strings.HasPrefix(r.Header.Get("WARC-Target-URI"), "tunnel://") {
				return nil, fmt.Errorf("%w: it holds a tunnel (%s) whose content was never recorded",
					ErrNotReplayable, strings.TrimPrefix(r.Header.Get("WARC-Target-URI"), "tunnel://"))
			}
		case "request":
			resp, ok := responses[r.Header.Get("WARC-Concurrent-To")]
			if !ok {
				return nil, fmt.Errorf("warcrecord: record %d: a request without its response", i)
			}
			key, err := storedKey(r)
			if err != nil {
				return nil, fmt.Errorf("warcrecord: record %d: %w", i, err)
			}
			s, err := parseServed(resp, method(r))
			if err != nil {
				return nil, fmt.Errorf("warcrecord: record %d's response: %w", i, err)
			}
			a.byKey[key] = append(a.byKey[key], s)
			a.entries++
			if (r.Altered || resp.Altered) && !slices.Contains(a.altered, r.Header.Get("WARC-Target-URI")) {
				a.altered = append(a.altered, r.Header.Get("WARC-Target-URI"))
			}
		}
	}
	if a.entries == 0 {
		return nil, fmt.Errorf("%w: it holds no exchange", ErrNotReplayable)
	}
	return a, nil
}

// Len is the number of exchanges the archive can answer from.
func (a *Archive) Len() int { return a.entries }

// Altered lists the target URIs of the exchanges whose records do not match their stored digests
// (read with ReadAltered): changed after they were written. They are served as they are.
func (a *Archive) Altered() []string { return slices.Clone(a.altered) }

// Serve answers req from the archive: the response recorded for the same method and target
// (and body, for a method that is not safe), masked alike. Exchanges recorded more than once
// are answered in their recorded order, the last one again once they run out. ok=false when the
// archive holds no whole answer: the caller refuses the request. Serve reads req.Body.
func (a *Archive) Serve(req *http.Request) (resp *http.Response, ok bool) {
	key, err := a.requestKey(req)
	if err != nil {
		return nil, false
	}
	a.mu.Lock()
	list := a.byKey[key]
	if len(list) == 0 {
		a.mu.Unlock()
		return nil, false
	}
	i := a.next[key]
	if i >= len(list) {
		i = len(list) - 1
	} else {
		a.next[key] = i + 1
	}
	s := list[i]
	a.mu.Unlock()
	if !s.whole {
		return nil, false
	}
	return &http.Response{
		StatusCode: s.status, Status: strconv.Itoa(s.status) + " " + http.StatusText(s.status),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: s.header.Clone(), Body: io.NopCloser(bytes.NewReader(s.body)),
		ContentLength: int64(len(s.body)), Request: req,
	}, true
}

// maxServedBody bounds the request body Serve reads to compare (larger than any the recorder
// keeps whole: DefaultMaxBodyBytes).
const maxServedBody = 64 << 20

// requestKey is req's key, masked with the replay's protected values.
func (a *Archive) requestKey(req *http.Request) (string, error) {
	pats := a.protected.patterns()
	target := maskString(req.URL.String(), pats, map[string]bool{})
	var body []byte
	if !safeMethod(req.Method) && req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxServedBody+1))
		if err != nil || len(b) > maxServedBody {
			return "", errors.New("warcrecord: request body unreadable or too large")
		}
		body = []byte(maskString(string(b), pats, map[string]bool{}))
	}
	return key(req.Method, target, body), nil
}

// storedKey is the key of a request record as the recorder stored it (already masked).
func storedKey(r Record) (string, error) {
	target := r.Header.Get("WARC-Target-URI")
	line, rest, ok := bytes.Cut(r.Block, []byte("\r\n"))
	if !ok {
		return "", errors.New("a request block without a request line")
	}
	method, _, ok := strings.Cut(string(line), " ")
	if !ok || method == "" || strings.ContainsFunc(method, func(c rune) bool { return c < 'A' || c > 'Z' }) {
		return "", errors.New("a request line without a method")
	}
	var body []byte
	if !safeMethod(method) {
		_, b, ok := bytes.Cut(rest, []byte("\r\n\r\n"))
		if !ok && !bytes.HasPrefix(rest, []byte("\r\n")) {
			return "", errors.New("a request block without the end of its head")
		}
		if !ok {
			b = rest[2:]
		}
		if r.Header.Get("WARC-Truncated") != "" || r.Header.Get("BAP-Omitted") != "" {
			// Its body is not all there: nothing can be compared with it; no request matches.
			b = append([]byte("\x00incomplete\x00"), b...)
		}
		body = b
	}
	return key(method, target, body), nil
}

// method is a request record's method ("" when its block has no request line).
func method(r Record) string {
	m, _, _ := strings.Cut(string(r.Block[:min(len(r.Block), 32)]), " ")
	return m
}

// key joins what a request must repeat to be answered.
func key(method, target string, body []byte) string {
	return method + " " + target + "\n" + string(body)
}

// safeMethod tells the methods whose requests are matched without their body (RFC 9110 9.2.1).
func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// parseServed reads a response record's block (untrusted: a bundle may have been edited) into
// what Serve answers with. Hop-by-hop and framing headers are dropped: the proxy frames the body
// it sends itself.
func parseServed(r Record, method string) (*served, error) {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(r.Block)), &http.Request{Method: method})
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	whole := r.Header.Get("WARC-Truncated") == "" && r.Header.Get("BAP-Omitted") == "" &&
		resp.StatusCode != http.StatusSwitchingProtocols
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		if whole {
			return nil, err
		}
		body = nil // cut short: it answers nothing anyway
	}
	h := resp.Header.Clone()
	for _, k := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer",
		"Upgrade", "Content-Length", "Content-Encoding"} {
		h.Del(k)
	}
	return &served{status: resp.StatusCode, header: h, body: body, whole: whole}, nil
}
