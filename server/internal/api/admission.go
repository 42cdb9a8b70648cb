package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/admission"
	"github.com/originweave/bap/server/internal/app"
)

// Admission bounds the BAP operations in flight on this node, per tenant and in all: a request
// beyond either cap is refused at once — 429 rate_limited (the tenant's) or 503 overloaded (the
// node's), with Retry-After — after authentication and before it is validated or becomes a
// command, so nothing is recorded under its Idempotency-Key. Event streams are not counted (they
// are long-lived; the broker bounds them). See docs/operability.md, "Backpressure".
type Admission struct {
	// Commands holds one slot per request in flight, keyed by tenant; nil admits everything.
	Commands *admission.Slots
	// Refusals counts refusals by reason, the client rate limit's included (nil: not counted).
	Refusals *admission.Refusals
	// RetryAfter is the Retry-After of an in-flight refusal (default 1 s: commands take
	// milliseconds to seconds).
	RetryAfter time.Duration
}

// admit takes an in-flight slot for the request of p to op, or answers the refusal itself.
func (s *server) admit(w http.ResponseWriter, r *http.Request, op *operation, p Principal) (release func(), ok bool) {
	if s.admission.Commands == nil || strings.HasPrefix(op.ID, "stream_") {
		return func() {}, true
	}
	release, full := s.admission.Commands.TryAcquire(p.Actor.Tenant)
	if full == admission.NotFull {
		return release, true
	}
	wait := s.admission.RetryAfter
	if wait <= 0 {
		wait = time.Second
	}
	perTenant, total := s.admission.Commands.Caps()
	if full == admission.KeyFull {
		s.admission.Refusals.Add(admission.TenantCommands)
		s.refused(r, op, p, string(app.CodeRateLimited))
		e := app.Errorf(app.CodeRateLimited, "the tenant has as many requests in flight as it may (%d); retry later", perTenant)
		e.RetryAfter = wait
		writeProblem(w, e)
		return nil, false
	}
	s.admission.Refusals.Add(admission.NodeCommands)
	e := app.Errorf(app.CodeOverloaded, "this node has as many requests in flight as it may (%d); retry later", total)
	e.RetryAfter = wait
	writeProblem(w, e)
	return nil, false
}
