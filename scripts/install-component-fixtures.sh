#!/usr/bin/env bash
# install-component-fixtures.sh — install the pinned UI component libraries that the e2e
# real-component fixture pages load (server/internal/e2e/testdata/components: package.json and
# package-lock.json) into that directory's node_modules (not committed).
#
#   scripts/install-component-fixtures.sh          install when missing or stale
#   scripts/install-component-fixtures.sh --check  only report; exit 1 when missing or stale
#
# Idempotent and offline after the first run: `npm ci` runs only when node_modules lacks a stamp
# of package.json + package-lock.json matching the files (as scripts/node-tools.sh does for
# tools/). No package runs install scripts (--ignore-scripts): the libraries ship prebuilt browser
# bundles, and nothing downloads a browser. `make test-go` and `make bench` run this first; the
# e2e tests fail (they do not skip) when the stamp is missing.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/server/internal/e2e/testdata/components"
modules="$dir/node_modules"
stamp="$modules/.bap-components.sha256"

# The bundles the pages load: a package whose layout changed shows up here, not as a blank page.
bundles=(
	@shoelace-style/shoelace/cdn/shoelace.js
	@shoelace-style/shoelace/cdn/themes/light.css
	@ionic/core/dist/ionic/ionic.esm.js
	@ionic/core/css/ionic.bundle.css
	bootstrap/dist/css/bootstrap.min.css
	bootstrap/dist/js/bootstrap.bundle.min.js
	@material/web/all.js
	lit/index.js
	lit-html/lit-html.js
	lit-element/index.js
	@lit/reactive-element/reactive-element.js
	@lit/context/index.js
	tslib/tslib.es6.mjs
	@fluentui/web-components/dist/web-components-all.min.js
	@fluentui/tokens/lib/index.js
)

want="$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
	echo "install-component-fixtures.sh: $modules is missing or stale" >&2
	exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "install-component-fixtures.sh: needs npm (Node.js ≥ 20) to install $dir/package-lock.json" >&2
	exit 1
fi

export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
echo "install-component-fixtures.sh: installing the pinned component libraries (npm ci in ${dir#"$root"/})" >&2
# --engine-strict=false: @fluentui/web-components declares Node ^22 || ^24 for its build tools;
# the fixtures only serve its prebuilt bundle, so the Node that runs npm does not matter.
npm ci --prefix "$dir" --ignore-scripts --no-audit --no-fund --engine-strict=false --loglevel=error
for f in "${bundles[@]}"; do
	if [[ ! -f "$modules/$f" ]]; then
		echo "install-component-fixtures.sh: $modules/$f missing after npm ci" >&2
		exit 1
	fi
done
echo "$want" >"$stamp"
