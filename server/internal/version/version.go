// Package version names the versions this build speaks: the BAP protocol, the MCP revision and the
// database schema. It imports nothing of the server.
package version

// BAP is the protocol version this server implements (CONTRACT: "1.0.x").
const BAP = "1.0.0"

// MCP is the only MCP revision the /mcp adapter accepts.
const MCP = "2026-07-28"

// Software is the version of this build of the runtime; release builds override it with
// -ldflags "-X github.com/originweave/bap/server/internal/version.Software=…".
var Software = "0.1.0-dev"
