#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each (default 30s) and prints, per target,
# the executions and the findings. Targets are discovered (every `func FuzzX(f *testing.F)` in a
# _test.go file), so a new one needs no edit here. `go test -fuzz` takes one target per package
# run, hence one run per target. A finding is written by Go to <package>/testdata/fuzz/FuzzX/ and
# then replays in plain `go test` until fixed; the script exits 1 when there is any.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fuzztime="${FUZZTIME:-30s}"
go="${GO:-go}"
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT

mapfile -t targets < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' server sdk-go codegen 2>/dev/null |
	sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort -u)
if [[ ${#targets[@]} -eq 0 ]]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

printf '%-44s %-26s %12s  %s\n' "package" "target" "executions" "findings"
failed=0
for t in "${targets[@]}"; do
	dir="${t% *}"
	name="${t#* }"
	out="$log/$name.log"
	status=0
	"$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "./$dir" >"$out" 2>&1 || status=$?
	execs="$(grep -Eo 'execs: [0-9]+' "$out" | tail -1 | grep -Eo '[0-9]+' || true)"
	finding="none"
	if [[ $status -ne 0 ]]; then
		failed=1
		written="$(grep -Eo 'testdata/fuzz/[^ ]+' "$out" | head -1 || true)"
		finding="FAILED${written:+: $dir/$written}"
	fi
	printf '%-44s %-26s %12s  %s\n' "$dir" "$name" "${execs:-0}" "$finding"
	if [[ $status -ne 0 ]]; then
		sed -n '/--- FAIL/,$p' "$out" | head -40 >&2
	fi
done
exit "$failed"
