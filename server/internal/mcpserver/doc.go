// Package mcpserver is the MCP adapter of BAP: the 2026-07-28 revision of the Model Context
// Protocol over stateless Streamable HTTP, built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk).
//
// It translates and never decides. Every tool is one BAP operation of the reviewed catalog
// (mcpcatalog); a tool call becomes an in-process request to the BAP HTTP API (the handler the
// daemon passes as Options.API), so validation, authorization, idempotency, replay bytes and
// problems are exactly those of BAP over HTTP. The result carries the BAP JSON in
// structuredContent; a BAP problem becomes an isError result carrying the problem JSON.
//
// Around the SDK it adds what the SDK leaves open (see guard.go): authentication with the BAP
// authenticator (401/403 with the RFC 9728 challenge), a modern-only version gate
// (-32022/-32020), body and JSON-RPC framing checks, base64-decoded Mcp-Name, and Mcp-Name
// routing checks for the Tasks extension's methods. tools/list is its own (list.go): the catalog
// filtered by the caller's scopes, paginated with HMAC-protected cursors. The Tasks extension
// (io.modelcontextprotocol/tasks, tasks.go) projects a long-running tool call — one BAP command —
// onto an MCP task; BAP stays the lifecycle authority.
//
// NewConformance serves the fixture tools, prompts and resources of the official conformance
// suite on the same transport stack (fixtures.go); it is mounted only in the local profile, for
// tests.
//
// mcpserver is a transport: it imports app (for Actor and Error), the generated catalog and
// OpenAPI document, version, and the MCP SDK; never the store, pgx, the browser or another
// transport.
package mcpserver
