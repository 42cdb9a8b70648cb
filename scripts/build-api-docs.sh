#!/usr/bin/env bash
# Builds docs/api.html, the API reference, from spec/openapi.yaml with `redocly build-docs` (Redocly
# CLI pinned in tools/package.json, on the pinned Node 24). The Redoc bundle is inlined, so the page
# works offline; the output depends only on the spec and the pinned tools (no date, no host name),
# which keeps scripts/check-generated.sh stable. Part of `make generate`. Installs the tools with
# `npm ci` only when tools/node_modules is missing or stale (the same check and stamp as
# scripts/lint-spec.sh). Never prompts; sends no telemetry.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/tools"
modules="$tools/node_modules"
node="$modules/node/bin/node"
stamp="$modules/.bap-tools.sha256"

export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export SCARF_ANALYTICS=false REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
export NODE_DISABLE_COMPILE_CACHE=1

want="$(cat "$tools/package.json" "$tools/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$node" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
	echo "build-api-docs: installing pinned tools (npm ci --prefix tools)" >&2
	npm ci --prefix "$tools" --ignore-scripts --no-audit --no-fund --loglevel=error
	npm rebuild --prefix "$tools" --foreground-scripts --loglevel=error node
	[[ -x "$node" ]] || { echo "build-api-docs: $node missing after npm ci" >&2; exit 1; }
	echo "$want" >"$stamp"
fi

cd "$root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$node" "$modules/.bin/redocly" build-docs spec/openapi.yaml --config tools/redocly.yaml --inlineBundle \
	--title "BAP 1.0 API reference" -o "$tmp/api.html" </dev/null >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
# Only replace the file when it changed (keeps its mtime for make and editors).
if ! cmp -s "$tmp/api.html" docs/api.html; then
	cp "$tmp/api.html" docs/api.html
fi
