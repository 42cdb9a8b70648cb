#!/usr/bin/env bash
# bench.sh — `make bench`: create_task over HTTP beside pgbench on the same PostgreSQL, in one run.
#
#   scripts/bench.sh                       the standard run (about 3 minutes)
#   BENCH_EXPERIMENTS=1 scripts/bench.sh   also the diagnostic runs (about 3 more minutes)
#
# It starts one private PostgreSQL by starting `bin/bap serve` on a fresh data dir (the embedded cluster
# with its normal, durable settings: fsync and synchronous_commit on), then:
#   1. pgbench -i -s $BENCH_SCALE into a separate database `pgbench` on that cluster;
#   2. pgbench -c $BENCH_CLIENTS -j 2 -T $BENCH_DURATION -M prepared (the TPC-B-like default script) → tps;
#   3. bapbench -op create_task for $BENCH_COLD seconds on the fresh, never analysed tables (the cold
#      start, reported apart), then VACUUM ANALYZE (as pgbench -i does for its tables), then
#      bapbench -op create_task -clients $BENCH_CLIENTS -duration $BENCH_DURATION → rps, p50/p90/p99;
#   4. prints bap_rps / pgbench_tps and whether the goals hold (ratio ≥ 0.40, p99 < 50 ms);
#   5. stops the server (SIGTERM; it stops its cluster) and runs the Go micro-benchmarks
#      (go test -bench in the packages of server/internal that have any);
#   6. the component scores: every real-component fixture task (server/internal/e2e/testdata/
#      components/tasks.json) through BAP and through Playwright MCP (pinned in
#      server/internal/e2e/testdata/playwright-mcp, on the system Chromium), passes per library side
#      by side (BenchmarkComponentScores; about 15 minutes on 2 CPUs);
#   8. before 6, the heavy-page observe through BAP's HTTP API beside Playwright MCP's
#      browser_snapshot (BenchmarkHeavyObserve, server/internal/e2e): bytes, p50 and handles;
#   7. between 5 and 6, the engines: the warm workflow and a heavy-page observe through the engine
#      port on Chromium/CDP and Firefox/BiDi beside raw chromedp, interleaved, and the memory of an
#      extra session on each (BenchmarkEngine*, server/internal/daemon); Firefox/BiDi as a ratio to
#      Chromium/CDP, goal ≤ 1.5 for the workflow (about 5 minutes).
# A CHECKPOINT precedes every measured phase. During each phase the CPU time of PostgreSQL (all its
# processes), of bap serve, of the load generator and of everything else on the machine is sampled from
# /proc: the CPU cost per operation is the figure that other work on a shared machine disturbs least,
# and the "other" share says how much such work there was.
#
# With BENCH_EXPERIMENTS=1 it adds, on the same cluster: create_task at 1, 2, 4, 8 and 32 clients; GET
# /healthz (the HTTP stack without the database); pgbench and create_task with synchronous_commit=off; and
# last, create_task after dropping the foreign keys and the regular-expression CHECKs of the bap database
# (what the integrity constraints cost; the cluster is thrown away afterwards).
#
# It reports; it does not fail when a goal is missed (a benchmark is not a test). It exits non-zero
# only when something could not run. Raw results go to bench-results/<timestamp>.json (and
# <timestamp>-go.txt for the Go benchmarks, <timestamp>-components.json and -components.txt for the
# component scores).
#
# Knobs (environment): BENCH_CLIENTS (16), BENCH_DURATION seconds (20), BENCH_WARMUP seconds (3),
# BENCH_SCALE (16), BENCH_COLD seconds of the cold-start phase (10), BENCH_ROUNDS (3) interleaved
# rounds of pgbench then create_task, whose median ratio and spread are the verdict, BENCH_GO=0 skips the Go
# benchmarks, BENCH_WIRE=0 skips the count of round trips, statements and rows per command,
# BENCH_STREAMS=0 skips the event-delivery runs (BENCH_STREAM_DURATION, 10 s each),
# BENCH_BROWSER_ITERS (20) and BENCH_BROWSER_COUNT (3) size the browser workflow's runs beside raw
# chromedp (with the Go benchmarks; BENCH_GO=0 skips both),
# BENCH_EXPERIMENTS=1 adds the diagnostic runs, BENCH_ENGINES=0 skips the engine comparison
# (BENCH_ENGINE_ITERS iterations, 10), BENCH_HEAVY=0 skips the heavy-page observe beside Playwright
# MCP (BENCH_HEAVY_ITERS iterations, 20), BENCH_COMPONENTS=0 skips the component scores
# (BAP_COMPONENTS_PARALLEL tasks at a time, within GOMAXPROCS; BENCH_COMPONENTS_TASKS=<regexp> runs
# only the matching task ids), BENCH_BAP=<path> runs that bap binary instead of building bin/bap from
# the tree (to compare builds), GO (go).
#
# Works as root (the cluster then runs as `postgres`; root reaches its socket) and as a normal user.
set -euo pipefail
cd "$(dirname "$0")/.."

clients=${BENCH_CLIENTS:-16}
duration=${BENCH_DURATION:-20}
rounds=${BENCH_ROUNDS:-3}
warmup=${BENCH_WARMUP:-3}
scale=${BENCH_SCALE:-16}
cold=${BENCH_COLD:-10}
run_go=${BENCH_GO:-1}
run_components=${BENCH_COMPONENTS:-1}
run_engines=${BENCH_ENGINES:-1}
engine_iters=${BENCH_ENGINE_ITERS:-10}
run_heavy=${BENCH_HEAVY:-1}
browser_iters=${BENCH_BROWSER_ITERS:-20}
browser_count=${BENCH_BROWSER_COUNT:-3}
heavy_iters=${BENCH_HEAVY_ITERS:-20}
engine_ratio_goal=1.5
experiments=${BENCH_EXPERIMENTS:-0}
GO=${GO:-go}
ratio_goal=0.40
p99_goal_ms=50

# PG* variables would redirect psql and pgbench; BAP_DATABASE_URL would make the server skip the
# private cluster this run is about.
while IFS='=' read -r name _; do
	case $name in PG*) unset "$name" ;; esac
done < <(env)
unset BAP_DATABASE_URL

