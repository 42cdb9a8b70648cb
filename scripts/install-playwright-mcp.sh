#!/usr/bin/env bash
# install-playwright-mcp.sh — install the pinned Playwright MCP server (@playwright/mcp, exact
# version in server/internal/e2e/testdata/playwright-mcp/package.json, its playwright and
# playwright-core pinned by package-lock.json) into that directory's node_modules (not committed).
# BenchmarkComponentScores (server/internal/e2e/components_bench_test.go) runs it beside BAP on the
# real-component fixture tasks; scripts/bench.sh runs this first.
#
#   scripts/install-playwright-mcp.sh          install when missing or stale
#   scripts/install-playwright-mcp.sh --check  only report; exit 1 when missing or stale
#
# Idempotent and offline after the first run: `npm ci` runs only when node_modules lacks a stamp
# of package.json + package-lock.json matching the files (as scripts/node-tools.sh does for
# tools/). No package runs install scripts (--ignore-scripts) and no browser is downloaded
# (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 as well): the benchmark starts the server on the system
# Chromium with --executable-path.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/server/internal/e2e/testdata/playwright-mcp"
modules="$dir/node_modules"
stamp="$modules/.bap-playwright-mcp.sha256"
cli="$modules/@playwright/mcp/cli.js"

want="$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -f "$cli" ]]; then
	exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
	echo "install-playwright-mcp.sh: $modules is missing or stale" >&2
	exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "install-playwright-mcp.sh: needs npm (Node.js ≥ 20) to install $dir/package-lock.json" >&2
	exit 1
fi

export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
echo "install-playwright-mcp.sh: installing the pinned Playwright MCP server (npm ci in ${dir#"$root"/})" >&2
npm ci --prefix "$dir" --ignore-scripts --no-audit --no-fund --loglevel=error
[[ -f "$cli" ]] || {
	echo "install-playwright-mcp.sh: $cli missing after npm ci" >&2
	exit 1
}
echo "$want" >"$stamp"
