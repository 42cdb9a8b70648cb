package browser

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWebRTCSendsNoUDPAroundTheProxy: a page gathering ICE candidates against
// a STUN server (a UDP listener counting datagrams) sends it nothing with
// this package's flags; the same page in a browser with Chromium's default
// WebRTC policy does, which shows the listener would see a leak.
func TestWebRTCSendsNoUDPAroundTheProxy(t *testing.T) {
	t.Parallel()
	control, err := Start(tctx(t), Config{WarmContexts: 1, ExtraFlags: []string{"--webrtc-ip-handling-policy=default"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = control.Close() })
	for _, tc := range []struct {
		name    string
		b       *Browser
		wantUDP bool
	}{
		{"this package's flags", testBrowser, false},
		{"Chromium's default policy (control)", control, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := net.ListenPacket("udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var datagrams atomic.Int64
			go func() {
				buf := make([]byte, 2048)
				for {
					if _, _, err := l.ReadFrom(buf); err != nil {
						return
					}
					datagrams.Add(1)
				}
			}()
			ctx := tctx(t)
			s, err := tc.b.OpenSession(ctx, "bs_webrtc_"+strings.ReplaceAll(tc.name[:4], " ", "_"), testPolicy(t), func(Event) {})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.WithoutCancel(ctx))
			if _, err := s.Navigate(ctx, NavigateRequest{URL: fx.A + "/webrtc.html?stun=" + l.LocalAddr().String()}); err != nil {
				t.Fatal(err)
			}
			// The page prints its candidates once gathering completed (or after 5 s).
			var text string
			for deadline := time.Now().Add(15 * time.Second); ; {
				res, err := s.Extract(ctx, ExtractRequest{Kind: ExtractText})
				if err != nil {
					t.Fatal(err)
				}
				if text = res.Data.(string); strings.Contains(text, "gathered:") || time.Now().After(deadline) {
					break
				}
			}
			if !strings.Contains(text, "gathered:") {
				t.Fatalf("the page never finished gathering: %q", text)
			}
			t.Logf("%d datagrams; page: %q", datagrams.Load(), text)
			if got := datagrams.Load() > 0; got != tc.wantUDP {
				t.Errorf("STUN server received %d datagrams, want some: %v (page: %q)", datagrams.Load(), tc.wantUDP, text)
			}
			if !tc.wantUDP && strings.Contains(text, "/udp") {
				t.Errorf("the page gathered UDP candidates: %q", text)
			}
		})
	}
}