log() { printf 'bench: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

for tool in curl awk getconf; do
	command -v "$tool" >/dev/null || die "$tool not found (scripts/install-deps.sh installs it)"
done
[[ $duration -ge 5 && $cold -ge 1 ]] || die "BENCH_DURATION must be at least 5 seconds and BENCH_COLD at least 1"

stamp=$(date -u +%Y%m%dT%H%M%SZ)
results_dir=bench-results
mkdir -p "$results_dir"
out_json="$results_dir/$stamp.json"
out_go="$results_dir/$stamp-go.txt"
out_components="$results_dir/$stamp-components.json"
out_components_txt="$results_dir/$stamp-components.txt"
out_engines="$results_dir/$stamp-engines.json"
out_heavy="$results_dir/$stamp-heavy.json"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bap-bench.XXXXXX")
# As root the cluster runs as `postgres`, which must be able to enter the directory.
chmod 0711 "$tmp"
data="$tmp/data"
pidfile="$data/pgdata/postmaster.pid"
server_log="$tmp/server.log"
server_pid=""
gen_pid=""

# stop_server stops the server with SIGTERM (it stops its cluster) and makes sure no postmaster is
# left behind even if the server died or hung.
stop_server() {
	if [[ -n $server_pid ]]; then
		if kill -0 "$server_pid" 2>/dev/null; then
			kill -TERM "$server_pid" 2>/dev/null || true
			for _ in $(seq 1 600); do
				kill -0 "$server_pid" 2>/dev/null || break
				sleep 0.1
			done
			if kill -0 "$server_pid" 2>/dev/null; then
				log "server did not stop within 60 s; killing it"
				kill -KILL "$server_pid" 2>/dev/null || true
			fi
		fi
		wait "$server_pid" 2>/dev/null || true
		server_pid=""
	fi
	local pm
	if [[ -f $pidfile ]]; then
		pm=$(head -n 1 "$pidfile" 2>/dev/null || true)
		if [[ $pm =~ ^[0-9]+$ ]] && kill -0 "$pm" 2>/dev/null; then
			log "PostgreSQL (PID $pm) still runs; fast shutdown"
			kill -INT "$pm" 2>/dev/null || true
			for _ in $(seq 1 600); do
				kill -0 "$pm" 2>/dev/null || break
				sleep 0.1
			done
		fi
	fi
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $gen_pid ]]; then
		kill -TERM "$gen_pid" 2>/dev/null || true
		wait "$gen_pid" 2>/dev/null || true
	fi
	stop_server
	if [[ $rc -ne 0 && -f $server_log ]]; then
		log "server log (last lines):"
		tail -n 20 "$server_log" >&2 || true
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bap=${BENCH_BAP:-}
if [[ -z $bap ]]; then
	log "building bin/bap and bin/bapbench"
	"$GO" build -o bin/bap ./server/cmd/bap
	bap=bin/bap
else
	log "building bin/bapbench; the server is $bap (BENCH_BAP)"
fi
"$GO" build -o bin/bapbench ./server/cmd/bapbench
bap_version=$("$bap" version)

log "starting bap serve on a fresh data dir (embedded PostgreSQL)"
"$bap" serve --data-dir "$data" --listen 127.0.0.1:0 --socket "$tmp/bap.sock" >"$server_log" 2>&1 &
server_pid=$!

listen=""
for _ in $(seq 1 1200); do
	kill -0 "$server_pid" 2>/dev/null || die "bap serve exited during start-up"
	listen=$(grep -o '"msg":"ready","listen":"[^"]*"' "$server_log" 2>/dev/null | head -n 1 | sed 's/.*"listen":"//; s/"$//' || true)
	if [[ -n $listen ]] && curl -fsS -o /dev/null "http://$listen/readyz" 2>/dev/null; then
		break
	fi
	listen=""
	sleep 0.1
done
[[ -n $listen ]] || die "bap serve was not ready within 120 s"
base_url="http://$listen"
log "server ready at $base_url"

# The cluster's postmaster, socket directory and port, as it recorded them (lines 1, 4 and 5).
pg_pm=$(sed -n 1p "$pidfile")
pg_port=$(sed -n 4p "$pidfile")
pg_sock=$(sed -n 5p "$pidfile")
pg_major=$(cat "$data/pgdata/PG_VERSION")
[[ -n $pg_port && -n $pg_sock ]] || die "cannot read the socket from $pidfile"

# The client programs of the cluster's major version (Debian: postgresql-client-N, postgresql-contrib).
find_pg_tool() {
	local dir=/usr/lib/postgresql/$pg_major/bin p
	if [[ -x $dir/$1 ]]; then
		echo "$dir/$1"
		return 0
	fi
	if command -v "$1" >/dev/null; then
		command -v "$1"
		return 0
	fi
	for p in /usr/lib/postgresql/*/bin/"$1"; do
		[[ -x $p ]] && echo "$p" && return 0
	done
	return 1
}
psql=$(find_pg_tool psql) || die "psql not found (install postgresql-client)"
pgbench=$(find_pg_tool pgbench) || die "pgbench not found (install postgresql-contrib: scripts/install-deps.sh)"

pg=(-h "$pg_sock" -p "$pg_port" -U bap)
sql() { "$psql" "${pg[@]}" -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }

pg_version=$(sql bap 'SHOW server_version')
pg_settings=$(sql bap "SELECT json_object_agg(name, current_setting(name) ORDER BY name) FROM pg_settings
	WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method', 'shared_buffers',
	               'max_connections', 'commit_delay', 'max_wal_size', 'checkpoint_timeout')")
log "PostgreSQL $pg_version on $pg_sock: $pg_settings"

# ---- CPU accounting ----------------------------------------------------------------------------

clk_tck=$(getconf CLK_TCK)

# cpu_snap GEN prints, in clock ticks: PostgreSQL (the postmaster with its exited children, and its live
# children), bap serve, process GEN, the machine's busy time and its total time.
cpu_snap() {
	local gen=$1 st line pid rest pgt=0 srv=0 g=0 f u n s i w q sq steal
	for st in /proc/[0-9]*/stat; do
		{ read -r line <"$st"; } 2>/dev/null || continue
		pid=${line%% *}
		rest=${line##*) }
		read -ra f <<<"$rest"
		# f: 0 state, 1 ppid, 11 utime, 12 stime, 13 cutime, 14 cstime
		if [[ $pid == "$pg_pm" ]]; then
			pgt=$((pgt + f[11] + f[12] + f[13] + f[14]))
		elif [[ ${f[1]} == "$pg_pm" ]]; then
			pgt=$((pgt + f[11] + f[12]))
		elif [[ $pid == "$server_pid" ]]; then
			srv=$((f[11] + f[12]))
		elif [[ $pid == "$gen" ]]; then
			g=$((f[11] + f[12]))
		fi
	done
	read -r _ u n s i w q sq steal _ </proc/stat
	echo "$pgt $srv $g $((u + n + s + q + sq + steal)) $((u + n + s + i + w + q + sq + steal))"
}

# measure SKIP WINDOW OUT CMD... runs CMD in the background (stdout to OUT, stderr to OUT.err) and samples
# the CPU use from SKIP to SKIP+WINDOW seconds after its start, while it runs. It sets cpu_json (seconds
# of CPU by PostgreSQL, bap serve, the load generator and everything else, over the window).
measure() {
	local skip=$1 window=$2 out=$3 a b t0 t1
	shift 3
	"$@" >"$out" 2>"$out.err" &
	gen_pid=$!
	sleep "$skip"
	a=$(cpu_snap "$gen_pid")
	t0=$(date +%s.%N)
	sleep "$window"
	b=$(cpu_snap "$gen_pid")
	t1=$(date +%s.%N)
	if ! wait "$gen_pid"; then
		gen_pid=""
		cat "$out" "$out.err" >&2
		die "$(basename "$1") failed"
	fi
	gen_pid=""
	cpu_json=$(awk -v a="$a" -v b="$b" -v t0="$t0" -v t1="$t1" -v hz="$clk_tck" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		# A process that ended inside the window reads as 0 at its end: count none of it.
		pg = (y[1] - x[1]) / hz; srv = (y[2] - x[2]) / hz; gen = (y[3] - x[3]) / hz
		if (srv < 0) srv = 0; if (gen < 0) gen = 0
		busy = (y[4] - x[4]) / hz; total = (y[5] - x[5]) / hz
		other = busy - pg - srv - gen; if (other < 0) other = 0
		printf "{\"window_s\":%.2f,\"postgres_s\":%.2f,\"server_s\":%.2f,\"client_s\":%.2f,\"other_s\":%.2f,\"idle_s\":%.2f}",
			t1 - t0, pg, srv, gen, other, total - busy
	}')
}

# jget JSON KEY prints the number KEY of a flat JSON object.
jget() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" <<<"$1"; }

# per_op RATE CPU_JSON prints {"postgres_ms":…,"server_ms":…,"client_ms":…,"total_ms":…}: CPU per
# operation over the window, at RATE operations per second.
per_op() {
	awk -v r="$1" -v w="$(jget "$2" window_s)" -v pg="$(jget "$2" postgres_s)" -v srv="$(jget "$2" server_s)" \
		-v gen="$(jget "$2" client_s)" 'BEGIN {
		n = r * w; if (n <= 0) n = 1
		printf "{\"postgres_ms\":%.3f,\"server_ms\":%.3f,\"client_ms\":%.3f,\"total_ms\":%.3f}",
			1000 * pg / n, 1000 * srv / n, 1000 * gen / n, 1000 * (pg + srv + gen) / n
	}'
}

