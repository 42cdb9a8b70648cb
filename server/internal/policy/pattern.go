package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// ErrInvalidPattern is the sentinel every [PatternError] wraps.
var ErrInvalidPattern = errors.New("invalid origin pattern")

// PatternError reports why an origin pattern was refused. It wraps
// [ErrInvalidPattern].
type PatternError struct {
	// Pattern is the refused input.
	Pattern string
	// Reason says what is wrong with it, in words fit for a problem detail.
	Reason string
}

// Error returns the pattern (shortened when long) and the reason.
func (e *PatternError) Error() string {
	p := e.Pattern
	if len(p) > 100 {
		p = p[:100] + "…"
	}
	return fmt.Sprintf("invalid origin pattern %q: %s", p, e.Reason)
}

// Unwrap returns [ErrInvalidPattern].
func (e *PatternError) Unwrap() error { return ErrInvalidPattern }

// maxPatternLen bounds the input of ParsePattern: scheme, 253-byte host and
// port fit well within it.
const maxPatternLen = 512

// maxNameLen is the longest DNS name, in its textual form without a trailing
// dot.
const maxNameLen = 253

// Pattern is a parsed origin pattern (scheme://host[:port], with the
// wildcards described in the package documentation). Its zero value matches
// nothing. Patterns are comparable: two patterns are == exactly when they
// have the same canonical [Pattern.String].
type Pattern struct {
	scheme  string     // "http" or "https"; "" in the zero value
	host    string     // lowercase DNS name, without "*." when anySub; "" for an IP
	addr    netip.Addr // the host when it is an IP literal
	port    uint16     // the port; 0 when anyPort
	anyPort bool       // port "*"
	anySub  bool       // host "*.<host>"
}

// ParsePattern parses an origin pattern and returns it in canonical form
// (scheme and host lowercased, default port dropped, IPv6 address
// compressed). Errors are *[PatternError].
func ParsePattern(s string) (Pattern, error) {
	p, reason := parse(s, modePattern)
	if reason != "" {
		return Pattern{}, &PatternError{Pattern: s, Reason: reason}
	}
	return p, nil
}

// String returns the canonical form of p, which [ParsePattern] parses back to
// p; it is "" for the zero Pattern.
func (p Pattern) String() string {
	if p.scheme == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString(p.scheme)
	b.WriteString("://")
	switch {
	case p.addr.Is4():
		b.WriteString(p.addr.String())
	case p.addr.IsValid():
		b.WriteString("[")
		b.WriteString(p.addr.String())
		b.WriteString("]")
	case p.anySub:
		b.WriteString("*.")
		b.WriteString(p.host)
	default:
		b.WriteString(p.host)
	}
	switch {
	case p.anyPort:
		b.WriteString(":*")
	case p.port != defaultPort(p.scheme):
		b.WriteString(":")
		b.WriteString(strconv.Itoa(int(p.port)))
	}
	return b.String()
}

// Matches reports whether the URL u is within p. Only http, https, ws and
// wss URLs can match (ws: as http:, wss: as https:); a nil URL matches
// nothing.
func (p Pattern) Matches(u *url.URL) bool {
	o, ok := originOf(u)
	return ok && p.matches(o)
}

// matches reports whether the concrete origin o (no wildcards) is within p.
func (p Pattern) matches(o Pattern) bool {
	if p.scheme == "" || p.scheme != o.scheme {
		return false
	}
	if !p.anyPort && p.port != o.port {
		return false
	}
	if p.addr.IsValid() || o.addr.IsValid() {
		return p.addr == o.addr
	}
	if p.anySub {
		label, ok := strings.CutSuffix(o.host, "."+p.host)
		return ok && label != "" && !strings.Contains(label, ".")
	}
	return p.host == o.host
}

// originOf returns the concrete origin of an http(s) or ws(s) URL, with ws
// and wss mapped to http and https.
func originOf(u *url.URL) (Pattern, bool) {
	if u == nil || u.Opaque != "" || u.Host == "" {
		return Pattern{}, false
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "http", "https":
	case "ws":
		scheme = "http"
	case "wss":
		scheme = "https"
	default:
		return Pattern{}, false
	}
	o, reason := parseAuthority(scheme, u.Host, modeURL)
	return o, reason == ""
}

// parseOrigin parses a serialised origin (scheme://host[:port]) with the
// pattern syntax but no wildcards.
func parseOrigin(s string) (Pattern, bool) {
	o, reason := parse(s, modeOrigin)
	return o, reason == ""
}

// mode says what parse and parseAuthority are reading.
type mode int

const (
	// modePattern reads an origin pattern: wildcards allowed.
	modePattern mode = iota
	// modeOrigin reads a serialised origin: no wildcards.
	modeOrigin
	// modeURL reads the authority of a parsed URL: no wildcards, and an
	// empty port after ":" means the default port, as in browsers.
	modeURL
)

func defaultPort(scheme string) uint16 {
	if scheme == "https" {
		return 443
	}
	return 80
}

