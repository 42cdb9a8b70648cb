package mcpserver

import "errors"

// ErrNoConformanceFixtures is NewConformance's error in a build without the fixtures of the
// official MCP conformance suite. They are test code: only a build with the mcpconformance tag
// (make test, scripts/test-mcp-conformance.sh) carries them, so that `bap serve
// --mcp-conformance-fixtures` on a production binary refuses to start instead of serving them.
var ErrNoConformanceFixtures = errors.New("this binary was built without the MCP conformance fixtures (build it with -tags mcpconformance)")