# cpu_of LINE prints the "cpu" object of a result line.
cpu_of() { sed -n 's/.*"cpu":\({[^}]*}\).*/\1/p' <<<"$1"; }

# other_pct CPU_JSON prints the share of the machine that other processes used over the window.
other_pct() {
	awk -v o="$(jget "$1" other_s)" -v w="$(jget "$1" window_s)" -v c="$(getconf _NPROCESSORS_ONLN)" \
		'BEGIN { printf "%.0f", (w > 0 && c > 0) ? 100 * o / (w * c) : 0 }'
}

# ---- the two measured phases -------------------------------------------------------------------

# run_pgbench SECONDS sets pgb_tps, pgb_lat (average latency, ms) and pgb_json.
run_pgbench() {
	sql bap 'CHECKPOINT' >/dev/null
	local skip=1 window=$(($1 - 2))
	measure "$skip" "$window" "$tmp/pgbench.txt" \
		"$pgbench" "${pg[@]}" -c "$clients" -j 2 -T "$1" -M prepared -P 5 pgbench
	pgb_tps=$(awk '/^tps = / { print $3; exit }' "$tmp/pgbench.txt")
	pgb_lat=$(awk '/^latency average = / { print $4; exit }' "$tmp/pgbench.txt")
	[[ -n $pgb_tps ]] || {
		cat "$tmp/pgbench.txt" "$tmp/pgbench.txt.err" >&2
		die "no tps in pgbench's output"
	}
	pgb_lat=${pgb_lat:-0}
	pgb_json="{\"clients\":$clients,\"threads\":2,\"duration_s\":$1,\"scale\":$scale,\"mode\":\"prepared\",\"tps\":$pgb_tps,\"latency_avg_ms\":$pgb_lat,\"cpu\":$cpu_json,\"cpu_per_op\":$(per_op "$pgb_tps" "$cpu_json")}"
}

# run_bapbench OP CLIENTS SECONDS sets bap_json: the bapbench line plus the CPU figures.
run_bapbench() {
	sql bap 'CHECKPOINT' >/dev/null
	# Sample inside the measured window, clear of its edges: bapbench exits right at its end.
	measure "$(awk -v w="$warmup" 'BEGIN { print w + 0.25 }')" "$(awk -v d="$3" 'BEGIN { print d - 0.75 }')" "$tmp/bapbench.json" \
		bin/bapbench -url "$base_url" -op "$1" -clients "$2" -duration "${3}s" -warmup "${warmup}s"
	local line rps
	line=$(head -n 1 "$tmp/bapbench.json")
	if [[ -s $tmp/bapbench.json.err ]]; then
		cat "$tmp/bapbench.json.err" >&2 # the first error responses, if any
	fi
	rps=$(jget "$line" rps)
	bap_json="${line%\}},\"cpu\":$cpu_json,\"cpu_per_op\":$(per_op "$rps" "$cpu_json")}"
}

log "pgbench -i -s $scale (database pgbench)"
sql bap 'CREATE DATABASE pgbench' >/dev/null
"$pgbench" "${pg[@]}" -i -s "$scale" -q pgbench >"$tmp/pgbench-init.txt" 2>&1 ||
	{
		cat "$tmp/pgbench-init.txt" >&2
		die "pgbench -i failed"
	}

log "pgbench -c $clients -j 2 -T $duration -M prepared"
run_pgbench "$duration"
pgbench_main=$pgb_json
log "pgbench: $pgbench_main"

# The bap tables are empty until now. Until their first ANALYZE, PostgreSQL plans and caches lookups on
# them as for an empty table (see docs/benchmarks.md), so the first seconds are a cold start, reported
# apart.
log "bapbench create_task, cold start (fresh tables, never analysed): $clients clients, ${cold}s"
warmup_saved=$warmup
warmup=0
run_bapbench create_task "$clients" "$cold"
warmup=$warmup_saved
bap_cold=$bap_json
log "bapbench cold: $bap_cold"

