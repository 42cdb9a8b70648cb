#!/usr/bin/env bash
# Lints the BAP specification: spec/openapi.yaml with Redocly CLI and spec/asyncapi.yaml with
# the AsyncAPI CLI, both pinned in tools/package.json (+ tools/package-lock.json) and run on the
# Node 24 binary that the pinned `node` npm package provides. Installs the tools with `npm ci`
# only when tools/node_modules is missing or stale, so it works offline after the first run.
# Exits non-zero when either document has an error. Never prompts; sends no telemetry.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=node-tools.sh
source "$root/scripts/node-tools.sh"

ensure_node_tools lint-spec
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
