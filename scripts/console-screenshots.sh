#!/usr/bin/env bash
# console-screenshots.sh — retakes the pictures of docs/console.md (docs/console/*.png) from the
# console's browser tests: the same runs as in `make test` (playwright-core on the system
# Chromium, a real server, the fixture sites), each page's picture taken where the test checks it.
# Nothing is drawn by hand; commit the PNGs that changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-console-tools.sh"
"$root/scripts/install-component-fixtures.sh"
cd "$root"
BAP_CONSOLE_SCREENSHOTS="$root/docs/console" go test -count=1 -run '^TestConsole' ./server/cmd/bap
ls -l "$root"/docs/console/*.png
