// Package sdkgen generates the operation methods and event types of the SDKs (sdk-go, sdk-py,
// sdk-ts, sdk-rs) from the bundled OpenAPI and AsyncAPI documents. Each SDK's transport
// (HTTP, retries, idempotency keys, problems) is hand-written next to the generated files; the
// generated part is only what follows from the spec: names, signatures, routes, doc comments,
// and the shapes Go's types.gen.go (oapi-codegen) and TypeScript's schema.gen.ts
// (openapi-typescript) do not give. For Rust, which has no such tool here, the types too
// (rsgen.go).
package sdkgen

import (
	"sort"
	"strings"

	"github.com/originweave/bap/codegen/apimodel"
)

// wrap breaks text into lines of at most width characters (words are never split), keeping
// blank-line paragraph breaks, each line prefixed with prefix.
func wrap(text, prefix string, width int) string {
	var out strings.Builder
	paras := strings.Split(strings.TrimSpace(text), "\n\n")
	for i, para := range paras {
		if i > 0 {
			out.WriteString(strings.TrimRight(prefix, " ") + "\n")
		}
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(prefix)+len(line)+1+len(w) > width {
				out.WriteString(prefix + line + "\n")
				line = ""
			}
			if line == "" {
				line = w
			} else {
				line += " " + w
			}
		}
		if line != "" {
			out.WriteString(prefix + line + "\n")
		}
	}
	return out.String()
}

// sentence makes sure s ends with a full stop.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "!") {
		return s
	}
	return s + "."
}

// closedAnswers returns, once per schema and sorted by name, the closed answers (additionalProperties:
// false, Only set) that contract operations may give instead of their result: each SDK renders a
// test of its shape (isInterruptedCommandResponse, is_interrupted_command_response) beside the
// union the operations return.
func closedAnswers(d *apimodel.Document) []apimodel.Response {
	seen := map[string]bool{}
	var out []apimodel.Response
	for _, o := range d.ContractOperations() {
		for _, a := range o.Alternatives() {
			if a.Only != nil && !seen[a.Schema] {
				seen[a.Schema] = true
				out = append(out, a)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Schema < out[j].Schema })
	return out
}

// mapJoin joins f of each name with sep.
func mapJoin(names []string, f func(string) string, sep string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = f(n)
	}
	return strings.Join(out, sep)
}
