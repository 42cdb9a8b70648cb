package main

import (
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/spectest"
)

// specViolations collects the answers of the servers these tests start that their OpenAPI schema
// does not admit (strictly: no undeclared field). Every HTTP client of the tests checks through
// the same transport, so TestMain fails the run when any answer broke the spec, naming it.
var specViolations struct {
	sync.Mutex
	list []string
}

// specTransport wraps base so that every JSON answer it carries is checked against the spec.
var specTransport func(base http.RoundTripper) http.RoundTripper

func TestMain(m *testing.M) {
	responses, err := spectest.New(apigen.OpenAPI)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the spec:", err)
		os.Exit(2)
	}
	report := func(err error) {
		specViolations.Lock()
		defer specViolations.Unlock()
		specViolations.list = append(specViolations.list, err.Error())
	}
	specTransport = func(base http.RoundTripper) http.RoundTripper { return responses.Transport(base, report) }
	// http.Get and http.DefaultClient check too. (http.DefaultTransport itself stays an
	// *http.Transport: sdk-go clones it.)
	http.DefaultClient.Transport = specTransport(http.DefaultTransport)
	code := m.Run()
	specViolations.Lock()
	defer specViolations.Unlock()
	if len(specViolations.list) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d answers the spec does not admit:\n", len(specViolations.list))
		for _, v := range specViolations.list {
			fmt.Fprintln(os.Stderr, " -", v)
		}
		code = 1
	}
	os.Exit(code)
}
