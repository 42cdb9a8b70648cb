# shellcheck shell=bash
# Sourced by the scripts that run the pinned Node tools (tools/package.json and its lock: Node 24
# from the `node` npm package, Redocly, AsyncAPI, TypeScript, the MCP conformance suite).
# Sets tools, modules and node, silences telemetry and update checks, and defines
# ensure_node_tools NAME, which runs `npm ci` only when tools/node_modules is missing or stale
# (a stamp of package.json + lock), so every caller works offline after the first install.

tools="$root/tools"
modules="$tools/node_modules"
node="$modules/node/bin/node"

export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export SCARF_ANALYTICS=false
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
export ASYNCAPI_SKIP_NEW_VERSION_CHECK=true
export NODE_DISABLE_COMPILE_CACHE=1

ensure_node_tools() {
	local name="$1" stamp="$modules/.bap-tools.sha256" want
	want="$(cat "$tools/package.json" "$tools/package-lock.json" | sha256sum | cut -d' ' -f1)"
	if [[ -x "$node" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
		return 0
	fi
	echo "$name: installing pinned tools (npm ci --prefix tools)" >&2
	# --ignore-scripts: no package may run install scripts (they would edit shell rc files or
	# phone home) except `node`, whose preinstall fetches the platform binary; rebuild runs it alone.
	npm ci --prefix "$tools" --ignore-scripts --no-audit --no-fund --loglevel=error
	npm rebuild --prefix "$tools" --foreground-scripts --loglevel=error node
	[[ -x "$node" ]] || { echo "$name: $node missing after npm ci" >&2; exit 1; }
	echo "$want" >"$stamp"
}
