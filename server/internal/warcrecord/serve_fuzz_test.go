package warcrecord

import (
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
)

// FuzzNewArchive: whatever request and response blocks an archive holds (its digests are checked
// by ReadAll, not its HTTP: an edited bundle can hold anything that hashes right), indexing them
// and serving a request from them never panics, and what is served is the response's body as
// parsed, never more.
func FuzzNewArchive(f *testing.F) {
	recs, err := ReadAll(bytes.NewReader(plainSample(f)), 1<<20)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(recs[1].Block), string(recs[2].Block), recs[1].Header.Get("WARC-Target-URI"), "", "POST", "pin=4242+secret&ok=1")
	f.Add("GET /a HTTP/1.1\r\nHost: a.test\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", "http://a.test/a", "", "GET", "")
	f.Add("HEAD /a HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", "http://a.test/a", "", "HEAD", "")
	f.Add("POST /o HTTP/1.1\r\n\r\nx", "HTTP/1.1 101 Switching\r\nUpgrade: websocket\r\n\r\n", "http://a.test/o", "length", "POST", "x")
	f.Add("PUT /o HTTP/1.1\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "http://a.test/o", "", "PUT", "")
	f.Fuzz(func(t *testing.T, reqBlock, respBlock, target, truncated, method, body string) {
		h := func(id, other string) textproto.MIMEHeader {
			m := textproto.MIMEHeader{}
			m.Set("WARC-Record-ID", id)
			m.Set("WARC-Concurrent-To", other)
			m.Set("WARC-Target-URI", target)
			if truncated != "" {
				m.Set("WARC-Truncated", truncated)
			}
			return m
		}
		a, err := NewArchive([]Record{
			{Type: "request", Header: h("<q>", "<r>"), Block: []byte(reqBlock)},
			{Type: "response", Header: h("<r>", "<q>"), Block: []byte(respBlock)},
		}, nil)
		if err != nil {
			return
		}
		req, err := http.NewRequest(method, target, strings.NewReader(body))
		if err != nil {
			return
		}
		resp, ok := a.Serve(req)
		if !ok {
			return
		}
		got, _ := io.ReadAll(resp.Body)
		if len(got) > len(respBlock) || resp.ContentLength != int64(len(got)) {
			t.Fatalf("served %d bytes (Content-Length %d) from a block of %d", len(got), resp.ContentLength, len(respBlock))
		}
	})
}
