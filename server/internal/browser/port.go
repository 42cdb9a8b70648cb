package browser

import (
	"context"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// Port adapts a *Browser to the use-cases' app.Browser port: its methods return the concrete
// *Session, which already is an app.BrowserSession.
type Port struct{ *Browser }

var _ app.Browser = Port{}

// OpenSession implements app.Browser.
func (p Port) OpenSession(ctx context.Context, sessionID string, pol *policy.Policy, onEvent func(page.Event)) (app.BrowserSession, error) {
	s, err := p.Browser.OpenSession(ctx, sessionID, pol, onEvent)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Session implements app.Browser.
func (p Port) Session(sessionID string) (app.BrowserSession, bool) {
	s, ok := p.Browser.Session(sessionID)
	if !ok {
		return nil, false
	}
	return s, true
}
