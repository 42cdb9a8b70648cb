#!/usr/bin/env bash
# build-console.sh — builds the operator console (console/) into server/internal/console/dist,
# which the binary embeds (go:embed) and which is committed, so `go build` alone serves the
# console. Part of `make generate`; scripts/check-generated.sh fails when the committed build
# differs from the sources. Installs the pinned tools first when missing (offline after that).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-console-tools.sh"
node "$root/console/build.mjs"
