package warcrecord

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/originweave/bap/server/internal/egress"
	"github.com/originweave/bap/server/internal/policy"
)

// shop is a site that counts every connection and request it is sent.
type shop struct {
	conns, hits atomic.Int64
}

func (s *shop) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/checkout":
			fmt.Fprint(w, `<form method=post action=/order><input name=card></form>`)
		case "/order":
			fmt.Fprintf(w, "<h1>order placed</h1><p>%d bytes</p>", len(body))
		default:
			http.NotFound(w, r)
		}
	})
}

// A task's recorded exchanges, served back by a replay's proxy from its archive: the page and
// the form POST that typed a secret by reference are answered as recorded (the secret typed again
// matches its mask), anything else is refused with not_in_archive and reported, and the site's
// connection and request counters do not move during the replay.
func TestAnArchiveAnswersItsReplayWithoutTheNetwork(t *testing.T) {
	s := &shop{}
	p := newProxied(t, Config{}, s.handler(), func(site *httptest.Server) {
		site.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.conns.Add(1)
			}
		}
	})
	p.rec.Protect("card_number", "4111 1111 1111 1111")
	page := p.do(t, "GET", "/checkout?step=1", "", "")
	placed := p.do(t, "POST", "/order", "application/x-www-form-urlencoded", "card=4111+1111+1111+1111&qty=1")
	recs, raw := p.records(t, 5)
	if bytes.Contains(raw, []byte("4111")) {
		t.Fatal("the archive holds the secret")
	}

	replayed := NewProtected()
	replayed.Add("card_number", "4111 1111 1111 1111") // the replay types the same secret by reference
	a, err := NewArchive(recs, replayed)
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() != 2 {
		t.Fatalf("%d exchanges indexed, want 2", a.Len())
	}
	var mu sync.Mutex
	var blocked []egress.Blocked
	pol, _ := policy.ParsePolicy([]string{p.site.URL}, nil)
	px, err := egress.Listen(egress.Config{Policy: func() *policy.Policy { return pol }, OnBlocked: func(b egress.Blocked) {
		mu.Lock()
		blocked = append(blocked, b)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	px.ServeFrom(a)
	pu, _ := url.Parse(px.URL())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
	conns, hits := s.conns.Load(), s.hits.Load()

	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"the page", "GET", "/checkout?step=1", "", 200, page},
		{"the page again: its last recorded answer", "GET", "/checkout?step=1", "", 200, page},
		{"the form POST with the same secret", "POST", "/order", "card=4111+1111+1111+1111&qty=1", 200, placed},
		{"the form POST with another card", "POST", "/order", "card=5500+0000+0000+0004&qty=1", 403, "not_in_archive"},
		{"the form POST with the mask itself", "POST", "/order", "card=[masked:card_number]&qty=1", 200, placed},
		{"another query", "GET", "/checkout?step=2", "", 403, "not_in_archive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, p.site.URL+tt.path, strings.NewReader(tt.body))
			if tt.body == "" {
				req.Body = http.NoBody
			} else {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, b, tt.status, tt.want)
			}
		})
	}
	if dc, dh := s.conns.Load()-conns, s.hits.Load()-hits; dc != 0 || dh != 0 {
		t.Errorf("the site saw %d connections and %d requests during the replay", dc, dh)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(blocked) != 2 || blocked[0].Reason != egress.ReasonNotInArchive || strings.Contains(blocked[0].URL, "5500") {
		t.Errorf("refusals reported: %+v", blocked)
	}
}

// A masked request matches a replay's request masked alike: the value the replay protects under
// the same name (the secret by reference, whatever its value is now: a rotated secret still
// replays; the archive never held the old one to compare with). A replay that does not protect
// the value sends it in clear, which is not the mask: a miss.
func TestAMaskedRequestMatchesOnlyTheSameProtectedValue(t *testing.T) {
	recs, err := ReadAll(bytes.NewReader(plainSample(t)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, protect, body string
		ok                  bool
	}{
		{"the same secret", "4242 secret", "pin=4242+secret&ok=1", true},
		{"the secret rotated: another value under the same name", "1111 other", "pin=1111+other&ok=1", true},
		{"the secret not protected in the replay", "", "pin=4242+secret&ok=1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pr := NewProtected()
			if tt.protect != "" {
				pr.Add("card_pin", tt.protect)
			}
			a, err := NewArchive(recs, pr)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("POST", "http://shop.test/order?x=1", strings.NewReader(tt.body))
			if _, ok := a.Serve(req); ok != tt.ok {
				t.Errorf("served %v, want %v", ok, tt.ok)
			}
		})
	}
}

// An archive with a tunnel (HTTPS, never recorded) or without any exchange cannot be replayed:
// it is refused whole, not served in part.
func TestAnArchiveWithATunnelIsNotReplayable(t *testing.T) {
	recs, err := ReadAll(bytes.NewReader(sampleArchive(t)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewArchive(recs, nil); !errors.Is(err, ErrNotReplayable) || !strings.Contains(err.Error(), "shop.test:443") {
		t.Errorf("with a tunnel: %v", err)
	}
	if _, err := NewArchive(recs[:1], nil); !errors.Is(err, ErrNotReplayable) {
		t.Errorf("warcinfo only: %v", err)
	}
	if _, err := NewArchive(recs[:2], nil); err == nil {
		t.Error("a request without its response was indexed")
	}
}

// plainSample is sampleArchive without its tunnel.
func plainSample(t testing.TB) []byte {
	t.Helper()
	a := sampleArchive(t)
	recs, err := ReadAll(bytes.NewReader(a), 1<<20)
	if err != nil || len(recs) != 4 {
		t.Fatalf("%d records: %v", len(recs), err)
	}
	i := bytes.LastIndex(a, []byte("WARC/1.1\r\n"))
	return a[:i]
}
