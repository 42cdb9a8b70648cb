#!/usr/bin/env bash
# Runs the conformance fixtures (conformance/scenarios/*.json) through every runner (the Go, TS,
# Python and Rust SDKs, and MCP through the official Go MCP client) against a live `bap serve` on a
# fresh data dir, with the fixture pages (conformance/pages/) served on 127.0.0.1: every scenario on
# Chromium, then the browser scenarios again against a server whose engine is Firefox. Fails unless
# every runner passed every step — except the known failures conformance/baseline lists, which must
# still fail — all result files of an engine are byte-identical, and Firefox's results equal
# Chromium's except the engine gaps conformance/baseline-firefox lists (conformance/compare.py).
# See conformance/README.md.
#   scripts/conformance.sh [OUTDIR]   (default: a temporary directory, removed on success)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$SECONDS
# shellcheck source=node-tools.sh
source "$root/scripts/node-tools.sh"
export PYTHONDONTWRITEBYTECODE=1

work="$(mktemp -d /tmp/bap-conformance.XXXXXX)"
chmod 0755 "$work" # as root, embedded PostgreSQL runs as postgres and must traverse the data dir
out="${1:-$work/results}"
pid=""
pages_pid=""
ok=0
keep_out=$(( $# >= 1 ))
cleanup() {
	if [[ -n "$pages_pid" ]]; then kill "$pages_pid" 2>/dev/null || true; fi
	if [[ -n "$pid" ]]; then stop_serve; fi
	# Only after the server (and its PostgreSQL) stopped; keep everything on failure or with KEEP=1.
	if [[ $ok == 1 && -z "${KEEP:-}" ]]; then
		if [[ $keep_out == 1 ]]; then rm -rf "$work"/{data-*,bin,serve-*.log,pages.log,scenarios-browser}; else rm -rf "$work"; fi
	fi
}
trap cleanup EXIT

echo "== conformance: build"
go build -o bin/bap ./server/cmd/bap
mkdir -p "$work/bin"
go build -o "$work/bin/runner_go" ./conformance/runner_go
go build -o "$work/bin/runner_mcp" ./conformance/runner_mcp
# The Rust runner, with Debian's cargo and rustc (`make deps`), offline from /usr/share/cargo/registry.
(cd conformance/runner_rs && env PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc /usr/bin/cargo build --quiet)
cp conformance/runner_rs/target/debug/runner_rs "$work/bin/runner_rs"

ensure_node_tools conformance
"$node" "$modules/typescript/bin/tsc" -p sdk-ts/tsconfig.json

# start_serve ENGINES: starts `bap serve --engines ENGINES` on a fresh data dir of its own
# ($work/data-<first engine>: the runners' idempotency keys repeat across passes) and sets pid,
# base and CONFORMANCE_SOCKET.
start_serve() {
	local engines="$1" data="$work/data-${1%%,*}" log="$work/serve-${1%%,*}.log" listen=""
	mkdir -m 0755 "$data"
	bin/bap serve --data-dir "$data" --listen 127.0.0.1:0 --engines "$engines" 2>"$log" &
	pid=$!
	for _ in $(seq 600); do
		listen="$(grep -m1 '"msg":"ready"' "$log" 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["listen"])' 2>/dev/null || true)"
		[[ -n "$listen" ]] && break
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "conformance: bap serve exited" >&2; exit 1; }
		sleep 0.1
	done
	[[ -n "$listen" ]] || { tail -20 "$log" >&2; echo "conformance: bap serve not ready after 60 s" >&2; exit 1; }
	base="http://$listen"
	export CONFORMANCE_SOCKET="$data/bap.sock"
	echo "server: $base (--engines $engines)"
}
stop_serve() { # also the EXIT trap's
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
	pid=""
}

# The fixture pages the browser scenarios visit (their ${PAGES} is this origin).
python3 -u conformance/pages_server.py 0 >"$work/pages.log" 2>&1 &
pages_pid=$!
pages_port=""
for _ in $(seq 100); do
	pages_port="$(sed -n 's/^Serving HTTP on 127\.0\.0\.1 port \([0-9]*\).*/\1/p' "$work/pages.log" | head -1)"
	[[ -n "$pages_port" ]] && break
	kill -0 "$pages_pid" 2>/dev/null || { cat "$work/pages.log" >&2; echo "conformance: the pages server exited" >&2; exit 1; }
	sleep 0.1
done
[[ -n "$pages_port" ]] || { echo "conformance: the pages server did not start" >&2; exit 1; }
export CONFORMANCE_PAGES="http://127.0.0.1:$pages_port"
echo "pages: $CONFORMANCE_PAGES"

export CONFORMANCE_RUN="$(date +%s)-$$"
# Steps marked "as": "operator" are the local operator's: every runner takes them with
# `bap approvals` over the server's Unix socket (the runners' own clients are the local agent).
export CONFORMANCE_BAP="$root/bin/bap"
runners=(go ts py mcp rs)
# run_runners OUTDIR SCENARIOS: every runner, in turn, against $base. A runner exits 1 when a step
# fails; conformance/compare.py judges the result files, so the exit statuses are only reported.
run_runners() {
	local dir="$1" scenarios="$2"
	echo "== conformance: go"
	"$work/bin/runner_go" --base-url "$base" --out "$dir" --scenarios "$scenarios" || echo "(runner_go: failed steps)"
	echo "== conformance: ts (node $("$node" --version))"
	"$node" conformance/runner_ts.mjs --base-url "$base" --out "$dir" --scenarios "$scenarios" || echo "(runner_ts: failed steps)"
	echo "== conformance: py ($(python3 --version))"
	python3 conformance/runner_py.py --base-url "$base" --out "$dir" --scenarios "$scenarios" || echo "(runner_py: failed steps)"
	echo "== conformance: mcp (official Go MCP client, /mcp)"
	"$work/bin/runner_mcp" --base-url "$base" --out "$dir" --scenarios "$scenarios" || echo "(runner_mcp: failed steps)"
	echo "== conformance: rs ($(/usr/bin/rustc --version))"
	"$work/bin/runner_rs" --base-url "$base" --out "$dir" --scenarios "$scenarios" || echo "(runner_rs: failed steps)"
}

# Pass 1, Chromium: every scenario. Pass 2, Firefox: the browser scenarios (those that open a
# browser session) against a server whose only, hence default, engine is Firefox — the others
# never reach a browser, so running them twice would prove nothing.
echo "== conformance: chromium (all scenarios)"
pass_start=$SECONDS
start_serve chromium
run_runners "$out" "$root/conformance/scenarios"
stop_serve
chromium_s=$((SECONDS - pass_start))

browser_scenarios="$work/scenarios-browser"
mkdir "$browser_scenarios"
for f in conformance/scenarios/*.json; do
	if grep -q '"op": *"create_browser_session"' "$f"; then cp "$f" "$browser_scenarios/"; fi
done
echo "== conformance: firefox ($(ls "$browser_scenarios" | wc -l) browser scenarios)"
pass_start=$SECONDS
start_serve firefox
run_runners "$out/firefox" "$browser_scenarios"
stop_serve
firefox_s=$((SECONDS - pass_start))

echo "== conformance: compare result files (baselines: conformance/baseline, conformance/baseline-firefox)"
status=0
if ! python3 conformance/compare.py --baseline conformance/baseline \
	--engine "firefox=$out/firefox" --engine-baseline "firefox=conformance/baseline-firefox" "$out" "${runners[@]}"; then
	status=1
	for dir in "$out" "$out/firefox"; do
		for lang in "${runners[@]:1}"; do
			if [[ -f "$dir/go.json" && -f "$dir/$lang.json" ]] && ! cmp -s "$dir/go.json" "$dir/$lang.json"; then
				echo "conformance: $dir/$lang.json differs from go.json:" >&2
				diff -u "$dir/go.json" "$dir/$lang.json" >&2 || true
			fi
		done
	done
fi

if [[ $status -ne 0 ]]; then
	echo "conformance: FAILED (results in $out, server logs $work/serve-*.log) after $((SECONDS - start)) s" >&2
	exit 1
fi
echo "conformance: OK — $(ls conformance/scenarios/*.json | wc -l) scenarios on chromium and $(ls "$browser_scenarios" | wc -l) on firefox, ${runners[*]} results identical ($((SECONDS - start)) s: chromium pass ${chromium_s} s, firefox pass ${firefox_s} s)"
ok=1
