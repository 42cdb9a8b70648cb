// Command bapgen is run by `make generate` from the repository root. It bundles spec/ into
// self-contained JSON documents and runs our own generators over them. oapi-codegen (pinned in
// go.mod as a tool) is run by the Makefile on the bundle this command writes.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/originweave/bap/codegen/bundle"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bapgen:", err)
		os.Exit(1)
	}
}

func run() error {
	specFS := os.DirFS("spec")
	for _, d := range []struct{ in, out string }{
		{"openapi.yaml", "server/internal/apigen/openapi.gen.json"},
		{"asyncapi.yaml", "server/internal/apigen/asyncapi.gen.json"},
	} {
		out, err := bundle.Document(specFS, d.in, "schemas")
		if err != nil {
			return fmt.Errorf("bundling spec/%s: %w", d.in, err)
		}
		if err := writeIfChanged(d.out, out); err != nil {
			return err
		}
	}
	return nil
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
