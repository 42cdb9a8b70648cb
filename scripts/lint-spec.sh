#!/usr/bin/env bash
# Lints the BAP specification: spec/openapi.yaml with Redocly CLI and spec/asyncapi.yaml with
# the AsyncAPI CLI, both pinned in tools/package.json (+ tools/package-lock.json) and run on the
# Node 24 binary that the pinned `node` npm package provides. Installs the tools with `npm ci`
# only when tools/node_modules is missing or stale, so it works offline after the first run.
# Exits non-zero when either document has an error. Never prompts; sends no telemetry.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/tools"
modules="$tools/node_modules"
node="$modules/node/bin/node"
stamp="$modules/.bap-tools.sha256"

# No telemetry, update checks or prompts from npm, Redocly, AsyncAPI or install scripts.
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export SCARF_ANALYTICS=false
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
export ASYNCAPI_SKIP_NEW_VERSION_CHECK=true
export NODE_DISABLE_COMPILE_CACHE=1

want="$(cat "$tools/package.json" "$tools/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$node" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
	echo "lint-spec: installing pinned tools (npm ci --prefix tools)" >&2
	# --ignore-scripts: no package may run install scripts (they would edit shell rc files or
	# phone home) except `node`, whose preinstall fetches the platform binary; rebuild runs it alone.
	npm ci --prefix "$tools" --ignore-scripts --no-audit --no-fund --loglevel=error
	npm rebuild --prefix "$tools" --foreground-scripts --loglevel=error node
	[[ -x "$node" ]] || { echo "lint-spec: $node missing after npm ci" >&2; exit 1; }
	echo "$want" >"$stamp"
fi
export PATH="$modules/node/bin:$PATH"

# The AsyncAPI CLI records usage unless its analytics file says no; keep that file in
# node_modules instead of the home directory. Its bundled config dir silences node-config.
analytics="$modules/.asyncapi-analytics.json"
[[ -f "$analytics" ]] || echo '{"analyticsEnabled":"false","infoMessageShown":"true","userID":"none"}' >"$analytics"
export ASYNCAPI_METRICS_CONFIG_PATH="$analytics"
export NODE_CONFIG_DIR="$modules/@asyncapi/cli/lib/apps/api/configs" SUPPRESS_NO_CONFIG_WARNING=true

cd "$root"
status=0
echo "== redocly lint spec/openapi.yaml ($("$node" "$modules/.bin/redocly" --version))"
"$node" "$modules/.bin/redocly" lint --config tools/redocly.yaml spec/openapi.yaml </dev/null || status=1
echo "== asyncapi validate spec/asyncapi.yaml ($("$node" "$modules/.bin/asyncapi" --version </dev/null | head -n1))"
"$node" "$modules/.bin/asyncapi" validate spec/asyncapi.yaml --fail-severity error </dev/null || status=1
if [[ $status -ne 0 ]]; then
	echo "lint-spec: FAILED" >&2
else
	echo "lint-spec: OK"
fi
exit $status
