package app

import (
	"slices"
	"testing"
)

// The cache of recorded handles sends only new handles, per session, and forgets sessions that
// are no longer live.
func TestHandleCacheKeepsOnlyNewHandles(t *testing.T) {
	var c handleCache
	live := map[string]bool{"bs_a": true, "bs_b": true}
	isLive := func(id string) bool { return live[id] }
	b := HandleBatch{Handles: []string{"nd_1", "nd_2"}, Roles: []string{"button", "link"}}
	c.keepNew("bs_a", &b)
	if len(b.Handles) != 2 {
		t.Fatalf("first read: %v", b.Handles)
	}
	c.add("bs_a", b.Handles, isLive)
	b = HandleBatch{Handles: []string{"nd_2", "nd_3", "nd_1"}, Roles: []string{"link", "textbox", "button"}}
	c.keepNew("bs_a", &b)
	if !slices.Equal(b.Handles, []string{"nd_3"}) || !slices.Equal(b.Roles, []string{"textbox"}) {
		t.Fatalf("second read of bs_a: %v %v, want only nd_3 (textbox)", b.Handles, b.Roles)
	}
	// Another session with the same handle ids (they are unique per session only) sends them.
	b = HandleBatch{Handles: []string{"nd_1"}, Roles: []string{"button"}}
	c.keepNew("bs_b", &b)
	if len(b.Handles) != 1 {
		t.Fatalf("bs_b: %v", b.Handles)
	}
	// A session that ended is forgotten at the next sweep.
	live["bs_a"] = false
	for i := 0; i < 64; i++ {
		c.add("bs_b", []string{"nd_1"}, isLive)
	}
	if _, ok := c.bySession["bs_a"]; ok {
		t.Fatal("the ended session bs_a is still cached")
	}
	if _, ok := c.bySession["bs_b"]; !ok {
		t.Fatal("the live session bs_b was forgotten")
	}
}
