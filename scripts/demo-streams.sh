#!/usr/bin/env bash
# demo-streams.sh — the event streams as a new user tries them (docs/events.md, "Try it"):
# `curl -N` follows /bap/v1/events/stream while another client creates and cancels tasks; in the
# middle of a burst `bap serve` is killed with SIGKILL; after a restart curl reconnects with the
# last `id:` it saw (Last-Event-ID). The events received across the kill are then compared with a
# fresh read of the whole feed: nothing may be lost, repeated or reordered.
#
#   scripts/demo-streams.sh        (builds bin/bap; a private data dir under $TMPDIR, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
unset BAP_DATABASE_URL
go build -o bin/bap ./server/cmd/bap
dir=$(mktemp -d "${TMPDIR:-/tmp}/bap-demo.XXXXXX")
chmod 0711 "$dir"
pid=""
cleanup() {
	[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	jobs -p | xargs -r kill 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

start() {
	: >"$dir/log"
	bin/bap serve --data-dir "$dir" --listen 127.0.0.1:0 >"$dir/log" 2>&1 &
	pid=$!
	for _ in $(seq 1 600); do
		listen=$(grep -o '"msg":"ready","listen":"[^"]*"' "$dir/log" | sed 's/.*"listen":"//; s/"$//' || true)
		[[ -n $listen ]] && return 0
		sleep 0.1
	done
	echo "bap serve did not start" >&2
	exit 1
}
create() {
	curl -s -X POST -H 'Content-Type: application/json' -H "Idempotency-Key: $1" \
		-d '{"goal":"demo","policy":{"allowed_origins":["https://example.com"]}}' "http://$listen/bap/v1/tasks" |
		sed -n 's/.*"task_id":"\(tsk_[^"]*\)".*/\1/p' | head -n 1
}
cancel() {
	curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -H "Idempotency-Key: cancel-$1" -d '{}' \
		"http://$listen/bap/v1/tasks/$1/cancel"
}
ids() { grep '^data: ' "$1" | sed 's/.*"event_id":"\([^"]*\)".*/\1/'; }

start
echo "== curl -N -H 'Accept: text/event-stream' http://$listen/bap/v1/events/stream"
curl -sN -H 'Accept: text/event-stream' "http://$listen/bap/v1/events/stream" >"$dir/part1" &
curl1=$!
sleep 0.5
for i in 1 2 3; do cancel "$(create "k$i")"; done
sleep 0.3
sed -n '1,12p' "$dir/part1"
echo "…"
(for i in $(seq 10 400); do t=$(create "k$i") && [[ -n $t ]] && cancel "$t"; done) >/dev/null 2>&1 &
writer=$!
sleep 1
kill -KILL "$pid"
kill "$writer" 2>/dev/null || true
wait "$writer" 2>/dev/null || true
sleep 0.3
kill "$curl1" 2>/dev/null || true
last=$(grep '^id: ' "$dir/part1" | tail -n 1 | cut -c5-)
echo "== SIGKILL in the middle of a burst: $(ids "$dir/part1" | wc -l) events received, last id $last"

start
echo "== restarted; curl -N -H 'Last-Event-ID: $last' …/bap/v1/events/stream"
curl -sN -H 'Accept: text/event-stream' -H "Last-Event-ID: $last" "http://$listen/bap/v1/events/stream" >"$dir/part2" &
curl2=$!
sleep 0.5
cancel "$(create after-restart)"
sleep 1
kill "$curl2" 2>/dev/null || true
curl -sN -H 'Accept: text/event-stream' -H 'Last-Event-ID: c1.0.0.0' "http://$listen/bap/v1/events/stream" >"$dir/all" &
curl3=$!
sleep 1.5
kill "$curl3" 2>/dev/null || true
cat "$dir/part1" "$dir/part2" >"$dir/got-stream"
ids "$dir/got-stream" >"$dir/got"
ids "$dir/all" >"$dir/want"
echo "== received across the kill: $(wc -l <"$dir/got") events ($(sort "$dir/got" | uniq -d | wc -l) repeated); the whole feed: $(wc -l <"$dir/want")"
if cmp -s "$dir/got" "$dir/want"; then
	echo "OK: nothing lost, nothing repeated, same order"
else
	echo "MISMATCH" >&2
	diff "$dir/got" "$dir/want" | head >&2
	exit 1
fi