# pgbench -i ends with VACUUM ANALYZE of its tables; do the same for bap's before the measured phase.
sql bap 'VACUUM ANALYZE' >/dev/null
# group_counts prints bap serve's "<group commits> <commands they carried>" (ADR 0039), from /metrics.
group_counts() {
	curl -fsS "$base_url/metrics" 2>/dev/null | awk '
		$1 == "bap_db_group_commits_total" { g = $2 }
		$1 == "bap_db_group_committed_commands_total" { c = $2 }
		END { printf "%d %d\n", g, c }'
}
log "bapbench create_task: $clients clients, ${warmup}s warm-up + ${duration}s"
read -r groups0 grouped0 < <(group_counts)
run_bapbench create_task "$clients" "$duration"
read -r groups1 grouped1 < <(group_counts)
# How the commits went during the run (warm-up included): group transactions, the commands they
# carried, and the share of all create_tasks that committed in a group.
group_json=$(awk -v g=$((groups1 - groups0)) -v c=$((grouped1 - grouped0)) 'BEGIN {
	printf "{\"groups\":%d,\"grouped_commands\":%d,\"commands_per_group\":%.2f}", g, c, (g > 0 ? c / g : 0)
}')
bap_json="${bap_json%\}},\"group_commit\":$group_json}"
bap_main=$bap_json
log "bapbench: $bap_main"

# More rounds, each pgbench then create_task again, so that the verdict is the median of the
# rounds' ratios, with their spread: the machine's speed drifts between two phases of one round
# (pgbench alone moved 3,650-4,720 tps between rounds on the quiet reference machine).
# round_line PGBENCH_JSON BAP_JSON prints one round's {"ratio","cpu_ratio","p99_ms","tps","rps"}.
round_line() {
	awk -v t="$(jget "$1" tps)" -v r="$(jget "$2" rps)" -v pc="$(jget "$1" total_ms)" -v bc="$(jget "$2" total_ms)" \
		-v p99="$(jget "$2" p99_ms)" 'BEGIN {
		printf "{\"tps\":%.1f,\"rps\":%.1f,\"ratio\":%.3f,\"cpu_ratio\":%.3f,\"p99_ms\":%.3f}\n",
			t, r, (t > 0 ? r / t : 0), (bc > 0 ? pc / bc : 0), p99
	}'
}
round_lines=("$(round_line "$pgbench_main" "$bap_main")")
for ((round = 2; round <= rounds; round++)); do
	log "round $round of $rounds: pgbench, then create_task"
	run_pgbench "$duration"
	pgb_round=$pgb_json
	run_bapbench create_task "$clients" "$duration"
	round_lines+=("$(round_line "$pgb_round" "$bap_json")")
	log "round $round: ${round_lines[-1]}"
done
# rounds_stat KEY: the median of KEY over the rounds, then its minimum and maximum.
rounds_stat() {
	printf '%s\n' "${round_lines[@]}" | sed -n "s/.*\"$1\":\([-0-9.]*\).*/\1/p" | sort -g |
		awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }'
}
read -r ratio_med ratio_min ratio_max < <(rounds_stat ratio)
read -r cpu_ratio_med cpu_ratio_min cpu_ratio_max < <(rounds_stat cpu_ratio)
read -r p99_med p99_min p99_max < <(rounds_stat p99_ms)
rounds_json="[$(IFS=,; echo "${round_lines[*]}")]"

# ---- event delivery (docs/events.md) -------------------------------------------------------------
# bapstreambench: N SSE subscribers of /bap/v1/events/stream while create_task writers commit events
# at 500 events/s (the goal: commit-to-delivery p99 < 50 ms with 10 subscribers), then as fast as
# they can (sustained events/s). BENCH_STREAMS=0 skips it; BENCH_STREAM_DURATION seconds (10).
streams_json="[]"
if [[ ${BENCH_STREAMS:-1} == 1 ]]; then
	"$GO" build -o bin/bapstreambench ./server/cmd/bapstreambench
	stream_secs=${BENCH_STREAM_DURATION:-10}
	stream_items=()
	for spec in "1 500" "10 500" "1 0" "10 0"; do
		read -r subs rate <<<"$spec"
		sql bap 'CHECKPOINT' >/dev/null
		log "bapstreambench: $subs subscriber(s), $([[ $rate == 0 ]] && echo "writers at full speed" || echo "$rate events/s"), ${stream_secs}s"
		line=$(bin/bapstreambench -url "$base_url" -subscribers "$subs" -rate "$rate" -writers "$clients" \
			-duration "${stream_secs}s" -warmup 2s) || die "bapstreambench failed"
		log "  $line"
		stream_items+=("$line")
	done
	streams_json="[$(
		IFS=,
		echo "${stream_items[*]}"
	)]"
fi

# ---- diagnostic runs (optional) ----------------------------------------------------------------

experiments_json="[]"
if [[ $experiments == 1 ]]; then
	exp_secs=$((duration / 2 > 5 ? duration / 2 : 5))
	items=()
	add_item() { items+=("{\"name\":\"$1\",\"result\":$2}"); }
	for c in 1 2 4 8 32; do
		log "experiment: create_task with $c clients (${exp_secs}s)"
		run_bapbench create_task "$c" "$exp_secs"
		log "  $bap_json"
		add_item "create_task clients=$c" "$bap_json"
	done
	log "experiment: GET /healthz (HTTP only, no database), $clients clients (${exp_secs}s)"
	run_bapbench healthz "$clients" "$exp_secs"
	log "  $bap_json"
	add_item "healthz clients=$clients" "$bap_json"

	log "experiment: synchronous_commit=off: pgbench and create_task (${exp_secs}s each)"
	sql bap "ALTER SYSTEM SET synchronous_commit = off" >/dev/null
	sql bap 'SELECT pg_reload_conf()' >/dev/null
	run_pgbench "$exp_secs"
	run_bapbench create_task "$clients" "$exp_secs"
	log "  pgbench: $pgb_json"
	log "  bap: $bap_json"
	add_item "pgbench synchronous_commit=off" "$pgb_json"
	add_item "create_task synchronous_commit=off" "$bap_json"
	sql bap "ALTER SYSTEM RESET synchronous_commit" >/dev/null
	sql bap 'SELECT pg_reload_conf()' >/dev/null

	log "experiment: create_task without foreign keys and regular-expression CHECKs (${exp_secs}s)"
	run_bapbench create_task "$clients" "$exp_secs"
	log "  same schema, again: $bap_json"
	add_item "create_task schema as is (again)" "$bap_json"
	sql bap "DO \$\$ DECLARE c record; BEGIN
		FOR c IN SELECT conrelid::regclass AS rel, conname FROM pg_constraint
			WHERE connamespace = 'public'::regnamespace
			  AND (contype = 'f' OR (contype = 'c' AND pg_get_constraintdef(oid) LIKE '%~%'))
		LOOP EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.rel, c.conname); END LOOP; END \$\$" >/dev/null
	run_bapbench create_task "$clients" "$exp_secs"
	log "  without: $bap_json"
	add_item "create_task without foreign keys and regex CHECKs" "$bap_json"

	experiments_json="[$(
		IFS=,
		echo "${items[*]}"
	)]"