// parse parses scheme://host[:port] in modePattern or modeOrigin; it
// returns a non-empty reason on failure.
func parse(s string, m mode) (Pattern, string) {
	if s == "" {
		return Pattern{}, "empty pattern"
	}
	if len(s) > maxPatternLen {
		return Pattern{}, fmt.Sprintf("longer than %d characters", maxPatternLen)
	}
	for i := range len(s) {
		switch c := s[i]; {
		case c >= 0x80:
			return Pattern{}, "contains non-ASCII characters; write an internationalised host in its punycode (xn--) form"
		case c <= ' ' || c == 0x7f:
			return Pattern{}, "contains whitespace or a control character"
		}
	}
	rawScheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Pattern{}, `missing "://": want scheme://host[:port] (about:blank is always allowed; data:, file: and javascript: never are)`
	}
	scheme := strings.ToLower(rawScheme)
	switch scheme {
	case "http", "https":
	case "ws", "wss":
		return Pattern{}, fmt.Sprintf("scheme %s is not accepted in patterns: allow the %s origin of the same host and port, which also covers its %s: sockets",
			scheme, map[string]string{"ws": "http", "wss": "https"}[scheme], scheme)
	case "":
		return Pattern{}, "missing scheme"
	default:
		return Pattern{}, fmt.Sprintf("scheme %q is not accepted: only http and https", rawScheme)
	}
	if i := strings.IndexAny(rest, `/?#@\`); i >= 0 {
		switch rest[i] {
		case '/':
			return Pattern{}, `has a path: an origin is scheme://host[:port], without even a trailing "/"`
		case '?':
			return Pattern{}, "has a query: an origin is scheme://host[:port]"
		case '#':
			return Pattern{}, "has a fragment: an origin is scheme://host[:port]"
		case '@':
			return Pattern{}, "has userinfo: an origin is scheme://host[:port]"
		default:
			return Pattern{}, "contains a backslash"
		}
	}
	return parseAuthority(scheme, rest, m)
}

// parseAuthority parses host[:port] for scheme in mode m.
func parseAuthority(scheme, hostport string, m mode) (Pattern, string) {
	wildcards := m == modePattern
	p := Pattern{scheme: scheme}
	var host, port string
	hasPort := false
	if rest, ok := strings.CutPrefix(hostport, "["); ok {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return Pattern{}, `IPv6 address without its closing "]"`
		}
		host = rest[:end]
		after := rest[end+1:]
		if after != "" {
			if after[0] != ':' {
				return Pattern{}, `unexpected characters after the IPv6 address; want [address]:port`
			}
			port, hasPort = after[1:], true
		}
		addr, err := netip.ParseAddr(host)
		switch {
		case err != nil || strings.Contains(host, "%"):
			return Pattern{}, "invalid IPv6 address (zones are not allowed)"
		case !addr.Is6():
			return Pattern{}, "an IPv4 address is written without brackets"
		}
		p.addr = addr
	} else {
		if strings.Count(hostport, ":") > 1 {
			return Pattern{}, "an IPv6 address must be written in brackets: [2001:db8::1]"
		}
		host, port, hasPort = strings.Cut(hostport, ":")
		host = strings.ToLower(host)
		if host == "" {
			return Pattern{}, "missing host"
		}
		if wildcards {
			if rest, ok := strings.CutPrefix(host, "*."); ok {
				p.anySub = true
				host = rest
			}
		}
		if strings.Contains(host, "*") {
			return Pattern{}, `"*" may only stand for the whole port (:*) or the whole leftmost label (*.example.com)`
		}
		if reason := checkName(host); reason != "" {
			return Pattern{}, reason
		}
		switch {
		case endsInNumber(host):
			addr, err := netip.ParseAddr(host)
			if err != nil || !addr.Is4() {
				return Pattern{}, "a host ending in a number must be an IPv4 address in dotted-quad form (like 127.0.0.1)"
			}
			if p.anySub {
				return Pattern{}, "a wildcard label cannot precede an IP address"
			}
			p.addr = addr
		case p.anySub && !strings.Contains(host, ".") && host != "localhost":
			return Pattern{}, fmt.Sprintf("*.%s would match every host under a top-level domain; name at least two labels after \"*.\"", host)
		default:
			p.host = host
		}
	}
	switch {
	case !hasPort || (port == "" && m == modeURL):
		p.port = defaultPort(scheme)
	case port == "":
		return Pattern{}, `empty port after ":"`
	case port == "*" && wildcards:
		p.anyPort = true
	default:
		n, ok := parsePort(port)
		if !ok {
			if wildcards {
				return Pattern{}, `port must be a number from 1 to 65535, or "*"`
			}
			return Pattern{}, "port must be a number from 1 to 65535"
		}
		p.port = n
	}
	return p, ""
}

// checkName returns why host is not an acceptable lowercase DNS name, or "".
func checkName(host string) string {
	if len(host) > maxNameLen {
		return fmt.Sprintf("host longer than %d characters", maxNameLen)
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" {
			return "host has an empty label (a leading, trailing or doubled dot)"
		}
		if len(label) > 63 {
			return "host has a label longer than 63 characters"
		}
		for i := range len(label) {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("host contains %q; a host is letters, digits, '-', '_' and dots (IPv6 in brackets)", string(c))
			}
		}
	}
	return ""
}

// endsInNumber reports whether the last label of the lowercase name host is
// a number in the sense of the WHATWG URL standard (decimal digits, or 0x
// and hex digits), which makes browsers parse the whole host as IPv4.
func endsInNumber(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// parsePort parses a decimal port 1–65535 (leading zeros allowed, as in
// browsers, up to five digits).
func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}
