// Command runner_go is the conformance runner for sdk-go: it runs every
// conformance/scenarios/*.json against a live server and writes <out>/go.json
// (normalized results, see conformance/README.md); it exits 1 when a step fails.
//
//	go run ./conformance/runner_go --base-url http://127.0.0.1:PORT --out DIR [--pages ORIGIN]
package main

import (
	"context"

	"github.com/originweave/bap/conformance/internal/harness"
)

func main() {
	harness.Main("go", func(_ context.Context, baseURL string) (harness.Caller, func(), error) {
		return harness.SDKCaller(baseURL), func() {}, nil
	})
}
