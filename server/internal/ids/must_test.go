package ids

import (
	"errors"
	"strings"
	"testing"
)

func TestMustPanicsWhenAnIDCannotBeMade(t *testing.T) {
	if got := must("tsk_x", nil); got != "tsk_x" {
		t.Fatalf("must(id, nil) = %q, want the id", got)
	}
	defer func() {
		p := recover()
		if s, ok := p.(string); !ok || !strings.Contains(s, "entropy gone") {
			t.Fatalf("must(_, err) panicked with %v, want the error's text", p)
		}
	}()
	must("", errors.New("entropy gone"))
	t.Fatal("must(_, err) returned")
}
