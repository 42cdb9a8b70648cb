package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

// netlogLookups returns, per probe name, whether Chromium's net-log at path
// netLog is what the tests read of a Chromium net-log.
type netLog struct {
	Constants struct {
		LogEventTypes map[string]int `json:"logEventTypes"`
	} `json:"constants"`
	Events []netLogEvent `json:"events"`
}

type netLogEvent struct {
	Type   int             `json:"type"`
	Params json.RawMessage `json:"params"`
}

// readNetLog decodes a net-log event by event. Chromium writes the file as it goes and closes
// its events array only when it exits in time; a browser killed after its grace period (a busy
// machine) leaves the last event cut off. Such a log is read up to its last whole event (as
// Chromium's own net-log viewer does); the caller checks that it covers what it looks at.
func readNetLog(raw []byte) (*netLog, error) {
	var log netLog
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, fmt.Errorf("not a net-log object: starts with %v", tok)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch tok {
		case "constants":
			if err := dec.Decode(&log.Constants); err != nil {
				return nil, fmt.Errorf("constants: %w", err)
			}
		case "events":
			if tok, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("events: %w", err)
			} else if tok != json.Delim('[') {
				return nil, fmt.Errorf("events: %v, not an array", tok)
			}
			for dec.More() {
				var e netLogEvent
				if err := dec.Decode(&e); err != nil {
					return &log, nil // cut off at the browser's exit: the events before it are whole
				}
				log.Events = append(log.Events, e)
			}
			return &log, nil
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, err
			}
		}
	}
	return &log, nil
}

// mentions it at all and whether a host-resolution or DNS event does.
func netlogLookups(t *testing.T, path string, probes []string) (mentioned, resolved map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log, err := readNetLog(raw)
	if err != nil {
		t.Fatalf("net-log %s: %v", path, err)
	}
	names := map[int]string{}
	for n, id := range log.Constants.LogEventTypes {
		names[id] = n
	}
	mentioned, resolved = map[string]bool{}, map[string]bool{}
	for _, e := range log.Events {
		for _, p := range probes {
			if bytes.Contains(e.Params, []byte(p)) {
				mentioned[p] = true
				if n := names[e.Type]; strings.Contains(n, "HOST_RESOLVER") || strings.HasPrefix(n, "DNS_") {
					resolved[p] = true
				}
			}
		}
	}
	return mentioned, resolved
}

// TestResourceHintsResolveNoNames: Chromium 156 has no switch against DNS
// prefetch, so nothing but the browser's setup keeps a page's dns-prefetch
// and preconnect hints from sending names to a resolver (a DNS channel
// around the proxy). The same Chromium with the same flags, loading the page
// outside a session (no browser context, no proxy), resolves both names of
// its hints (its net-log shows the lookups); a session of this package's
// browser, an isolated context behind its egress proxy, resolves neither.
func TestResourceHintsResolveNoNames(t *testing.T) {
	t.Parallel()
	probes := []string{"dns-prefetch-probe.bap-hints.example", "preconnect-probe.bap-hints.example"}
	acct, err := browserAccount(Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "bap-netlog-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := acct.Chown(dir); err != nil { // the browsers write their net-logs here
		t.Fatal(err)
	}

	// Control: the binary with this package's flags but without a session
	// (no browser context, no proxy), sandboxed, as the browser user.
	bin, err := findBinary("")
	if err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(dir, "control.json")
	var args []string
	for _, f := range append(append([]string{}, baseFlags...), networkFlags...) {
		if f != "--remote-debugging-pipe" {
			args = append(args, f)
		}
	}
	args = append(args, "--user-data-dir="+filepath.Join(dir, "profile"), "--log-net-log="+control,
		"--virtual-time-budget=3000", "--dump-dom", fx.A+"/hints.html")
	// #nosec G204 -- the test's own browser binary and fixed flags
	cmd := exec.CommandContext(tctx(t), bin, args...)
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = sysProcAttr(acct.Credential())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("control run: %v\n%s", err, out)
	}
	if _, resolved := netlogLookups(t, control, probes); !resolved[probes[0]] || !resolved[probes[1]] {
		t.Fatalf("the control run resolved %v of %v: its net-log would not show a lookup either", resolved, probes)
	}

	netlog := filepath.Join(dir, "bap.json")
	b, err := Start(tctx(t), Config{WarmContexts: 1, ExtraFlags: []string{"--log-net-log=" + netlog}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.OpenSession(tctx(t), "bs_hints_test", testPolicy(t), func(Event) {})
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	_, err = s.Navigate(tctx(t), NavigateRequest{URL: fx.A + "/hints.html", WaitUntil: WaitNetworkIdle})
	_ = b.Close() // Chromium completes its net-log as it exits
	if err != nil {
		t.Fatal(err)
	}
	// The log must reach past the page's load (it may be cut off at the browser's exit): it
	// names the hints page, whose hints are parsed as it loads.
	if raw, err := os.ReadFile(netlog); err != nil || !bytes.Contains(raw, []byte("/hints.html")) {
		t.Fatalf("the net-log does not cover the page's load (%v)", err)
	}
	if _, resolved := netlogLookups(t, netlog, probes); len(resolved) > 0 {
		t.Errorf("the browser resolved the names of a page's resource hints: %v", resolved)
	}
}

// A net-log cut off at the browser's exit is read up to its last whole event.
func TestReadNetLog(t *testing.T) {
	t.Parallel()
	whole := `{"constants":{"logEventTypes":{"HOST_RESOLVER_DNS_TASK":7}},"events":[{"type":7,"params":{"host":"a"}},{"type":7,"params":{"host":"b"}}]}`
	for _, tt := range []struct {
		name, raw string
		events    int
		fails     bool
	}{
		{"whole", whole, 2, false},
		{"cut inside the last event", whole[:strings.LastIndex(whole, `"host":"b"`)], 1, false},
		{"cut after a comma", whole[:strings.LastIndex(whole, `{"type":7,"params":{"host":"b"`)], 1, false},
		{"no events yet", `{"constants":{"logEventTypes":{}},"events":[`, 0, false},
		{"not a log", `[1,2]`, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			log, err := readNetLog([]byte(tt.raw))
			if (err != nil) != tt.fails {
				t.Fatalf("err %v, want failure %v", err, tt.fails)
			}
			if err == nil && (len(log.Events) != tt.events || log.Constants.LogEventTypes == nil) {
				t.Fatalf("%d events, constants %v; want %d", len(log.Events), log.Constants.LogEventTypes, tt.events)
			}
		})
	}
}
