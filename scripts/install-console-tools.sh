#!/usr/bin/env bash
# install-console-tools.sh — install the console's pinned npm tools (console/package.json and
# package-lock.json: esbuild, TypeScript, and for the console's browser tests playwright-core and
# axe-core) into console/node_modules (not committed).
#
#   scripts/install-console-tools.sh          install when missing or stale
#   scripts/install-console-tools.sh --check  only report; exit 1 when missing or stale
#
# Idempotent and offline after the first run: `npm ci` runs only when node_modules lacks a stamp
# of package.json + package-lock.json matching the files (as scripts/node-tools.sh does for
# tools/). No package runs install scripts (--ignore-scripts; esbuild's binary comes in its
# platform package) and no browser is downloaded: the tests drive the system Chromium.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/console"
modules="$dir/node_modules"
stamp="$modules/.bap-console.sha256"

want="$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
	echo "install-console-tools.sh: $modules is missing or stale" >&2
	exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "install-console-tools.sh: needs npm (Node.js ≥ 20) to install $dir/package-lock.json" >&2
	exit 1
fi

export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
echo "install-console-tools.sh: installing the console's pinned tools (npm ci in console/)" >&2
npm ci --prefix "$dir" --ignore-scripts --no-audit --no-fund --loglevel=error
for f in esbuild/lib/main.js typescript/bin/tsc playwright-core/index.js axe-core/axe.min.js; do
	[[ -f "$modules/$f" ]] || { echo "install-console-tools.sh: $modules/$f missing after npm ci" >&2; exit 1; }
done
echo "$want" >"$stamp"