fi

stop_server

# ---- wire cost per command -----------------------------------------------------------------------
# Round trips, statements and rows of each mutating command on create_task's path, counted exactly
# by TestCommandWireCost (server/internal/app; a pgx tracer and a counting connection on the
# test cluster, the service built as the daemon builds it). BENCH_WIRE=0 skips it.
wire_json="[]"
if [[ ${BENCH_WIRE:-1} == 1 ]]; then
	log "wire cost per command (go test -run TestCommandWireCost)"
	BENCH_COUNTS_OUT="$tmp/wire.json" "$GO" test ./server/internal/app -run '^TestCommandWireCost$' -count 1 >"$tmp/wire.txt" 2>&1 ||
		{
			cat "$tmp/wire.txt" >&2
			die "TestCommandWireCost failed"
		}
	wire_json=$(cat "$tmp/wire.json")
fi

# ---- verdict -----------------------------------------------------------------------------------

pgb_tps=$(jget "$pgbench_main" tps)
bap_rps=$(jget "$bap_main" rps)
bap_p50=$(jget "$bap_main" p50_ms)
bap_p99=$(jget "$bap_main" p99_ms)
bap_errors=$(jget "$bap_main" errors)
ratio=$(awk -v a="$bap_rps" -v b="$pgb_tps" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print 0 }')
# The goals are judged on the rounds' medians.
ratio_ok=$(awk -v r="$ratio_med" -v g="$ratio_goal" 'BEGIN { print (r >= g) ? "true" : "false" }')
p99_ok=$(awk -v p="$p99_med" -v g="$p99_goal_ms" 'BEGIN { print (p < g) ? "true" : "false" }')
yes_no() {
	local v=MISSED
	[[ $1 == true ]] && v=met
	[[ ${noisy:-false} == true ]] && v="$v (noisy run)"
	echo "$v"
}
# at_most V GOAL / at_least V GOAL: "true" when the number that V starts with meets the goal
# ("false" when V is not a number, such as n/a).
at_most() { awk -v r="${1%% *}" -v g="$2" 'BEGIN { print (r ~ /^[0-9.]+$/ && r + 0 <= g) ? "true" : "false" }'; }
at_least() { awk -v r="${1%% *}" -v g="$2" 'BEGIN { print (r ~ /^[0-9.]+$/ && r + 0 >= g) ? "true" : "false" }'; }
# CPU per operation, from the "cpu_per_op" objects (the last "total_ms" and "postgres_ms" of each line).
pgb_cpu=$(jget "$pgbench_main" total_ms)
bap_cpu=$(jget "$bap_main" total_ms)
pgb_pgcpu=$(jget "$pgbench_main" postgres_ms)
bap_pgcpu=$(jget "$bap_main" postgres_ms)
bap_srvcpu=$(jget "$bap_main" server_ms)
cpu_ratio=$(awk -v a="$pgb_cpu" -v b="$bap_cpu" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print 0 }')
# Other work on the machine during either phase skews the tps/rps ratio (it rarely hits both phases
# alike); above this share of the CPUs the run is flagged.
noise_limit_pct=15
pgb_other=$(other_pct "$(cpu_of "$pgbench_main")")
bap_other=$(other_pct "$(cpu_of "$bap_main")")
noisy=false
if [[ $pgb_other -gt $noise_limit_pct || $bap_other -gt $noise_limit_pct ]]; then
	noisy=true
fi

cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 0)
mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo 2>/dev/null || echo 0)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=false
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
	dirty=true
fi
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

go_file=null
if [[ $run_go == 1 ]]; then
	go_file=$(json_str "$out_go")
fi
engines_file=null
if [[ $run_engines == 1 ]]; then
	engines_file=$(json_str "$out_engines")
fi
components_file=null
if [[ $run_components == 1 ]]; then
	components_file=$(json_str "$out_components")
fi

cat >"$out_json" <<EOF
{
  "timestamp": $(json_str "$stamp"),
  "commit": $(json_str "$commit"),
  "tree_modified": $dirty,
  "bap_binary": {"path": $(json_str "$bap"), "version": ${bap_version:-null}},
  "host": {"cpus": $cpus, "cpu_model": $(json_str "$cpu_model"), "mem_mb": $mem_mb, "kernel": $(json_str "$(uname -r)")},
  "postgres": {"version": $(json_str "$pg_version"), "settings": ${pg_settings:-null}},
  "pgbench": $pgbench_main,
  "bap": $bap_main,
  "bap_cold_start": $bap_cold,
  "ratio": $ratio,
  "cpu_ratio": $cpu_ratio,
  "rounds": $rounds_json,
  "ratio_median": $ratio_med,
  "cpu_ratio_median": $cpu_ratio_med,
  "p99_median_ms": $p99_med,
  "goals": {"ratio_min": $ratio_goal, "ratio_ok": $ratio_ok, "p99_max_ms": $p99_goal_ms, "p99_ok": $p99_ok},
  "noisy": $noisy,
  "experiments": $experiments_json,
  "streams": $streams_json,
  "wire_cost": $wire_json,
  "go_bench": $go_file,
  "engines": $engines_file,
  "components": $components_file
}
EOF

row() { printf '  %-44s %12s   %s\n' "$1" "$2" "${3:-}"; }
printf '\n'
printf 'bench %s (commit %s; %s CPUs; PostgreSQL %s, fsync on)\n' "$stamp" "$commit" "$cpus" "$pg_version"
row "pgbench TPC-B-like, $clients clients (tps)" "$pgb_tps" "other processes: $pgb_other% of the CPUs"
row "bap create_task, $clients clients (rps)" "$bap_rps" "other processes: $bap_other% of the CPUs"
row "  errors" "$bap_errors"
row "  p50 (ms)" "$bap_p50"
row "  p99 (ms)" "$bap_p99" "the first round"
row "ratio bap_rps / pgbench_tps" "$ratio" "the first round"
row "ratio, median of ${#round_lines[@]} interleaved rounds" "$ratio_med" "$ratio_min–$ratio_max; goal ≥ $ratio_goal: $(yes_no "$ratio_ok")"
row "  CPU-cost ratio, median of the rounds" "$cpu_ratio_med" "$cpu_ratio_min–$cpu_ratio_max"
row "  p99 (ms), median of the rounds" "$p99_med" "$p99_min–$p99_max; goal < $p99_goal_ms ms: $(yes_no "$p99_ok")"
if [[ $wire_json != "[]" ]]; then
	# One {"operation":…,"round_trips":…,"statements":…,"rows":…} object per command; pgbench's
	# TPC-B transaction (-M prepared) is BEGIN, 3 UPDATEs, a SELECT, an INSERT and END, one round
	# trip each.
	row "  wire: pgbench TPC-B transaction" "7 RT" "7 statements, 4 rows"
	while IFS= read -r item; do
		[[ -n $item ]] || continue
		op=$(sed -n 's/.*"operation":"\([^"]*\)".*/\1/p' <<<"$item")
		row "  wire: $op" "$(jget "$item" round_trips) RT" "$(jget "$item" statements) statements, $(jget "$item" rows) rows"
	done < <(grep -o '{[^}]*}' <<<"$wire_json")
