//go:build !mcpconformance

package mcpserver

import "net/http"

// ConformanceFixturesBuilt tells whether this build has the conformance fixtures.
const ConformanceFixturesBuilt = false

// NewConformance fails with ErrNoConformanceFixtures: this build has no conformance fixtures.
func NewConformance(Options) (http.Handler, error) { return nil, ErrNoConformanceFixtures }
