#!/usr/bin/env bash
# `make cover`: statement coverage of the whole Go suite, cross-package (-coverpkg=./...: a line
# counts as covered whichever package's tests ran it). Prints per package and the total, writes
# coverage/cover.out, coverage/summary.txt and the HTML report coverage/index.html (coverage/ is
# gitignored), then checks every committed floor in scripts/coverage-floors.txt.
# Not counted: code that runs only in a `bap serve` child process the e2e and cmd tests start.
# COVER_DIR writes elsewhere; COVER_REUSE=1 summarises an existing cover.out without rerunning.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=${COVER_DIR:-coverage}
mkdir -p "$out"
if [ "${COVER_REUSE:-}" != 1 ] || [ ! -s "$out/cover.out" ]; then
  $GO test -tags mcpconformance -count=1 -timeout 60m -coverpkg=./... -coverprofile="$out/cover.out" ./...
fi
$GO tool cover -html="$out/cover.out" -o "$out/index.html"
$GO tool cover -func="$out/cover.out" | awk '$NF != "100.0%" && $1 != "total:"' >"$out/uncovered.txt"
module=$($GO list -m)
# A block may appear once per test binary: a block is covered if any binary ran it.
awk -v module="$module/" '
  NR == 1 { next }
  {
    split($1, a, ":"); file = a[1]; key = $1
    n = $2; c = $3
    if (!(key in stmts)) { stmts[key] = n; pkg[key] = file; sub(/\/[^\/]*$/, "", pkg[key]) }
    if (c > 0) hit[key] = 1
  }
  END {
    for (k in stmts) {
      p = pkg[k]; sub("^" module, "", p)
      total[p] += stmts[k]; all += stmts[k]
      if (k in hit) { cov[p] += stmts[k]; allcov += stmts[k] }
    }
    for (p in total) printf "%-48s %6.1f%%  (%d/%d statements)\n", p, 100 * cov[p] / total[p], cov[p], total[p]
    printf "%-48s %6.1f%%  (%d/%d statements)\n", "total", 100 * allcov / all, allcov, all
  }' "$out/cover.out" | sort >"$out/summary.txt"
grep -v '^total ' "$out/summary.txt"
grep '^total ' "$out/summary.txt"
echo "HTML report: $out/index.html; functions under 100%: $out/uncovered.txt"
scripts/cover-check.sh "$out/summary.txt"
