package app_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/app"
)

// deliveryIDColumn is inbox_event.delivery_id's CHECK (migrations/0019), spelled as in SQL.
var deliveryIDColumn = regexp.MustCompile(`^[!-~]{1,255}$`)

// FuzzParseDeliveryID feeds arbitrary delivery ids (an orchestrator's chat completion id, a node
// credential's id: both come from outside this node). Properties: nothing panics; an id is
// accepted exactly when the database's CHECK admits it, and unchanged — so an accepted id never
// fails the inbox's insert, and a refused one is never deduplicated by a spelling the sender did
// not send.
func FuzzParseDeliveryID(f *testing.F) {
	for _, s := range []string{"chatcmpl-abc123", "AAECAwQFBgcICQoLDA0ODw", "", " ", "a b", "x\x00", "é",
		strings.Repeat("x", 255), strings.Repeat("x", 256), "~!", "\x7f", "line\nbreak"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := app.ParseDeliveryID(s)
		if ok := deliveryIDColumn.MatchString(s); ok != (err == nil) {
			t.Fatalf("ParseDeliveryID(%q): %v; the column admits it: %v", s, err, ok)
		}
		if err == nil && got != s {
			t.Fatalf("accepted %q as %q", s, got)
		}
	})
}
