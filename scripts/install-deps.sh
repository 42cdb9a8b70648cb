#!/bin/sh
# install-deps.sh — install the Debian 12 packages BAP needs to build, test and run, if missing.
#
#   scripts/install-deps.sh          install what is missing (as root), or print the sudo command
#   scripts/install-deps.sh --check  only report; exit 1 if anything is missing
#
# Idempotent: when everything is installed it changes nothing and does not touch the network.
# As root it runs `apt-get update` (only when something is missing) and `apt-get install`. As any other
# user it prints the exact `sudo apt-get install …` line and exits 1 when something is missing.
#
# Go itself is assumed to be present (the version go.mod names): Debian 12's golang package is too old,
# so it is not installed here.
#
# Packages:
#   postgresql          the server binaries (initdb, pg_ctl, postgres) for the embedded cluster
#   postgresql-contrib  contrib extensions and pgbench (make bench)
#   chromium            the browser BAP drives (over CDP)
#   firefox-esr         the second engine, Firefox ESR, driven over WebDriver BiDi (issue #19)
#   libnss3-tools       certutil: each Firefox's fresh profile trusts its egress proxies' in-memory
#                       authority, so a recording or replaying session's HTTPS is seen (ADR 0037)
#   ca-certificates     TLS roots for the HTTPS clients
#   make, git, curl     the build
#   python3             Debian's Python 3 (standard library only): the tests run the pinned
#                       contextual-orchestrator (../shared/third_party/) as the real model orchestrator
#   cargo, rustc, librust-{serde,serde-derive,serde-json,ureq}-dev
#                       sdk-rs and its conformance runner, built offline from Debian's crates
#                       (/usr/share/cargo/registry; rustc 1.63)
#
# It also creates the system account bap-browser (no home, no login shell) if missing: when bap runs as
# root, Chromium runs as that account with its sandbox on (see docs/operability.md, "The browser").
#
# Recommended packages are installed too (Debian's default): chromium's include the fonts pages render
# with. Note that installing postgresql also creates and starts Debian's default cluster "main" on
# localhost:5432; BAP does not use it (it runs its own private cluster on a Unix socket), and
# `systemctl disable --now postgresql` stops it if it is not wanted.
set -eu

PACKAGES="postgresql postgresql-contrib chromium firefox-esr libnss3-tools ca-certificates make git curl python3 cargo rustc librust-serde-dev librust-serde-derive-dev librust-serde-json-dev librust-ureq-dev"

check_only=false
case "${1:-}" in
"") ;;
--check) check_only=true ;;
-h | --help)
	sed -n '2,/^set -eu/p' "$0" | sed -e '/^set -eu/d' -e 's/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "install-deps.sh: unknown argument: $1 (try --help)" >&2
	exit 2
	;;
esac

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps.sh: this script needs Debian (dpkg and apt-get); install these packages by hand: $PACKAGES" >&2
	exit 1
fi

missing=""
for pkg in $PACKAGES; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
	if [ "$status" != "installed" ]; then
		missing="$missing $pkg"
	fi
done
missing=${missing# }

# The account Chromium runs as when bap runs as root (browser.DefaultRunAsUser).
BROWSER_USER=bap-browser
ADD_USER="useradd --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin $BROWSER_USER"
user_missing=false
if ! getent passwd "$BROWSER_USER" >/dev/null 2>&1; then
	user_missing=true
fi

if [ -z "$missing" ] && ! $user_missing; then
	echo "install-deps.sh: all present: $PACKAGES, user $BROWSER_USER"
	exit 0
fi

if $check_only; then
	[ -z "$missing" ] || echo "install-deps.sh: missing: $missing" >&2
	! $user_missing || echo "install-deps.sh: missing: the user $BROWSER_USER" >&2
	exit 1
fi

if [ "$(id -u)" -ne 0 ]; then
	[ -z "$missing" ] || echo "install-deps.sh: missing: $missing" >&2
	! $user_missing || echo "install-deps.sh: missing: the user $BROWSER_USER (Chromium's account when bap runs as root)" >&2
	echo "Run as root, or:" >&2
	[ -z "$missing" ] || echo "sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y $missing"
	! $user_missing || echo "sudo $ADD_USER"
	exit 1
fi

if [ -n "$missing" ]; then
	echo "install-deps.sh: installing: $missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	# shellcheck disable=SC2086 # word splitting of the package list is intended
	apt-get install -y $missing
fi
if $user_missing; then
	echo "install-deps.sh: creating the user $BROWSER_USER"
	$ADD_USER
fi
