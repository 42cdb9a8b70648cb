package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/browser"
	"github.com/originweave/bap/server/internal/version"
)

// startBrowser starts this node's Chromium. Without one the server still runs: browser operations
// answer 503 browser_unavailable (naming the Debian package) and everything else works.
func startBrowser(ctx context.Context, cfg Config, log *slog.Logger) (app.Browser, func()) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	b, err := browser.Start(ctx, browser.Config{Binary: cfg.Chromium, Logger: log.With("component", "browser"),
		MaxSessions: cfg.browserMaxSessions(), RunAsUser: cfg.BrowserUser, NoSandbox: cfg.BrowserNoSandbox,
		ServerAddrs: listenAddrs(cfg.Listen)})
	if err != nil {
		var sandbox *browser.SandboxError
		switch {
		case errors.As(err, &sandbox):
			// Fail closed: no browser rather than one without its sandbox; the error names the fix.
			log.Error("the browser's sandbox cannot start: browser operations will answer 503 browser_unavailable", "err", err)
		case errors.Is(err, browser.ErrUnavailable):
			log.Warn("no browser: browser operations will answer 503 browser_unavailable", "err", err)
		default:
			log.Error("starting the browser failed: browser operations will answer 503 browser_unavailable", "err", err)
		}
		return nil, func() {}
	}
	return BrowserPort{Browser: b}, func() {
		if err := b.Close(); err != nil {
			log.Warn("closing the browser", "err", err)
		}
	}
}

// versioned is a browser that says which product and DevTools protocol version it runs.
type versioned interface {
	Version() (product, protocol string)
}

// nodeAdapters are the protocol adapters this node serves, with their versions: BAP over HTTP,
// MCP (every node mounts /mcp) and, when its browser runs, CDP with the browser's version.
func nodeAdapters(br app.Browser) []app.ProtocolAdapter {
	out := []app.ProtocolAdapter{
		{ID: app.AdapterBAPHTTP, Name: "BAP over HTTP", ProtocolVersion: version.BAP},
		{ID: app.AdapterMCP, Name: "Model Context Protocol", ProtocolVersion: version.MCP},
	}
	if v, ok := br.(versioned); ok {
		if product, protocol := v.Version(); protocol != "" {
			out = append(out, app.ProtocolAdapter{ID: app.AdapterCDP, Name: "Chrome DevTools Protocol",
				ProtocolVersion: protocol, Implementation: product})
		}
	}
	return out
}

// BrowserNoSandboxWarning is the standing warning of a node whose browser runs without its sandbox
// (on /readyz and in `bap version`).
const BrowserNoSandboxWarning = "the browser runs without its sandbox (--browser-no-sandbox)"

// browserWarnings are the node's standing warnings about its browser, for /readyz.
func browserWarnings(cfg Config, br app.Browser) []string {
	if br != nil && cfg.BrowserNoSandbox {
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
