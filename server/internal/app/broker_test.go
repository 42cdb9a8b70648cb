package app_test

import (
	"errors"
	"testing"

	"github.com/originweave/bap/server/internal/app"
)

func feedEvent(tenant, task string, xid uint64, seq int64) app.FeedEvent {
	return app.FeedEvent{Event: app.Event{Tenant: tenant, TaskID: task, Seq: seq, Type: "task.created"},
		Pos: app.FeedPosition{XID: xid, Offset: int64(xid), Seq: seq}}
}

func TestBrokerFiltersByTenantAndTask(t *testing.T) {
	t.Parallel()
	b := app.NewBroker(app.BrokerConfig{})
	all, err := b.Subscribe("acme", "")
	if err != nil {
		t.Fatal(err)
	}
	one, err := b.Subscribe("acme", "tsk_a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.Subscribe("globex", "")
	if err != nil {
		t.Fatal(err)
	}
	b.Publish([]app.FeedEvent{feedEvent("acme", "tsk_a", 1, 1), feedEvent("acme", "tsk_b", 2, 1), feedEvent("globex", "tsk_c", 3, 1)})
	for _, c := range []struct {
		name string
		sub  *app.Subscription
		want []string
	}{{"all of acme", all, []string{"tsk_a", "tsk_b"}}, {"task a", one, []string{"tsk_a"}}, {"globex", other, []string{"tsk_c"}}} {
		for _, w := range c.want {
			if e := <-c.sub.C(); e.TaskID != w {
				t.Errorf("%s: got %s, want %s", c.name, e.TaskID, w)
			}
		}
		if n := len(c.sub.C()); n != 0 {
			t.Errorf("%s: %d extra events", c.name, n)
		}
	}
}

func TestBrokerCutsSlowSubscriberWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	b := app.NewBroker(app.BrokerConfig{Buffer: 2})
	slow, _ := b.Subscribe("acme", "")
	fast, _ := b.Subscribe("acme", "")
	for i := 1; i <= 5; i++ {
		b.Publish([]app.FeedEvent{feedEvent("acme", "tsk_a", uint64(i), int64(i))})
		<-fast.C() // the fast one keeps up
	}
	got := 0
	for range slow.C() {
		got++
	}
	if got != 2 || !errors.Is(slow.Err(), app.ErrSubscriberTooSlow) {
		t.Fatalf("slow subscriber: %d events then %v; want 2 then ErrSubscriberTooSlow", got, slow.Err())
	}
	if fast.Err() != nil || b.Subscribers() != 1 {
		t.Fatalf("fast subscriber disturbed: %v, %d subscribers", fast.Err(), b.Subscribers())
	}
}

func TestBrokerLimitsSubscribersPerTenantAndClosesOnShutdown(t *testing.T) {
	t.Parallel()
	b := app.NewBroker(app.BrokerConfig{MaxPerTenant: 1})
	s1, err := b.Subscribe("acme", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Subscribe("acme", "tsk_a")
	if e := app.AsError(err); e == nil || e.Code != app.CodeRateLimited || e.RetryAfter <= 0 {
		t.Fatalf("second subscriber of a tenant: %v, want rate_limited with a Retry-After", err)
	}
	if _, err := b.Subscribe("globex", ""); err != nil {
		t.Fatalf("another tenant is not limited by acme's subscribers: %v", err)
	}
	s1.Close()
	s2, err := b.Subscribe("acme", "")
	if err != nil {
		t.Fatalf("a closed subscription frees its place: %v", err)
	}
	b.Close()
	if _, ok := <-s2.C(); ok || !errors.Is(s2.Err(), app.ErrFeedClosed) {
		t.Fatalf("after Close: %v, want ErrFeedClosed", s2.Err())
	}
	if _, err := b.Subscribe("acme", ""); err == nil {
		t.Fatal("a closed broker accepted a subscriber")
	}
}

func TestBrokerStartPositionIsTheHead(t *testing.T) {
	t.Parallel()
	b := app.NewBroker(app.BrokerConfig{})
	b.AdvanceHead(app.FeedPosition{XID: 7, Offset: 3, Seq: 2})
	b.Publish([]app.FeedEvent{feedEvent("acme", "tsk_a", 9, 1)})
	b.AdvanceHead(app.FeedPosition{XID: 8}) // behind the head: ignored
	s, _ := b.Subscribe("acme", "")
	if got, want := s.Start(), (app.FeedPosition{XID: 9, Offset: 9, Seq: 1}); got != want {
		t.Fatalf("start %v, want %v", got, want)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, p := range []app.FeedPosition{{}, {XID: 1, Offset: 2, Seq: 3}, {XID: 1<<63 + 5, Offset: 1 << 40, Seq: 1 << 33}} {
		got, err := app.ParseCursor(p.Cursor())
		if err != nil || got != p {
			t.Errorf("ParseCursor(%q) = %v, %v; want %v", p.Cursor(), got, err, p)
		}
	}
	for _, bad := range []string{"", "c1.", "c1.1.2", "c2.1.2.3", "c1.1.2.3.4", "c1.-1.2.3", "c1.1.-2.3", "c1.z!.1.1", "12"} {
		if _, err := app.ParseCursor(bad); app.AsError(err) == nil || app.AsError(err).Code != app.CodeInvalidRequest {
			t.Errorf("ParseCursor(%q): %v, want invalid_request", bad, err)
		}
	}
	a, b := app.FeedPosition{XID: 1, Offset: 9, Seq: 9}, app.FeedPosition{XID: 2}
	if !a.Less(b) || b.Less(a) || a.Less(a) {
		t.Error("Less does not order by XID first")
	}
}

// TestBrokerDecodesAMessageOnlyForATenantWithASubscriber: the relay's message of a tenant nobody
// follows on this node is not decoded, yet moves the head, so a later subscriber starts after it
// (and replays it from history); one of a followed tenant is decoded and delivered.
func TestBrokerDecodesAMessageOnlyForATenantWithASubscriber(t *testing.T) {
	t.Parallel()
	b := app.NewBroker(app.BrokerConfig{})
	acme, err := b.Subscribe("acme", "")
	if err != nil {
		t.Fatal(err)
	}
	decoded := 0
	publish := func(tenant string, xid uint64) error {
		e := feedEvent(tenant, "tsk_a", xid, 1)
		return b.PublishMessage(tenant, e.Pos, func() ([]app.FeedEvent, error) {
			decoded++
			return []app.FeedEvent{e}, nil
		})
	}
	if err := publish("globex", 5); err != nil || decoded != 0 {
		t.Fatalf("a message of a tenant nobody follows: err %v, decoded %d times, want not at all", err, decoded)
	}
	later, err := b.Subscribe("globex", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := feedEvent("globex", "tsk_a", 5, 1).Pos; later.Start() != want {
		t.Errorf("a later subscriber starts after %+v, want %+v", later.Start(), want)
	}
	if err := publish("acme", 6); err != nil || decoded != 1 {
		t.Fatalf("a message of a followed tenant: err %v, decoded %d times, want once", err, decoded)
	}
	if e := <-acme.C(); e.Pos.XID != 6 {
		t.Errorf("delivered %+v, want the message at xid 6", e.Pos)
	}
	if n := len(later.C()); n != 0 {
		t.Errorf("globex's subscriber got %d events of acme", n)
	}
	bad := errors.New("undecodable")
	if err := b.PublishMessage("acme", feedEvent("acme", "tsk_a", 7, 1).Pos, func() ([]app.FeedEvent, error) { return nil, bad }); !errors.Is(err, bad) {
		t.Errorf("a decoding error: %v, want it returned", err)
	}
}
