package daemon

import (
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/version"
)

// nodeAdapters are the protocol adapters this node serves, with their versions: BAP over HTTP,
// MCP (every node mounts /mcp) and, per engine whose browser runs, its adapter from the engine
// registry with the browser's product and version (two engines over one protocol record it once,
// the first's).
func nodeAdapters(br *Engines) []app.ProtocolAdapter {
	out := []app.ProtocolAdapter{
		{ID: app.AdapterBAPHTTP, Name: "BAP over HTTP", ProtocolVersion: version.BAP},
		{ID: app.AdapterMCP, Name: "Model Context Protocol", ProtocolVersion: version.MCP},
	}
	seen := map[string]bool{}
	for _, r := range br.list {
		if r.Browser == nil || seen[r.Adapter.AdapterID] {
			continue
		}
		if product, protocol := r.Browser.Version(); protocol != "" {
			seen[r.Adapter.AdapterID] = true
			out = append(out, app.ProtocolAdapter{ID: r.Adapter.AdapterID, Name: r.Adapter.AdapterName,
				ProtocolVersion: protocol, Implementation: product})
		}
	}
	return out
}

// BrowserNoSandboxWarning is the standing warning of a node whose browser runs without its sandbox
// (on /readyz and in `bap version`).
const BrowserNoSandboxWarning = "the browser runs without its sandbox (--browser-no-sandbox)"

// browserWarnings are the node's standing warnings about its browser, for /readyz.
func browserWarnings(cfg Config, br *Engines) []string {
	if br.running() && cfg.BrowserNoSandbox {
		return []string{BrowserNoSandboxWarning}
	}
	return nil
}

// listenAddrs are the addresses of the TCP listener host:port, which no page may reach (the
// browser's egress proxy refuses them; a loopback address stands for every loopback address of
// its port, an empty host for every address). A host that is not an address gives none: the proxy
// still refuses private addresses the policy does not name.
func listenAddrs(listen string) []netip.AddrPort {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil
	}
	switch {
	case host == "":
		return []netip.AddrPort{netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(pn))}
	case strings.EqualFold(host, "localhost"):
		return []netip.AddrPort{netip.AddrPortFrom(netip.IPv6Loopback(), uint16(pn))}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	return []netip.AddrPort{netip.AddrPortFrom(a, uint16(pn))}
}
