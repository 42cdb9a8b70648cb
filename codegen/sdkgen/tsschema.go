package sdkgen

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/originweave/bap/codegen/apimodel"
)

// TSSchema runs openapi-typescript (pinned in tools/package.json) on the OpenAPI bundle with the
// Node that tools/node_modules provides, and returns sdk-ts/src/schema.gen.ts. root is the
// repository root; bundle is relative to it. It installs the pinned tools first when
// tools/node_modules is missing or stale (the same check and stamp as scripts/lint-spec.sh).
//
// --empty-objects-unknown: an object schema without properties (Event.data, PlanStep.args)
// becomes Record<string, unknown>, not Record<string, never>, which would make the <Type>Event
// intersections (Event & {data: <Type>Data}) unusable. --default-non-nullable false: a field
// with a default stays optional (ObserveRequest.max_nodes must not become required).
func TSSchema(root, bundle string) ([]byte, error) {
	tools := filepath.Join(root, "tools")
	if err := EnsureTools(tools); err != nil {
		return nil, err
	}
	node := filepath.Join(tools, "node_modules", "node", "bin", "node")
	cli := filepath.Join(tools, "node_modules", "openapi-typescript", "bin", "cli.js")
	absCLI, err := filepath.Abs(cli)
	if err != nil {
		return nil, err
	}
	absNode, err := filepath.Abs(node)
	if err != nil {
		return nil, err
	}
	var pkg struct{ Version string }
	raw, err := os.ReadFile(filepath.Join(tools, "node_modules", "openapi-typescript", "package.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &pkg); err != nil {
		return nil, err
	}
	// Run next to the bundle so that no redocly.yaml of the caller's directory is picked up.
	cmd := exec.Command(absNode, absCLI, filepath.Base(bundle), "--empty-objects-unknown", "--default-non-nullable", "false")
	cmd.Dir = filepath.Join(root, filepath.Dir(bundle))
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0", "NODE_DISABLE_COMPILE_CACHE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("openapi-typescript: %w\n%s", err, stderr.String())
	}
	body, err := documentTSExports(stdout.String())
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "// %s\n// Source: server/internal/apigen/openapi.gen.json by openapi-typescript %s --empty-objects-unknown --default-non-nullable false.\n\n", apimodel.Header, pkg.Version)
	out.WriteString(body)
	return out.Bytes(), nil
}

// tsExportDocs are the TSDoc comments of the top-level exports openapi-typescript writes without
// one (the SDK's docs check, sdk-ts/test/docs.check.mjs, requires a comment on every export).
var tsExportDocs = []struct{ decl, doc string }{
	{"export interface paths {", "The routes of the BAP API, by path template: each method's operation (see `operations`)."},
	{"export type webhooks = ", "Webhooks of the API: none."},
	{"export interface components {", "The reusable parts of the OpenAPI document; `components[\"schemas\"]` holds the wire types."},
	{"export type $defs = ", "JSON Schema `$defs` of the document: none."},
	{"export interface operations {", "Every operation by operationId: its parameters, request body and answers."},
}

// documentTSExports puts a TSDoc comment before each declaration of tsExportDocs. It fails when
// one is missing, so that an upgrade of openapi-typescript that renames one is noticed.
func documentTSExports(src string) (string, error) {
	for _, e := range tsExportDocs {
		at := strings.Index(src, "\n"+e.decl)
		if at < 0 {
			return "", fmt.Errorf("openapi-typescript output: no %q to document", e.decl)
		}
		src = src[:at+1] + "/** " + e.doc + " */\n" + src[at+1:]
	}
	return src, nil
}

// EnsureTools runs `npm ci` in tools/ when tools/node_modules is missing or was installed from
// another package.json / package-lock.json, exactly as scripts/lint-spec.sh does (same stamp
// file, --ignore-scripts, then `npm rebuild node` for the pinned Node binary).
func EnsureTools(tools string) error {
	node := filepath.Join(tools, "node_modules", "node", "bin", "node")
	stamp := filepath.Join(tools, "node_modules", ".bap-tools.sha256")
	pj, err := os.ReadFile(filepath.Join(tools, "package.json"))
	if err != nil {
		return err
	}
	lock, err := os.ReadFile(filepath.Join(tools, "package-lock.json"))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(append(pj, lock...))
	want := hex.EncodeToString(sum[:])
	if st, err := os.Stat(node); err == nil && st.Mode()&0o111 != 0 {
		if got, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(got)) == want {
			return nil
		}
	}
	fmt.Fprintln(os.Stderr, "bapgen: installing pinned tools (npm ci --prefix tools)")
	env := append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
	for _, args := range [][]string{
		{"ci", "--prefix", tools, "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"},
		{"rebuild", "--prefix", tools, "--foreground-scripts", "--loglevel=error", "node"},
	} {
		cmd := exec.Command("npm", args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("npm %s: %w", args[0], err)
		}
	}
	if _, err := os.Stat(node); err != nil {
		return fmt.Errorf("%s missing after npm ci", node)
	}
	return os.WriteFile(stamp, []byte(want+"\n"), 0o644)
}
