package browser

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
	"github.com/originweave/bap/server/internal/warcrecord"
)

// TestRecordedSessionArchivesTheDocumentAndTheFormPost: a session with a recorder archives, through
// its egress proxy, the request and response of the checkout document and of the form POST that
// an act submits, read back with their digests checked; the value a fill typed into the
// password field (protected as a secret is) is in no form anywhere in the archive's bytes, while
// its mask and the rest of the form are.
func TestRecordedSessionArchivesTheDocumentAndTheFormPost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path := filepath.Join(t.TempDir(), "session.warc")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	truncated := make(chan warcrecord.Truncation, 4)
	rec, err := warcrecord.New(warcrecord.Config{Out: f, SpoolDir: t.TempDir(),
		OnTruncated: func(tr warcrecord.Truncation) { truncated <- tr }})
	if err != nil {
		t.Fatal(err)
	}
	const pin = "canary pin+4242&zz"
	rec.Protect("account_password", pin) // as the use-cases protect a fill before it is typed
	if err := b.s.Record(rec); err != nil {
		t.Fatal(err)
	}

	b.navigate("/shop.html")
	b.act(ActRequest{Action: ActionFill, Query: &Query{Label: "Full name"}, Value: "Ada Lovelace"})
	b.act(ActRequest{Action: ActionFill, Query: &Query{Label: "Email address"}, Value: "ada@example.com"})
	b.act(ActRequest{Action: ActionFill, Query: &Query{Label: "Account password"}, Value: pin})
	b.act(ActRequest{Action: ActionCheck, Query: &Query{Role: "checkbox", Name: "I accept the terms"}})
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Place order"}})
	if !res.Navigated || !strings.Contains(res.URL, "/thanks.html") {
		t.Fatalf("submit result %+v", res)
	}

	// The thanks page's exchange is written when the proxy has relayed its body: wait for it.
	var recs []warcrecord.Record
	var raw []byte
	waitfor.Until(t, 10*time.Second, "the thanks page in the archive", func() (bool, string) {
		raw, err = os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		if recs, err = warcrecord.ReadAll(bytes.NewReader(raw), 4<<20); err != nil {
			return false, err.Error() // a record being written
		}
		for _, r := range recs {
			if r.Type == "response" && strings.HasPrefix(r.Header.Get("WARC-Target-URI"), fx.A+"/thanks.html") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d records", len(recs))
	})
	if recs[0].Type != "warcinfo" {
		t.Fatalf("the first record is %s", recs[0].Type)
	}
	find := func(typ, method, target string) warcrecord.Record {
		t.Helper()
		for _, r := range recs {
			if r.Type == typ && r.Header.Get("WARC-Target-URI") == target && (method == "" || bytes.HasPrefix(r.Block, []byte(method+" "))) {
				return r
			}
		}
		t.Fatalf("no %s %s record of %s", method, typ, target)
		return warcrecord.Record{}
	}
	docReq := find("request", "GET", fx.A+"/shop.html")
	docResp := find("response", "", fx.A+"/shop.html")
	if docReq.Header.Get("WARC-Concurrent-To") != docResp.Header.Get("WARC-Record-ID") ||
		!bytes.Contains(docResp.Block, []byte("<h1>Checkout</h1>")) || !bytes.HasPrefix(docResp.Block, []byte("HTTP/1.1 200 OK\r\n")) {
		t.Errorf("document records: request %q, response %q", docReq.Block[:min(len(docReq.Block), 200)], docResp.Block[:min(len(docResp.Block), 200)])
	}
	if bytes.Contains(docResp.Block, []byte("Content-Security-Policy")) {
		t.Error("the archive holds the proxy's own CSP: it records the response as the site sent it")
	}
	post := find("request", "POST", fx.A+"/order")
	postResp := find("response", "", fx.A+"/order")
	if !bytes.HasPrefix(postResp.Block, []byte("HTTP/1.1 303 See Other\r\n")) || post.Header.Get("WARC-Concurrent-To") != postResp.Header.Get("WARC-Record-ID") {
		t.Errorf("the POST's response %q", postResp.Block[:min(len(postResp.Block), 120)])
	}
	body := string(post.Block[bytes.Index(post.Block, []byte("\r\n\r\n"))+4:])
	for _, want := range []string{"name=Ada+Lovelace", "email=ada%40example.com", "password=[masked:account_password]", "terms=on"} {
		if !strings.Contains(body, want) {
			t.Errorf("the stored form body %q lacks %q", body, want)
		}
	}
	if got := post.Header.Values("BAP-Masked"); len(got) != 1 || got[0] != "body;name=account_password" {
		t.Errorf("BAP-Masked %q", got)
	}
	for name, form := range map[string]string{
		"raw": pin, "form-encoded": url.QueryEscape(pin), "%20-encoded": url.PathEscape(pin),
		"base64": base64.StdEncoding.EncodeToString([]byte(pin)), "digits": "4242&zz",
	} {
		if bytes.Contains(raw, []byte(form)) {
			t.Errorf("the archive holds the password's %s form", name)
		}
	}
	select {
	case tr := <-truncated:
		t.Errorf("a truncation was reported: %+v", tr)
	default:
	}
}
