package browser

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestNavigateReportsTheNewDocumentsTitle checks the title a navigation answers with, now that it
// is read from the navigation entry rather than from the page: the same URL loaded again with
// another title (the entry is reused), a title removed, a title written by a script during load,
// and whitespace that document.title collapses.
func TestNavigateReportsTheNewDocumentsTitle(t *testing.T) {
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(body.Load().(string)))
	}))
	defer srv.Close()
	b := setupWith(t, testPolicy(t, srv.URL))
	ctx := tctx(t)
	cases := []struct {
		name, path, html, want string
	}{
		{"first load", "/same", "<title>First</title><p>one", "First"},
		{"same URL, new title", "/same", "<title>Second</title><p>two", "Second"},
		{"same URL, no title", "/same", "<p>three", ""},
		{"title set by a script", "/scripted", "<title>Static</title><script>document.title = 'Scripted'</script>", "Scripted"},
		{"whitespace collapsed", "/spaces", "<title>  A \n  spaced\ttitle </title>", "A spaced title"},
		{"fragment of a titled page", "/spaces#part", "<title>  A \n  spaced\ttitle </title>", "A spaced title"},
	}
	for _, tc := range cases {
		body.Store(tc.html)
		res, err := b.s.Navigate(ctx, NavigateRequest{URL: srv.URL + tc.path})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Title != tc.want {
			t.Errorf("%s: title %q, want %q", tc.name, res.Title, tc.want)
		}
		if res.URL != srv.URL+tc.path {
			t.Errorf("%s: url %q, want %q", tc.name, res.URL, srv.URL+tc.path)
		}
	}
}
