package warcrecord

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sampleArchive is a small archive as the recorder writes it: warcinfo, a form POST and its
// response with a masked value, and a tunnel.
func sampleArchive(t testing.TB) []byte {
	t.Helper()
	var out bytes.Buffer
	r, err := New(Config{Out: &out, Now: func() time.Time { return time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC) },
		Info: []Field{{"bap-task", "tsk_fuzz"}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Protect("card_pin", "4242 secret")
	req, _ := http.NewRequest("POST", "http://shop.test/order?x=1", strings.NewReader("pin=4242+secret&ok=1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	done := r.Exchange(req)
	buf := new(bytes.Buffer)
	_, _ = buf.ReadFrom(req.Body)
	resp := &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", Header: http.Header{"Content-Type": {"text/html"}},
		Body: http.NoBody, ContentLength: -1}
	resp.Body = nopBody{strings.NewReader("<p>thanks, 4242 secret</p>")}
	done(resp)
	_, _ = buf.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	r.Tunnel("shop.test:443")
	return out.Bytes()
}

type nopBody struct{ *strings.Reader }

func (nopBody) Close() error { return nil }

func TestReadAllChecksDigestsAndSizes(t *testing.T) {
	a := sampleArchive(t)
	recs, err := ReadAll(bytes.NewReader(a), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[1].Type != "request" || !bytes.HasSuffix(recs[1].Block, []byte("\r\n\r\npin=[masked:card_pin]&ok=1")) {
		t.Fatalf("%d records; request %q", len(recs), recs[1].Block)
	}
	edited := bytes.Replace(a, []byte("ok=1"), []byte("ok=2"), 1)
	if _, err := ReadAll(bytes.NewReader(edited), 1<<20); err == nil || !strings.Contains(err.Error(), "record 1") {
		t.Fatalf("an edited body read as %v, want the record named", err)
	}
	if _, err := ReadAll(bytes.NewReader(a), 100); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a block over the limit: %v", err)
	}
}

// FuzzReadAll: whatever an archive holds, ReadAll returns records or an error; it never panics
// and never returns a block over its limit.
func FuzzReadAll(f *testing.F) {
	f.Add(sampleArchive(f))
	f.Add([]byte("WARC/1.1\r\nWARC-Type: warcinfo\r\nContent-Length: 0\r\n\r\n\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// ReadAltered reads what ReadAll reads, and more only by records marked Altered.
		lenient, lerr := ReadAltered(bytes.NewReader(b), 4096)
		recs, err := ReadAll(bytes.NewReader(b), 4096)
		if err != nil {
			return
		}
		if lerr != nil || len(lenient) != len(recs) {
			t.Fatalf("ReadAll read %d records, ReadAltered %d (%v)", len(recs), len(lenient), lerr)
		}
		for i, r := range recs {
			if len(r.Block) > 4096 {
				t.Fatalf("a block of %d bytes", len(r.Block))
			}
			if lenient[i].Altered || !bytes.Equal(lenient[i].Block, r.Block) {
				t.Fatalf("record %d read otherwise by ReadAltered", i)
			}
		}
	})
}
