package e2e

import (
	"sync"
	"testing"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/spectest"
)

// The spec is the wire, checked (spectest): every JSON response a test receives from the API
// must validate, strictly, against the schema the OpenAPI document gives its operation and status.
var specResponses = sync.OnceValues(func() (*spectest.Responses, error) { return spectest.New(apigen.OpenAPI) })

// assertResponseMatchesSpec fails t when a JSON answer of the API does not validate, strictly,
// against the schema the spec gives its operation and status.
func assertResponseMatchesSpec(t *testing.T, method, path string, status int, contentType string, raw []byte) {
	t.Helper()
	r, err := specResponses()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(method, path, status, contentType, raw); err != nil {
		t.Error(err)
	}
}
