package historychain

import (
	"encoding/json"
	"testing"
	"time"
)

// BenchmarkLinkEvent is what chaining costs one history event on the command path: its canonical
// form, the keyed link and the public hash (create_task appends four).
func BenchmarkLinkEvent(b *testing.B) {
	e := Entry{Tenant: "local", TaskID: "tsk_01m983f799vvynv2wz5cvhqcw6", Seq: 3, EventID: "evt_01m983f7cedqma9rcfhs0sneyp",
		Type: "task.state_changed", Time: time.Now(), Actor: "agent:local", Cause: "create_task", CommandID: "cmd_01m983f7d7eg7aj3j2m6qqg7rp",
		Data: json.RawMessage(`{"from":"created","to":"running","cause":"create_task","reason":"admitted"}`)}
	c := New(make([]byte, 32))
	prev, public := Genesis, Genesis
	b.ReportAllocs()
	for b.Loop() {
		canonical, err := e.Canonical()
		if err != nil {
			b.Fatal(err)
		}
		prev = c.Link(canonical, prev)
		public = PublicLink(public, canonical)
	}
}
