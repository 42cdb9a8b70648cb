package app_test

import (
	"testing"

	"github.com/originweave/bap/server/internal/app"
)

// FuzzParseCursor feeds arbitrary stream cursors (the all-tasks stream's `after` and
// Last-Event-ID). Properties: nothing panics; a refusal is invalid_request; an accepted cursor
// re-serialises to exactly itself (one position, one spelling), and every issued cursor parses
// back to its position.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"c1.0.0.0", "c1.a.1z.3", app.FeedPosition{XID: 1<<64 - 1, Offset: 1<<63 - 1, Seq: 7}.Cursor(),
		"c1.A.0.0", "c1.+1.0.0", "c1.00.0.0", "c1.0.-1.0", "c1.0.0", "c1.0.0.0.0", "c2.0.0.0", "", "c1...", "c1.zzzzzzzzzzzzzz.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := app.ParseCursor(s)
		if err != nil {
			if e := app.AsError(err); e == nil || e.Code != app.CodeInvalidRequest {
				t.Fatalf("refusal %v is not invalid_request", err)
			}
			return
		}
		if p.Offset < 0 || p.Seq < 0 || p.Cursor() != s {
			t.Fatalf("accepted %q as %+v (%s)", s, p, p.Cursor())
		}
		if back, err := app.ParseCursor(p.Cursor()); err != nil || back != p {
			t.Fatalf("an issued cursor does not parse back: %v", err)
		}
	})
}
