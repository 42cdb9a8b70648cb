package daemon

import (
	"context"
	"log/slog"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/firefox"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// A *firefox.Session is the use-cases' BrowserSession as it is, like the CDP adapter's: the
// adapter is written here, in the composition root, so that firefox never imports app.
var _ app.BrowserSession = (*firefox.Session)(nil)

// FirefoxPort adapts the WebDriver BiDi *firefox.Driver to an engine of the registry.
type FirefoxPort struct{ *firefox.Driver }

var (
	_ EngineBrowser   = FirefoxPort{}
	_ app.SessionLoad = FirefoxPort{}
)

// OpenSession implements EngineBrowser.
func (p FirefoxPort) OpenSession(ctx context.Context, sessionID string, pol *policy.Policy, onEvent func(page.Event)) (app.BrowserSession, error) {
	s, err := p.Driver.OpenSession(ctx, sessionID, pol, onEvent)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Session implements EngineBrowser.
func (p FirefoxPort) Session(sessionID string) (app.BrowserSession, bool) {
	s, ok := p.Driver.Session(sessionID)
	if !ok {
		return nil, false
	}
	return s, true
}

// FirefoxAdapter is the registry entry of Firefox ESR, driven over WebDriver BiDi by package
// firefox. Its capabilities are what that adapter does: it holds non-safe requests
// (network.addIntercept), uploads files (input.setFiles) and streams the live view
// (browsingContext.captureScreenshot); it has no MHTML writer, and downloads are not implemented
// yet, so each of those answers 501
// engine_capability_unsupported rather than a substitute.
func FirefoxAdapter() EngineAdapter {
	return EngineAdapter{
		Engine: "firefox", AdapterID: app.AdapterBiDi, AdapterName: "WebDriver BiDi",
		Capabilities: []app.Capability{app.CapLiveView, app.CapFileUpload, app.CapRequestHolds},
		Install:      "install the Debian package `firefox-esr` (or set BAP_FIREFOX) and restart",
		Start: func(ctx context.Context, cfg Config, log *slog.Logger) (EngineBrowser, error) {
			d, err := firefox.Start(ctx, firefox.Config{Binary: cfg.Firefox, Logger: log, RunAsUser: cfg.BrowserUser,
				MaxSessions: cfg.browserMaxSessions(), ServerAddrs: listenAddrs(cfg.Listen)})
			if err != nil {
				return nil, err
			}
			return FirefoxPort{Driver: d}, nil
		},
	}
}
