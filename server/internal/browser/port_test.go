package browser

import "github.com/originweave/bap/server/internal/app"

// A *Session is the use-cases' BrowserSession as it is (the request and
// result types are page's); Browser needs a two-line adapter because its
// methods return the concrete *Session.
var _ app.BrowserSession = (*Session)(nil)
