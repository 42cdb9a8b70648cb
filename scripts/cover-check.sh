#!/usr/bin/env bash
# Fails when a Go package's statement coverage falls below its committed floor in
# scripts/coverage-floors.txt. Raise a floor when coverage rises; never lower one to pass.
#   cover-check.sh            runs `go test -cover` on the packages marked `test` (the cheap ones:
#                             `make test` calls this) and checks their own-test coverage
#   cover-check.sh SUMMARY    checks every floor against `make cover`'s cross-package summary
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
floors=scripts/coverage-floors.txt
module=$($GO list -m)
declare -A got
if [ $# -gt 0 ]; then
  while read -r p pct _; do got[$p]=${pct%\%}; done <"$1"
  rows=$(grep -v '^#' "$floors" | awk 'NF >= 2 {print $1, $2}')
else
  rows=$(grep -v '^#' "$floors" | awk '$3 == "test" {print $1, $2}')
  pkgs=$(awk '{print "./" $1 "/"}' <<<"$rows")
  # shellcheck disable=SC2086
  while read -r _ pkg _ _ pct _; do
    got[${pkg#"$module"/}]=${pct%\%}
  done < <($GO test -count=1 -cover $pkgs | awk '$1 == "ok" && /coverage:/ {for (i = 1; i <= NF; i++) if ($i == "coverage:") print "ok", $2, "-", "-", $(i+1)}')
fi
fail=0
while read -r p floor; do
  [ -n "$p" ] || continue
  have=${got[$p]:-}
  if [ -z "$have" ]; then
    echo "coverage: no figure for $p (floor $floor%)"; fail=1; continue
  fi
  if awk -v h="$have" -v f="$floor" 'BEGIN { exit !(h + 0 < f + 0) }'; then
    echo "coverage: $p at $have% is below its floor $floor%"; fail=1
  fi
done <<<"$rows"
if [ "$fail" = 0 ]; then echo "coverage: every package at or above its floor ($(wc -l <<<"$rows") checked)"; fi
exit "$fail"
