package policy

import (
	"net/netip"
	"net/url"
)

// privatePrefixes are the address ranges a page must not reach unless the policy names the host:
// they lead to the machine itself, its link, its private networks or its provider's
// infrastructure (169.254.169.254 is the cloud metadata service), not to the public web.
var privatePrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // "this network": 0.0.0.0 reaches the local host on Linux
		"10.0.0.0/8",     // RFC 1918
		"100.64.0.0/10",  // CGNAT (RFC 6598)
		"127.0.0.0/8",    // loopback
		"169.254.0.0/16", // link-local, cloud metadata
		"172.16.0.0/12",  // RFC 1918
		"192.0.0.0/24",   // IETF protocol assignments
		"192.168.0.0/16", // RFC 1918
		"198.18.0.0/15",  // benchmarking, used inside some provider networks
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, broadcast
		"::/128",         // unspecified
		"::1/128",        // loopback
		"64:ff9b:1::/48", // local-use NAT64 (RFC 8215)
		"fc00::/7",       // unique local (ULA)
		"fe80::/10",      // link-local
		"fec0::/10",      // deprecated site-local
		"ff00::/8",       // multicast
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// PrivateAddr reports whether a is a loopback, link-local, private (RFC 1918), CGNAT,
// unique-local, unspecified, multicast or reserved address. An IPv4-mapped IPv6 address is
// judged as its IPv4 address; an invalid address counts as private (fail closed).
func PrivateAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.Unmap()
	for _, p := range privatePrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// NamesExplicitly reports whether an allowed pattern without a host wildcard matches the origin of
// u: the policy names u's host itself (a port wildcard is fine, http://127.0.0.1:* names
// 127.0.0.1). Only such an origin may lead to a private address ([PrivateAddr]); a pattern like
// https://*.example.com never does, even when one of its names resolves to 10.0.0.5.
func (p *Policy) NamesExplicitly(u *url.URL) bool {
	if p == nil {
		return false
	}
	o, ok := originOf(u)
	if !ok {
		return false
	}
	for _, pat := range p.allowed {
		if !pat.anySub && pat.matches(o) {
			return true
		}
	}
	return false
}