fi
row "cold start: create_task (rps, first ${cold}s)" "$(jget "$bap_cold" rps)" "p99 $(jget "$bap_cold" p99_ms) ms, before the first ANALYZE"
row "CPU per pgbench transaction (ms)" "$pgb_cpu" "PostgreSQL $pgb_pgcpu"
row "CPU per create_task (ms)" "$bap_cpu" "PostgreSQL $bap_pgcpu, bap serve $bap_srvcpu"
row "CPU-cost ratio pgbench / create_task" "$cpu_ratio" "(the throughput ratio a CPU-bound machine allows)"
row "  create_tasks per group commit" "$(jget "$group_json" commands_per_group)" "$(jget "$group_json" groups) group transactions carried $(jget "$group_json" grouped_commands) commands (ADR 0039)"
if [[ $streams_json != "[]" ]]; then
	for line in "${stream_items[@]}"; do
		label="events: $(jget "$line" subscribers) sub(s), $([[ $(jget "$line" target_events_per_s) == "" ]] && echo "max rate" || echo "$(jget "$line" target_events_per_s)/s")"
		row "$label (events/s)" "$(jget "$line" events_per_s)" "delivery from response p50 $(jget "$line" from_response_p50_ms) / p90 $(jget "$line" from_response_p90_ms) / p99 $(jget "$line" from_response_p99_ms) / max $(jget "$line" from_response_max_ms) ms; from request p99 $(jget "$line" from_request_p99_ms) ms; missing $(jget "$line" missing), duplicates $(jget "$line" duplicates)"
		hist=""
		for b in 1 2 5 10 20 50 100 200 500; do
			hist+="≤${b}: $(jget "$line" "le_$b" | grep . || echo 0)  "
		done
		row "  histogram (deliveries, ms from response)" "" "${hist}more: $(jget "$line" inf | grep . || echo 0)"
	done
fi
if [[ $noisy == true ]]; then
	printf '  NOISY RUN: other processes used more than %s%% of the CPUs in a measured phase, so the\n' "$noise_limit_pct"
	printf '  rps/tps ratio is unreliable; the CPU-cost ratio is steadier. Rerun on a quieter machine.\n'
fi
printf '  results: %s\n\n' "$out_json"

# ---- Go micro-benchmarks -----------------------------------------------------------------------

