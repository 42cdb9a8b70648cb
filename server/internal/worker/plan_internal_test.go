package worker

import (
	"testing"

	"github.com/originweave/bap/server/internal/app"
)

// A step's problem is treated by its class: what no retry cures fails the plan at once, a
// saturated node is waited out, a lost session is rebuilt, a changed task is read again.
func TestClassify(t *testing.T) {
	for code, want := range map[app.Code]errorClass{
		app.CodeInvalidRequest:      fatal, // an unreadable or unopenable step (keys.go openStep)
		app.CodeOriginNotAllowed:    fatal,
		app.CodeSecretNotFound:      fatal,
		app.CodeRateLimited:         throttled,
		app.CodeOverloaded:          throttled,
		app.CodeIdempotencyInFlight: throttled,
		app.CodeBrowserSessionLost:  sessionGone,
		app.CodeInvalidTransition:   stateChanged,
		app.CodeActionTimeout:       retryable,
		app.CodeNotFound:            retryable,
	} {
		if got := classify(code); got != want {
			t.Errorf("classify(%s) = %d, want %d", code, got, want)
		}
	}
}
