// Package codegen holds the generators `make generate` runs to rebuild every generated file from
// spec/: the bundler (spec/ → one self-contained OpenAPI and AsyncAPI document each), the
// oapi-codegen configurations for the Go server types and sdk-go types, and our own generators for
// what no maintained tool serves offline (the sdk-go/sdk-ts/sdk-py clients, the MCP tool catalog,
// the event types), and the ERD of the migrations (codegen/erd → docs/erd.md). Generators are
// deterministic: the same spec and migrations give byte-identical output.
package codegen
