package firefox

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/waitfor"
	"github.com/originweave/bap/server/internal/warcrecord"
)

// A Firefox session records through its egress proxy as a Chromium one does: the document's
// request and response, read back with their digests checked.
func TestRecordedSessionArchivesTheDocument(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hs := newHeldSite(t)
	pol, err := policy.ParsePolicy([]string{hs.srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := openOn(t, ctx, testDriver(t, ctx), &events{}, pol)
	recordAndLoad(t, ctx, s, hs.srv.URL+"/shop.html")
}

// Over HTTPS, a recording Firefox session's proxy opens the TLS tunnel with its browser's
// authority, which the browser's profile trusts (ADR 0037): the archive holds the document's
// https exchange, and no opaque tunnel record. Not parallel: Firefox takes one BiDi session at a
// time, and this test opens its own (its driver trusts the test site upstream).
func TestRecordedSessionArchivesAnHTTPSDocument(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if browser.certs == nil {
		t.Fatal("the test browser's profile trusts no authority (is certutil installed? make deps)")
	}
	site := httptest.NewTLSServer(http.FileServer(http.Dir(shopFiles)))
	t.Cleanup(site.Close)
	upstream := x509.NewCertPool()
	upstream.AddCert(site.Certificate())
	d, err := newDriver(ctx, Config{UpstreamTLS: &tls.Config{RootCAs: upstream, MinVersion: tls.VersionTLS12}},
		slog.New(slog.DiscardHandler), browser, engine(t, ctx))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.ParsePolicy([]string{site.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recordAndLoad(t, ctx, openOn(t, ctx, d, &events{}, pol), site.URL+"/shop.html")
}

// recordAndLoad has s record into a file of its own, loads the fixture shop's page at url (its
// path /shop.html) and waits until the archive holds its request and response, and no opaque
// tunnel (its digests checked as it is read).
func recordAndLoad(t *testing.T, ctx context.Context, s *Session, url string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "session.warc")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	rec, err := warcrecord.New(warcrecord.Config{Out: f, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: url}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the document's exchange in the archive", func() (bool, string) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		recs, err := warcrecord.ReadAll(bytes.NewReader(raw), 4<<20)
		if err != nil {
			return false, err.Error()
		}
		var req, resp bool
		for _, r := range recs {
			target := r.Header.Get("WARC-Target-URI")
			if strings.HasPrefix(target, "tunnel://") {
				t.Fatalf("the archive holds an opaque tunnel (%s)", target)
			}
			if target != url {
				continue
			}
			req = req || r.Type == "request" && bytes.HasPrefix(r.Block, []byte("GET /shop.html HTTP/1.1\r\n"))
			resp = resp || r.Type == "response" && bytes.Contains(r.Block, []byte("<h1>Checkout</h1>"))
		}
		return req && resp, fmt.Sprintf("%d records, request %v, response %v", len(recs), req, resp)
	})
}