if [[ $run_go == 1 ]]; then
	# BenchmarkComponentScores is the component-score phase below, not a micro-benchmark.
	mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Benchmark' server/internal | grep -v '/components_bench_test\.go$' |
		xargs -r -n 1 dirname | sort -u | sed 's|^|./|')
	if [[ ${#pkgs[@]} -gt 0 ]]; then
		log "go test -bench in ${pkgs[*]}"
		"$GO" test -run '^$' -bench . -skip '^(BenchmarkComponentScores|BenchmarkHeavyObserve|BenchmarkRecordingCost|BenchmarkEngine.*|BenchmarkWorkflow|BenchmarkConcurrent|BenchmarkSessionMemory|BenchmarkExtractTable|BenchmarkOpenSession|BenchmarkNavigateInterception|BenchmarkNavigateSplit)$' -benchmem -count 1 "${pkgs[@]}" | tee "$out_go"
	else
		log "no Go benchmarks found"
	fi
fi

# ---- the browser against raw chromedp ------------------------------------------------------------
# The warm workflow (navigate → observe → fill → click → extract → screenshot) through the adapter
# and through raw chromedp (plain, proxied, and reading the title as BAP's navigate answers it) in
# each iteration, BENCH_BROWSER_COUNT runs of BENCH_BROWSER_ITERS iterations; then four and sixteen
# sessions at once. Each run's ratios, and their median with the spread (issue #25 asks for ratios
# over repeated, interleaved runs rather than one time).

if [[ $run_go == 1 ]]; then
	log "browser: warm workflow beside raw chromedp ($browser_count runs of $browser_iters) and concurrent sessions"
	"$GO" test ./server/internal/browser -run '^$' -bench '^BenchmarkWorkflow$' \
		-benchtime "${browser_iters}x" -count "$browser_count" | tee -a "$out_go" | tee "$tmp/workflow.txt"
	"$GO" test ./server/internal/browser -run '^$' -bench '^BenchmarkConcurrent$' \
		-benchtime 10x -count 2 | tee -a "$out_go" | tee "$tmp/concurrent.txt"
	# Memory per extra session: four more sessions in each browser, PSS of its process tree.
	"$GO" test ./server/internal/browser -run '^$' -bench '^BenchmarkSessionMemory$' \
		-benchtime 3x -count 1 | tee -a "$out_go" | tee "$tmp/memory.txt"
	"$GO" test ./server/internal/browser -run '^$' -bench '^BenchmarkExtractTable$' \
		-benchtime 30x -count 3 | tee -a "$out_go" | tee "$tmp/extract.txt"
	# What policy.record costs a whole task over HTTP (archive and record.step), alternately with
	# the same checkout unrecorded; a fixed count, as each iteration is two full workflows.
	"$GO" test ./server/internal/e2e -run '^$' -bench '^BenchmarkRecordingCost$' \
		-benchtime 10x -count 1 | tee -a "$out_go" | tee "$tmp/recording.txt"
	# A fixed count: the warm open takes 0.05 ms and each iteration waits outside the timer for
	# the pool to refill, so a benchtime in seconds would loop for tens of minutes.
	"$GO" test ./server/internal/browser -run '^$' -bench '^BenchmarkOpenSession$' \
		-benchtime 20x -count 1 | tee -a "$out_go" | tee "$tmp/open.txt"
	# metric NAME FILE: the values of one reported metric, one per run, in run order.
	metric() { awk -v m="$1" '/^Benchmark/ { for (i = 2; i < NF; i++) if ($(i+1) == m) print $i }' "$2"; }
	# median_spread: the numbers on stdin as "median (min–max, N runs)", or n/a when there are none.
	median_spread() {
		sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit } m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.2f (%.2f–%.2f, %d runs)\n", m, v[1], v[NR], NR }'
	}
	# median: the median of the numbers on stdin, to a tenth, or n/a when there are none.
	median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit } printf "%.1f\n", (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'; }
	# spread A B FILE: per run A/B, as median_spread.
	spread() { paste <(metric "$1" "$3") <(metric "$2" "$3") | awk '$2 > 0 { print $1 / $2 }' | median_spread; }
	nav=$(spread bap_navigate_p50_ms chromedp_navigate_p50_ms "$tmp/workflow.txt")
	navt=$(spread bap_navigate_p50_ms chromedp_titled_navigate_p50_ms "$tmp/workflow.txt")
	wf=$(spread bap_workflow_p50_ms chromedp_workflow_p50_ms "$tmp/workflow.txt")
	prox=$(spread chromedp_proxied_navigate_p50_ms chromedp_navigate_p50_ms "$tmp/workflow.txt")
	grep -h '^BenchmarkConcurrent/' "$tmp/concurrent.txt" | sed 's|^BenchmarkConcurrent/\([a-z]*\)_\([0-9]*\)-[0-9]*|\1 \2|' |
		awk '{ for (i = 3; i < NF; i++) if ($(i+1) == "workflows/s") r[$1" "$2] = r[$1" "$2] " " $i }
			END { for (k in r) print k r[k] }' >"$tmp/concurrent.rows"
	conc() { # conc N: the median over runs of bap_N / chromedp_N workflows/s
		awk -v n="$1" '$2 == n { for (i = 3; i <= NF; i++) v[$1, i-2] = $i; c = NF - 2 }
			END { for (i = 1; i <= c; i++) if (v["chromedp", i] > 0) print v["bap", i] / v["chromedp", i] }' "$tmp/concurrent.rows" |
			median_spread
	}
	c4=$(conc 4) c16=$(conc 16)
	printf '\nbrowser against raw chromedp (median ratio of BAP to chromedp, spread over runs; load average %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
	# Issue #24's navigate goal is judged against raw chromedp doing what BAP's navigate does: load
	# the page and answer its URL and title (chromedp.Navigate answers nothing; a caller of raw
	# chromedp who wants the title reads it after). The bare ratio stays beside it (docs/benchmarks.md).
	row "navigate (chromedp reads the title too)" "$navt" "goal ≤ 1.25 (issue #24): $(yes_no "$(at_most "$navt" 1.25)")"
	row "navigate beside chromedp.Navigate alone" "$nav" "no title on chromedp's side: the title read and Fetch interception"
	row "raw chromedp behind the egress proxy" "$prox" "what the proxy costs chromedp's navigate"
	row "warm workflow" "$wf" "goal ≤ 1.25 (issue #24): $(yes_no "$(at_most "$wf" 1.25)"); ≤ 0.7 (issue #25): $(yes_no "$(at_most "$wf" 0.7)")"
	row "raw-CDP floor's workflow / chromedp's" "$(spread cdp_floor_workflow_p50_ms chromedp_workflow_p50_ms "$tmp/workflow.txt")" "the least any CDP client waits (floorWorkflow): issue #25's 0.7 against it"
	row "warm workflow / the raw-CDP floor" "$(spread bap_workflow_p50_ms cdp_floor_workflow_p50_ms "$tmp/workflow.txt")" "what BAP adds to the browser's own time"
	# Issue #20: what policy.record costs — the same workflow with every exchange archived as WARC.
	row "warm workflow recorded / not recorded" "$(spread bap_recorded_workflow_p50_ms bap_workflow_p50_ms "$tmp/workflow.txt")" "policy.record: true (issue #20)"
	row "archive bytes per recorded workflow" "$(metric 'bap_recorded_archive_bytes/workflow' "$tmp/workflow.txt" | median)" "WARC 1.1, masked, bodies decoded"
	row "a recorded checkout task over HTTP / unrecorded" "$(metric recorded_ratio "$tmp/recording.txt" | median)" "archive + record.step, p50 of 10 each (BenchmarkRecordingCost)"
	row "  its archive bytes per workflow" "$(metric 'archive_bytes/workflow' "$tmp/recording.txt" | median)"
	row "the same over HTTPS / unrecorded" "$(metric https_recorded_ratio "$tmp/recording.txt" | median)" "recording opens the TLS tunnels (ADR 0037)"
	row "  its archive bytes per workflow" "$(metric 'https_archive_bytes/workflow' "$tmp/recording.txt" | median)"
	# Each step's p50 (ms), the median over the runs, beside raw chromedp's and the floor's.
	med() { metric "$1" "$tmp/workflow.txt" | median; }
	printf '  %-12s %10s %10s %10s   (p50 ms, median over runs)\n' step BAP chromedp floor
	for step in navigate observe fill click extract screenshot workflow; do
		printf '  %-12s %10s %10s %10s\n' "$step" "$(med "bap_${step}_p50_ms")" "$(med "chromedp_${step}_p50_ms")" "$(med "cdp_floor_${step}_p50_ms")"
	done
	xt=$(spread bap_extract_table_p50_ms chromedp_extract_table_p50_ms "$tmp/extract.txt")
	# Issue #25: ≤ 1.25× raw, with 10 ms of slack: met when the median run is within either.
	xt_slack=$(paste <(metric bap_extract_table_p50_ms "$tmp/extract.txt") <(metric chromedp_extract_table_p50_ms "$tmp/extract.txt") |
		awk '{ print $1 - $2 }' | median)
	xt_ok=$(at_most "$xt" 1.25)
	[[ $xt_ok == true ]] || xt_ok=$(awk -v d="$xt_slack" 'BEGIN { print (d ~ /^-?[0-9.]+$/ && d + 0 <= 10) ? "true" : "false" }')
	row "extract of a 50-row table" "$xt" "BAP − chromedp ${xt_slack} ms; goal ≤ 1.25× or within 10 ms (issue #25): $(yes_no "$xt_ok")"
	ow=$(awk '/^BenchmarkOpenSession\/bap_warm/ { for (i = 2; i < NF; i++) if ($(i+1) == "open_p50_ms") print $i }' "$tmp/open.txt")
	of=$(awk '/^BenchmarkOpenSession\/chromedp_fresh/ { for (i = 2; i < NF; i++) if ($(i+1) == "open_p50_ms") print $i }' "$tmp/open.txt")
	row "create_browser_session (warm) p50, ms" "${ow:-n/a}" "a fresh chromedp context and tab: ${of:-n/a} ms"
	row "4 sessions at once, workflows/s" "$c4" "goal ≥ 0.9 (issue #25): $(yes_no "$(at_least "$c4" 0.9)")"
	row "16 sessions at once, workflows/s" "$c16" "errors: $(metric errors "$tmp/concurrent.txt" | awk '{ s += $1 } END { print s + 0 }')"
	mb=$(metric 'bap_MiB/session' "$tmp/memory.txt" | median) mr=$(metric 'chromedp_MiB/session' "$tmp/memory.txt" | median)
	mratio=$(awk -v b="$mb" -v r="$mr" 'BEGIN { if (b ~ /^-?[0-9.]+$/ && r + 0 > 0) printf "%.2f", b / r; else print "n/a" }')
	row "memory per extra session, BAP / chromedp" "$mratio" "PSS ${mb} / ${mr} MiB (median of 3); goal ≤ 1 (issue #25): $(yes_no "$(at_most "$mratio" 1)")"
	echo
fi

# ---- engines: Firefox/BiDi against Chromium/CDP ------------------------------------------------
# The warm workflow and the heavy-page observe through the engine port on both engines, beside raw
# chromedp, interleaved in each iteration (server/internal/daemon/enginebench_test.go), then the
# memory of an extra session on each engine; Firefox/BiDi is reported as a ratio to Chromium/CDP.

if [[ $run_engines == 1 ]]; then
	log "engines: workflow and heavy-page observe on Chromium/CDP, Firefox/BiDi and raw chromedp ($engine_iters iterations)"
	rm -f "$out_engines"
	BENCH_ENGINES_OUT="$PWD/$out_engines" "$GO" test ./server/internal/daemon -run '^$' \
		-bench '^BenchmarkEngine(Workflow|ObserveBig)$' -benchtime "${engine_iters}x" -count 1 | tee -a "$out_go"
	BENCH_ENGINES_OUT="$PWD/$out_engines" "$GO" test ./server/internal/daemon -run '^$' \
		-bench '^BenchmarkEngineSessionMemory$' -benchtime 1x -count 1 | tee -a "$out_go"
	[[ -s $out_engines ]] || die "the engine benchmarks wrote no results ($out_engines)"
	e=$(tr -d ' \n' <"$out_engines")
	eget() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" <<<"$e"; }
	wf_ratio=$(eget 'workflow\.firefox_over_chromium\.workflow')
	wf_ok=$(awk -v r="$wf_ratio" -v g="$engine_ratio_goal" 'BEGIN { print (r != "" && r <= g) ? "true" : "false" }')
	printf '\nengines (%s iterations, load average %s)\n' "$engine_iters" "$(cut -d' ' -f1-3 /proc/loadavg)"
	row "workflow p50 (ms): chromium/CDP" "$(eget 'workflow\.chromium\.workflow_p50_ms')"
	row "workflow p50 (ms): firefox/BiDi" "$(eget 'workflow\.firefox\.workflow_p50_ms')"
	row "workflow p50 (ms): raw chromedp" "$(eget 'workflow\.chromedp\.workflow_p50_ms')"
	row "ratio firefox/BiDi / chromium/CDP workflow" "$wf_ratio" "goal ≤ $engine_ratio_goal: $(yes_no "$wf_ok")"
	row "heavy-page observe ratio firefox / chromium" "$(eget 'observe_big\.firefox_over_chromium\.observe_interactive')" "interactive; full $(eget 'observe_big\.firefox_over_chromium\.observe_full')"
	row "memory per extra session (MiB PSS)" "$(eget 'memory\.chromium_mib_per_session')" "chromium; firefox $(eget 'memory\.firefox_mib_per_session')"
	printf '  results: %s\n\n' "$out_engines"
fi

# ---- heavy-page observe: BAP beside Playwright MCP ----------------------------------------------
# The 5,015-element catalog observed through BAP's HTTP API and snapshotted through Playwright MCP,
# alternately (BenchmarkHeavyObserve, server/internal/e2e): bytes, p50 time and what each makes
# addressable. Goals (issue #25): bytes ≤ 0.5×, time ≤ 0.15×, every interactive element a handle.

if [[ $run_heavy == 1 ]]; then
	scripts/install-playwright-mcp.sh
	log "heavy-page observe: BAP and Playwright MCP ($heavy_iters iterations)"
	rm -f "$out_heavy"
	BENCH_HEAVY_OUT="$PWD/$out_heavy" "$GO" test ./server/internal/e2e -run '^$' \
		-bench '^BenchmarkHeavyObserve$' -benchtime "${heavy_iters}x" -count 1 | tee -a "$out_go"
	[[ -s $out_heavy ]] || die "the heavy-page benchmark wrote no results ($out_heavy)"
	h=$(tr -d ' \n' <"$out_heavy")
	hget() { jget "$h" "$1"; }
	hb=$(awk -v r="$(hget bytes_ratio)" 'BEGIN { printf "%.3f", r }') ht=$(awk -v r="$(hget time_ratio)" 'BEGIN { printf "%.3f", r }')
	printf '\nheavy-page observe beside Playwright MCP (%s iterations, load average %s)\n' "$heavy_iters" "$(cut -d' ' -f1-3 /proc/loadavg)"
	row "bytes: BAP / Playwright MCP" "$(hget bap_bytes) / $(hget pwmcp_bytes)" "ratio $hb, goal ≤ 0.5: $(yes_no "$(at_most "$hb" 0.5)")"
	row "p50 ms: BAP / Playwright MCP" "$(hget bap_p50_ms) / $(hget pwmcp_p50_ms)" "ratio $ht, goal ≤ 0.15: $(yes_no "$(at_most "$ht" 0.15)")"
	row "addressable: BAP handles / interactive" "$(hget bap_handles) / $(hget interactive_elements)" "Playwright refs $(hget pwmcp_refs)"
	printf '  results: %s\n\n' "$out_heavy"
fi

# ---- component scores: BAP beside Playwright MCP -----------------------------------------------
# Every task of server/internal/e2e/testdata/components/tasks.json once through BAP's HTTP API and
# once through Playwright MCP over stdio (docs/benchmarks.md, "Component scores"). The libraries and
# the Playwright MCP server are pinned npm packages, installed once (npm ci --ignore-scripts; no
# browser is downloaded: Playwright MCP runs on the system Chromium, BAP_CHROMIUM or chromium on PATH).

if [[ $run_components == 1 ]]; then
	scripts/install-component-fixtures.sh
	scripts/install-playwright-mcp.sh
	log "component scores: BAP and Playwright MCP on the fixture tasks (go test -bench BenchmarkComponentScores)"
	BENCH_COMPONENTS_OUT="$PWD/$out_components" "$GO" test ./server/internal/e2e -run '^$' \
		-bench '^BenchmarkComponentScores$' -benchtime 1x -count 1 -timeout 120m | tee "$out_components_txt"
	[[ -s $out_components ]] || die "the component scores wrote no results ($out_components)"
	log "component scores: $out_components"
fi
