// Package spec embeds the BAP 1.0 specification, the single source of truth for the
// protocol: the OpenAPI 3.1 description of the HTTP operations (openapi.yaml), the
// AsyncAPI 3.0 description of the event streams (asyncapi.yaml) and the JSON Schema
// 2020-12 documents they share (schemas/<Name>.json). Rules for these files are in
// docs/design/spec-conventions.md.
//
// The server serves these documents (GET /bap/v1/openapi.json, /bap/v1/asyncapi.json)
// and the code generators and MCP tool catalog read them from here. The package lives
// inside spec/ because go:embed cannot reach parent directories.
package spec

import "embed"

// FS holds openapi.yaml, asyncapi.yaml and schemas/*.json, with paths relative to spec/.
//
//go:embed openapi.yaml asyncapi.yaml schemas/*.json
var FS embed.FS
