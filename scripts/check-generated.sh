#!/usr/bin/env bash
# Fails when `make generate` changes any file: generated code must be committed fresh.
# It compares content hashes before and after, so it works on a dirty tree too (it then leaves the
# regenerated files in place for you to commit).
set -euo pipefail
cd "$(dirname "$0")/.."
snapshot() {
  find server/internal/apigen server/internal/bidi sdk-go sdk-ts/src sdk-py/bap sdk-rs/src server/internal/mcpcatalog -type f \
    \( -name '*.gen.*' -o -name '_generated.py' -o -name '*.gen.json' \) 2>/dev/null | sort | xargs -r sha256sum
  sha256sum docs/api.html 2>/dev/null || echo "docs/api.html missing"
  sha256sum docs/erd.md 2>/dev/null || echo "docs/erd.md missing"
  find server/internal/console/dist -type f 2>/dev/null | sort | xargs -r sha256sum
}
before=$(snapshot)
make --no-print-directory generate >/dev/null
after=$(snapshot)
if [[ "$before" != "$after" ]]; then
  echo "generated files are stale; run 'make generate' and commit the result:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
echo "generated files are fresh"
