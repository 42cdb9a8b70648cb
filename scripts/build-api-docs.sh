#!/usr/bin/env bash
# Builds docs/api.html, the API reference, from spec/openapi.yaml with `redocly build-docs` (Redocly
# CLI pinned in tools/package.json, on the pinned Node 24). The Redoc bundle is inlined, so the page
# works offline; the output depends only on the spec and the pinned tools (no date, no host name),
# which keeps scripts/check-generated.sh stable. Part of `make generate`. Installs the tools with
# `npm ci` only when tools/node_modules is missing or stale (the same check and stamp as
# scripts/lint-spec.sh). Never prompts; sends no telemetry.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=node-tools.sh
source "$root/scripts/node-tools.sh"


ensure_node_tools build-api-docs

cd "$root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$node" "$modules/.bin/redocly" build-docs spec/openapi.yaml --config tools/redocly.yaml --inlineBundle \
	--title "BAP 1.0 API reference" -o "$tmp/api.html" </dev/null >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
# Only replace the file when it changed (keeps its mtime for make and editors).
if ! cmp -s "$tmp/api.html" docs/api.html; then
	cp "$tmp/api.html" docs/api.html
fi
