package daemon

import (
	"context"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/browser"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// A *browser.Session is the use-cases' BrowserSession as it is (its request and result types are
// page's); the adapter is written here, in the composition root, so that browser never imports
// app (issue #16) and neither side's types cross the port.
var _ app.BrowserSession = (*browser.Session)(nil)

// BrowserPort adapts a CDP *browser.Browser to an engine of the registry (EngineBrowser, behind
// the use-cases' app.Browser port, engines.go): its methods return the concrete *browser.Session,
// which already is an app.BrowserSession.
type BrowserPort struct{ *browser.Browser }

var _ EngineBrowser = BrowserPort{}

// OpenSession implements EngineBrowser.
func (p BrowserPort) OpenSession(ctx context.Context, sessionID string, pol *policy.Policy, onEvent func(page.Event)) (app.BrowserSession, error) {
	s, err := p.Browser.OpenSession(ctx, sessionID, pol, onEvent)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Session implements EngineBrowser.
func (p BrowserPort) Session(sessionID string) (app.BrowserSession, bool) {
	s, ok := p.Browser.Session(sessionID)
	if !ok {
		return nil, false
	}
	return s, true
}

// Chromium is the port over one CDP browser as the node's only engine, chromium (for tests that
// start their own browser).
func Chromium(b *browser.Browser) *Engines {
	return NewEngines(RunningEngine{Adapter: ChromiumAdapter(), Browser: BrowserPort{Browser: b}})
}
