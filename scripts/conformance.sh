#!/usr/bin/env bash
# Runs the conformance fixtures (conformance/scenarios/*.json) through every SDK runner (Go, TS,
# Python) against ONE live `bap serve` on a fresh data dir, then fails unless every runner passed
# every step and all result files are byte-identical. See conformance/README.md.
#   scripts/conformance.sh [OUTDIR]   (default: a temporary directory, removed on success)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$SECONDS
tools="$root/tools"
modules="$tools/node_modules"
node="$modules/node/bin/node"
stamp="$modules/.bap-tools.sha256"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export NODE_DISABLE_COMPILE_CACHE=1 PYTHONDONTWRITEBYTECODE=1

work="$(mktemp -d /tmp/bap-conformance.XXXXXX)"
chmod 0755 "$work" # as root, embedded PostgreSQL runs as postgres and must traverse the data dir
out="${1:-$work/results}"
pid=""
ok=0
keep_out=$(( $# >= 1 ))
cleanup() {
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	# Only after the server (and its PostgreSQL) stopped; keep everything on failure or with KEEP=1.
	if [[ $ok == 1 && -z "${KEEP:-}" ]]; then
		if [[ $keep_out == 1 ]]; then rm -rf "$work"/{data,bin,serve.log}; else rm -rf "$work"; fi
	fi
}
trap cleanup EXIT

echo "== conformance: build"
go build -o bin/bap ./server/cmd/bap
mkdir -p "$work/bin"
go build -o "$work/bin/runner_go" ./conformance/runner_go

want="$(cat "$tools/package.json" "$tools/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$node" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
	echo "conformance: installing pinned tools (npm ci --prefix tools)" >&2
	npm ci --prefix "$tools" --ignore-scripts --no-audit --no-fund --loglevel=error
	npm rebuild --prefix "$tools" --foreground-scripts --loglevel=error node
	echo "$want" >"$stamp"
fi
"$node" "$modules/typescript/bin/tsc" -p sdk-ts/tsconfig.json

echo "== conformance: start bap serve"
mkdir -m 0755 "$work/data"
bin/bap serve --data-dir "$work/data" --listen 127.0.0.1:0 2>"$work/serve.log" &
pid=$!
listen=""
for _ in $(seq 600); do
	listen="$(grep -m1 '"msg":"ready"' "$work/serve.log" 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["listen"])' 2>/dev/null || true)"
	[[ -n "$listen" ]] && break
	kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; echo "conformance: bap serve exited" >&2; exit 1; }
	sleep 0.1
done
[[ -n "$listen" ]] || { tail -20 "$work/serve.log" >&2; echo "conformance: bap serve not ready after 60 s" >&2; exit 1; }
base="http://$listen"
echo "server: $base"

export CONFORMANCE_RUN="$(date +%s)-$$"
status=0
echo "== conformance: go"
"$work/bin/runner_go" --base-url "$base" --out "$out" --scenarios conformance/scenarios || status=1
echo "== conformance: ts (node $("$node" --version))"
"$node" conformance/runner_ts.mjs --base-url "$base" --out "$out" || status=1
echo "== conformance: py ($(python3 --version))"
python3 conformance/runner_py.py --base-url "$base" --out "$out" || status=1

echo "== conformance: compare result files"
for lang in go ts py; do
	[[ -f "$out/$lang.json" ]] || { echo "missing $out/$lang.json" >&2; status=1; }
done
for lang in ts py; do
	if [[ -f "$out/go.json" && -f "$out/$lang.json" ]] && ! cmp -s "$out/go.json" "$out/$lang.json"; then
		echo "conformance: $lang.json differs from go.json:" >&2
		diff -u "$out/go.json" "$out/$lang.json" >&2 || true
		status=1
	fi
done

if [[ $status -ne 0 ]]; then
	echo "conformance: FAILED (results in $out, server log $work/serve.log) after $((SECONDS - start)) s" >&2
	exit 1
fi
echo "conformance: OK — $(ls conformance/scenarios/*.json | wc -l) scenarios, go/ts/py results identical ($((SECONDS - start)) s)"
ok=1
