#!/usr/bin/env bash
# Tests the Python, TypeScript and Rust SDKs (sdk-go is tested by `go test ./...`):
#   - sdk-py: python3 -m unittest against a stdlib http.server fake (tests/test_docs.py: every
#     public name documented), and an offline `pip install --no-build-isolation` of ./sdk-py into
#     a temporary directory (without pip, a wheel built by its in-tree backend);
#   - sdk-ts: tsc (pinned in tools/package.json) builds sdk-ts/dist/ (not committed), type-checks
#     the test declarations, checks that every export has TSDoc (test/docs.check.mjs), then
#     `node --test` runs against a node:http fake on the pinned Node and, when it is another
#     major version >= 20, on the `node` of PATH too;
#   - sdk-rs: cargo test, the crate built with #![deny(missing_docs)].
# Installs the pinned tools with `npm ci` only when tools/node_modules is missing or stale (the
# same check and stamp as scripts/lint-spec.sh), so it works offline after the first run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=node-tools.sh
source "$root/scripts/node-tools.sh"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

ensure_node_tools test-sdks

cd "$root"
status=0

echo "== sdk-py: unittest ($(python3 --version))"
python3 -m unittest discover -s sdk-py/tests || status=1

echo "== sdk-py: offline install (pip install --no-build-isolation, else the build backend alone)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if python3 -m pip --version >/dev/null 2>&1; then
	install() { python3 -m pip install --quiet --no-index --no-build-isolation --no-deps --target "$tmp/site" ./sdk-py 2>"$tmp/log"; }
else
	# Debian without python3-pip: build the wheel with the in-tree backend and unpack it.
	install() {
		(cd sdk-py/_build && python3 -c 'import backend, sys; print(backend.build_wheel(sys.argv[1]))' "$tmp") >"$tmp/whl" 2>"$tmp/log" &&
			python3 -m zipfile -e "$tmp/$(cat "$tmp/whl")" "$tmp/site" 2>>"$tmp/log"
	}
fi
if install && (cd "$tmp" && PYTHONPATH="$tmp/site" python3 -c 'import bap, sys; sys.exit(0 if len(bap.EVENT_TYPES) and bap.Client else 1)'); then
	echo "ok: installed and imported"
else
	grep -v "Running pip as the 'root' user" "$tmp/log" >&2 || true
	echo "sdk-py: install failed" >&2
	status=1
fi

echo "== sdk-ts: tsc $("$node" "$modules/typescript/bin/tsc" --version)"
rm -rf sdk-ts/dist
"$node" "$modules/typescript/bin/tsc" -p sdk-ts/tsconfig.json || status=1
"$node" "$modules/typescript/bin/tsc" -p sdk-ts/test/tsconfig.json || status=1

echo "== sdk-ts: TSDoc on every export (sdk-ts/test/docs.check.mjs)"
"$node" sdk-ts/test/docs.check.mjs "$modules" || status=1

echo "== sdk-ts: node --test (node $("$node" --version))"
"$node" --test sdk-ts/test/client.test.mjs sdk-ts/test/subscribe.test.mjs sdk-ts/test/credentials.test.mjs || status=1
if command -v node >/dev/null; then
	sys_major="$(node -p 'process.versions.node.split(".")[0]')"
	pinned_major="$("$node" -p 'process.versions.node.split(".")[0]')"
	if [[ "$sys_major" != "$pinned_major" && "$sys_major" -ge 20 ]]; then
		echo "== sdk-ts: node --test (node $(node --version) from PATH)"
		node --test sdk-ts/test/client.test.mjs sdk-ts/test/subscribe.test.mjs sdk-ts/test/credentials.test.mjs || status=1
	fi
fi

# sdk-rs: Debian's cargo and rustc (`make deps`; rustc 1.63), offline from /usr/share/cargo/registry
# (sdk-rs/.cargo/config.toml): unit tests against a loopback fake, doc examples compiled.
echo "== sdk-rs: cargo test ($(/usr/bin/rustc --version))"
(cd sdk-rs && env PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc /usr/bin/cargo test --quiet) || status=1

if [[ $status -ne 0 ]]; then
	echo "test-sdks: FAILED" >&2
else
	echo "test-sdks: OK"
fi
exit $status
