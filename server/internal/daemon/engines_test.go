package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/page"
)

// bap serve refuses at start an engine list it cannot serve (issue #19 item 3): a name the spec
// does not list, the same engine twice; the default, chromium, firefox and both start.
func TestEnginesAreValidatedAtStart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		engines string
		refused string // the error contains it; "" starts
	}{
		{engines: "", refused: ""},
		{engines: "chromium", refused: ""},
		{engines: " chromium , ", refused: ""},
		{engines: "firefox", refused: ""},
		{engines: "chromium,firefox", refused: ""},
		{engines: "firefox,firefox", refused: "names firefox twice"},
		{engines: "webkit", refused: `"webkit" is not a browser engine of BAP (chromium, firefox)`},
		{engines: "chromium,chromium", refused: "names chromium twice"},
	}
	for _, tc := range cases {
		t.Run(tc.engines, func(t *testing.T) {
			cfg := Config{Engines: ParseEngines(tc.engines)}
			cfg.setDefaults()
			err := cfg.Validate()
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("--engines %q refused: %v", tc.engines, err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("--engines %q: %v, want a refusal containing %q", tc.engines, err, tc.refused)
			}
		})
	}
}

// Every engine the spec lists is either in this build's registry or refused at start naming it:
// none is silently accepted without an adapter.
func TestEverySpecEngineHasAnAdapterOrIsRefused(t *testing.T) {
	t.Parallel()
	names, err := SpecEngines()
	if err != nil || len(names) < 2 {
		t.Fatalf("spec engines %v: %v", names, err)
	}
	reg := DefaultEngineRegistry()
	for _, name := range names {
		err := validateEngines([]string{name}, reg)
		a, ok := reg[name]
		switch {
		case ok && (err != nil || a.Engine != name || a.AdapterID == "" || a.Start == nil):
			t.Errorf("engine %s of the registry: %+v, %v", name, a, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), name)):
			t.Errorf("engine %s without an adapter: %v, want a refusal naming it", name, err)
		}
	}
	for name := range reg {
		if !strings.Contains(strings.Join(names, ","), name) {
			t.Errorf("the registry drives %s, which the spec does not list", name)
		}
	}
}

// A configured engine whose browser did not start is listed unavailable with what to install;
// opening a session on it, or on an engine the node does not run, fails with page.ErrUnavailable;
// nothing is found on it and no adapter is recorded for it.
func TestAnEngineThatDidNotStart(t *testing.T) {
	t.Parallel()
	e := NewEngines(RunningEngine{Adapter: ChromiumAdapter()})
	got := e.Engines()
	if len(got) != 1 || got[0].Name != "chromium" || got[0].Available || got[0].Version != "" ||
		!strings.Contains(got[0].Unavailable, "chromium") {
		t.Fatalf("Engines() = %+v", got)
	}
	for _, engine := range []string{"chromium", "firefox"} {
		if _, err := e.OpenSession(context.Background(), engine, "bs_x", nil, nil); !errors.Is(err, page.ErrUnavailable) ||
			!strings.Contains(err.Error(), engine) {
			t.Fatalf("OpenSession on %s: %v", engine, err)
		}
	}
	if _, ok := e.Session("bs_x"); ok || e.running() {
		t.Fatal("a session or a running browser on an engine that did not start")
	}
	if a := nodeAdapters(e); len(a) != 2 || a[0].ID != "bap-http" || a[1].ID != "mcp" {
		t.Fatalf("adapters of a node without a browser: %+v", a)
	}
	if v := productVersion("Chrome/131.0.6778.85"); v != "131.0.6778.85" {
		t.Fatalf("productVersion = %q", v)
	}
}

// `bap serve --engines chromium,firefox` starts both browsers (issue #19): the port lists both
// engines available with their versions, chromium the default, and the node records both
// protocol adapters (cdp and bidi) with the browser's product as their implementation.
func TestBothEnginesStart(t *testing.T) {
	t.Parallel()
	cfg := Config{Engines: ParseEngines("chromium,firefox"), Chromium: os.Getenv("BAP_CHROMIUM"), Firefox: os.Getenv("BAP_FIREFOX")}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e, closeAll := startEngines(context.Background(), cfg, DefaultEngineRegistry(), slog.New(slog.DiscardHandler))
	defer closeAll()
	got := e.Engines()
	if len(got) != 2 || got[0].Name != "chromium" || got[1].Name != "firefox" || got[1].AdapterID != "bidi" {
		t.Fatalf("engines %+v", got)
	}
	for _, en := range got {
		if !en.Available || en.Version == "" {
			t.Fatalf("engine %s did not start: %+v", en.Name, en)
		}
	}
	impl := map[string]string{}
	for _, a := range nodeAdapters(e) {
		impl[a.ID] = a.Implementation
	}
	if !strings.HasPrefix(impl["cdp"], "Chrome") || !strings.HasPrefix(impl["bidi"], "Firefox/") {
		t.Fatalf("protocol adapters %v, want cdp and bidi with their browsers", impl)
	}
}
