// Command bapgen is run by `make generate` from the repository root. It bundles spec/ into
// self-contained JSON documents and runs our own generators over them. oapi-codegen (pinned in
// go.mod as a tool) is run by the Makefile on the bundle this command writes.
//
// Our generators write: sdk-go/client.gen.go and events.gen.go, sdk-py/bap/_generated.py,
// sdk-ts/src/client.gen.ts, events.gen.ts and schema.gen.ts (openapi-typescript, pinned in
// tools/package.json, run on the Node of tools/node_modules), sdk-rs/src/types.gen.rs and
// client.gen.rs, the MCP tool catalog server/internal/mcpcatalog/tools.gen.json, the problem
// table server/internal/problem/problem.gen.go (codegen/problems), the typed WebDriver BiDi
// protocol server/internal/bidi/protocol.gen.go (codegen/bidigen, from the spec's CDDL), and docs/erd.md, the Mermaid ERD of the schema migrations/*.sql build (codegen/erd).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/originweave/bap/codegen/apimodel"
	"github.com/originweave/bap/codegen/bidigen"
	"github.com/originweave/bap/codegen/bundle"
	"github.com/originweave/bap/codegen/erd"
	"github.com/originweave/bap/codegen/mcpcatalog"
	"github.com/originweave/bap/codegen/problems"
	"github.com/originweave/bap/codegen/sdkgen"
)

const (
	openapiBundle  = "server/internal/apigen/openapi.gen.json"
	asyncapiBundle = "server/internal/apigen/asyncapi.gen.json"
)

func main() {
	skipNode := flag.Bool("skip-node", false, "do not run openapi-typescript (sdk-ts/src/schema.gen.ts is left as it is)")
	flag.Parse()
	if err := run(*skipNode); err != nil {
		fmt.Fprintln(os.Stderr, "bapgen:", err)
		os.Exit(1)
	}
}

func run(skipNode bool) error {
	specFS := os.DirFS("spec")
	for _, d := range []struct{ in, out string }{
		{"openapi.yaml", openapiBundle},
		{"asyncapi.yaml", asyncapiBundle},
	} {
		out, err := bundle.Document(specFS, d.in, "schemas")
		if err != nil {
			return fmt.Errorf("bundling spec/%s: %w", d.in, err)
		}
		if err := writeIfChanged(d.out, out); err != nil {
			return err
		}
	}

	doc, err := apimodel.LoadOpenAPI(openapiBundle)
	if err != nil {
		return fmt.Errorf("%s: %w", openapiBundle, err)
	}
	events, err := apimodel.LoadEvents(asyncapiBundle)
	if err != nil {
		return fmt.Errorf("%s: %w", asyncapiBundle, err)
	}
	for _, g := range []struct {
		out string
		gen func() ([]byte, error)
	}{
		{"sdk-go/client.gen.go", func() ([]byte, error) { return sdkgen.GoClient(doc) }},
		{"sdk-go/events.gen.go", func() ([]byte, error) { return sdkgen.GoEvents(doc, events) }},
		{"sdk-py/bap/_generated.py", func() ([]byte, error) { return sdkgen.Python(doc, events) }},
		{"sdk-ts/src/client.gen.ts", func() ([]byte, error) { return sdkgen.TSClient(doc) }},
		{"sdk-ts/src/events.gen.ts", func() ([]byte, error) { return sdkgen.TSEvents(doc, events) }},
		{"sdk-rs/src/types.gen.rs", func() ([]byte, error) { return sdkgen.RustTypes(doc, events) }},
		{"sdk-rs/src/client.gen.rs", func() ([]byte, error) { return sdkgen.RustClient(doc) }},
		{"server/internal/mcpcatalog/tools.gen.json", func() ([]byte, error) { return mcpcatalog.Generate(doc) }},
	} {
		out, err := g.gen()
		if err != nil {
			return fmt.Errorf("%s: %w", g.out, err)
		}
		if err := writeIfChanged(g.out, out); err != nil {
			return err
		}
	}
	ps, err := problems.Load(specFS, "schemas/ProblemCode.json")
	if err != nil {
		return fmt.Errorf("problem codes: %w", err)
	}
	pgo, err := problems.Go(ps)
	if err != nil {
		return fmt.Errorf("server/internal/problem/problem.gen.go: %w", err)
	}
	if err := writeIfChanged("server/internal/problem/problem.gen.go", pgo); err != nil {
		return err
	}
	if err := bidiProtocol(); err != nil {
		return err
	}
	schema, err := erd.FromFS(os.DirFS("."), "migrations")
	if err != nil {
		return fmt.Errorf("docs/erd.md: %w", err)
	}
	if err := writeIfChanged("docs/erd.md", schema.Markdown()); err != nil {
		return err
	}
	if !skipNode {
		out, err := sdkgen.TSSchema(".", openapiBundle)
		if err != nil {
			return fmt.Errorf("sdk-ts/src/schema.gen.ts: %w", err)
		}
		if err := writeIfChanged("sdk-ts/src/schema.gen.ts", out); err != nil {
			return err
		}
	}
	return nil
}

// bidiOut is the typed WebDriver BiDi protocol codegen/bidigen writes from the spec's CDDL.
const bidiOut = "server/internal/bidi/protocol.gen.go"

func bidiProtocol() error {
	remote, err := os.ReadFile("codegen/bidigen/webdriver-bidi/remote.cddl")
	if err != nil {
		return err
	}
	local, err := os.ReadFile("codegen/bidigen/webdriver-bidi/local.cddl")
	if err != nil {
		return err
	}
	out, err := bidigen.Generate(string(remote), string(local), "bidi", bidigen.Modules)
	if err != nil {
		return fmt.Errorf("%s: %w", bidiOut, err)
	}
	return writeIfChanged(bidiOut, out)
}

// writeIfChanged writes data to path unless the file already holds exactly data, so that
// regeneration leaves modification times (and make's view of the tree) alone.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
