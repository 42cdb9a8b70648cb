package policy_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/policy"
)

func TestParsePatternValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // canonical String()
	}{
		{"https://example.com", "https://example.com"},
		{"HTTPS://Example.COM", "https://example.com"},
		{"https://example.com:443", "https://example.com"},
		{"http://example.com:80", "http://example.com"},
		{"http://example.com:443", "http://example.com:443"},
		{"https://example.com:80", "https://example.com:80"},
		{"https://example.com:8443", "https://example.com:8443"},
		{"https://example.com:08443", "https://example.com:8443"},
		{"http://127.0.0.1:*", "http://127.0.0.1:*"},
		{"http://127.0.0.1", "http://127.0.0.1"},
		{"http://localhost:3000", "http://localhost:3000"},
		{"https://*.example.com", "https://*.example.com"},
		{"https://*.Example.com:*", "https://*.example.com:*"},
		{"http://*.localhost:*", "http://*.localhost:*"},
		{"https://*.co.uk", "https://*.co.uk"},
		{"http://[::1]:8080", "http://[::1]:8080"},
		{"http://[::1]:80", "http://[::1]"},
		{"http://[0:0:0:0:0:0:0:1]", "http://[::1]"},
		{"https://[2001:DB8::A]:*", "https://[2001:db8::a]:*"},
		{"http://[::ffff:127.0.0.1]", "http://[::ffff:127.0.0.1]"},
		{"https://xn--bcher-kva.example", "https://xn--bcher-kva.example"},
		{"https://a-b_c.example.com", "https://a-b_c.example.com"},
		{"https://example.com:65535", "https://example.com:65535"},
		{"https://" + strings.Repeat("a", 63) + ".com", "https://" + strings.Repeat("a", 63) + ".com"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			p, err := policy.ParsePattern(tt.in)
			if err != nil {
				t.Fatalf("ParsePattern(%q): %v", tt.in, err)
			}
			if got := p.String(); got != tt.want {
				t.Fatalf("ParsePattern(%q).String() = %q, want %q", tt.in, got, tt.want)
			}
			q, err := policy.ParsePattern(p.String())
			if err != nil || q != p {
				t.Fatalf("round trip of %q: %v, %v", p, q, err)
			}
		})
	}
}

func TestParsePatternInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		reason string // a substring of the error
	}{
		{"", "empty"},
		{"example.com", `missing "://"`},
		{"about:blank", `missing "://"`},
		{"data:text/html,hi", `missing "://"`},
		{"javascript:alert(1)", `missing "://"`},
		{"://example.com", "missing scheme"},
		{"ftp://example.com", "only http and https"},
		{"file:///etc/passwd", "only http and https"},
		{"ws://example.com", "allow the http origin"},
		{"wss://example.com", "allow the https origin"},
		{"https://example.com/", "has a path"},
		{"https://example.com/app", "has a path"},
		{"https://example.com?x=1", "has a query"},
		{"https://example.com#top", "has a fragment"},
		{"https://user@example.com", "userinfo"},
		{"https://user:pw@example.com", "userinfo"},
		{`https://example.com\evil.com`, "backslash"},
		{"https://", "missing host"},
		{"https://:443", "missing host"},
		{"https://example.com:", "empty port"},
		{"https://example.com:0", "port must be"},
		{"https://example.com:65536", "port must be"},
		{"https://example.com:123456", "port must be"},
		{"https://example.com:-1", "port must be"},
		{"https://example.com:8a", "port must be"},
		{"https://example.com:**", "port must be"},
		{"https://*", `"*" may only`},
		{"https://*.*.example.com", `"*" may only`},
		{"https://a.*.example.com", `"*" may only`},
		{"https://*example.com", `"*" may only`},
		{"https://ex*ample.com", `"*" may only`},
		{"https://example.*", `"*" may only`},
		{"https://*.com", "top-level domain"},
		{"https://*.", "empty label"},
		{"https://*.127.0.0.1", "cannot precede an IP"},
		{"https://example.com.", "empty label"},
		{"https://.example.com", "empty label"},
		{"https://example..com", "empty label"},
		{"https://" + strings.Repeat("a", 64) + ".com", "longer than 63"},
		{"https://" + strings.Repeat("a.", 127) + "com", "host longer than 253"},
		{"https://" + strings.Repeat("a", 600), "longer than 512"},
		{"https://exa mple.com", "whitespace"},
		{" https://example.com", "whitespace"},
		{"https://example.com\n", "whitespace"},
		{"https://bücher.example", "punycode"},
		{"https://exa%6dple.com", `contains "%"`},
		{"https://example.com;x", `contains ";"`},
		{"https://1.2.3", "dotted-quad"},
		{"https://0x7f.0.0.1", "dotted-quad"},
		{"https://127.0.0.01", "dotted-quad"},
		{"https://2130706433", "dotted-quad"},
		{"https://example.0x10", "dotted-quad"},
		{"https://256.0.0.1", "dotted-quad"},
		{"http://::1", "in brackets"},
		{"http://::1:80", "in brackets"},
		{"http://[::1", `closing "]"`},
		{"http://[::1]x", "unexpected characters"},
		{"http://[::1]:", "empty port"},
		{"http://[127.0.0.1]", "without brackets"},
		{"http://[fe80::1%25eth0]", "IPv6"},
		{"http://[example.com]", "invalid IPv6"},
		{"http://[*]", "invalid IPv6"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			p, err := policy.ParsePattern(tt.in)
			if err == nil {
				t.Fatalf("ParsePattern(%q) = %q, want an error", tt.in, p)
			}
			if p != (policy.Pattern{}) {
				t.Errorf("ParsePattern(%q) returned %q with its error", tt.in, p)
			}
			if !errors.Is(err, policy.ErrInvalidPattern) {
				t.Errorf("errors.Is(%v, ErrInvalidPattern) = false", err)
			}
			var pe *policy.PatternError
			if !errors.As(err, &pe) || pe.Pattern != tt.in {
				t.Fatalf("error %v is not a *PatternError for %q", err, tt.in)
			}
			if !strings.Contains(pe.Reason, tt.reason) {
				t.Errorf("ParsePattern(%q) reason %q does not mention %q", tt.in, pe.Reason, tt.reason)
			}
		})
	}
}

func TestPatternMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		url     string
		want    bool
	}{
		// Exact origin, default ports.
		{"https://example.com", "https://example.com/", true},
		{"https://example.com", "https://example.com/a/b?c=d#e", true},
		{"https://example.com", "https://EXAMPLE.com/", true},
		{"https://example.com", "HTTPS://example.com/", true},
		{"https://example.com", "https://example.com:443/", true},
		{"https://example.com", "https://example.com:/", true},
		{"https://example.com", "https://user:pw@example.com/", true},
		{"https://example.com", "https://example.com:8443/", false},
		{"https://example.com", "http://example.com/", false},
		{"https://example.com", "https://www.example.com/", false},
		{"https://example.com", "https://example.com.evil.com/", false},
		{"https://example.com", "https://evilexample.com/", false},
		{"https://example.com", "https://example.com./", false},
		{"https://example.com:443", "https://example.com/", true},
		{"http://example.com:8080", "http://example.com:8080/", true},
		{"http://example.com:8080", "http://example.com/", false},
		// WebSockets are checked against their http(s) twin.
		{"https://example.com", "wss://example.com/socket", true},
		{"https://example.com", "ws://example.com/socket", false},
		{"http://example.com", "ws://example.com/socket", true},
		{"http://example.com", "wss://example.com/socket", false},
		{"http://example.com:8080", "ws://example.com:8080/", true},
		// Any port.
		{"http://127.0.0.1:*", "http://127.0.0.1:5173/", true},
		{"http://127.0.0.1:*", "http://127.0.0.1/", true},
		{"http://127.0.0.1:*", "https://127.0.0.1:5173/", false},
		{"http://127.0.0.1:*", "http://127.0.0.2:5173/", false},
		{"http://127.0.0.1:*", "http://localhost:5173/", false},
		{"http://127.0.0.1:*", "http://[::ffff:127.0.0.1]:5173/", false},
		{"http://127.0.0.1:*", "http://2130706433/", false},
		{"http://127.0.0.1:*", "http://0x7f.0.0.1/", false},
		{"http://127.0.0.1:*", "http://127.1/", false},
		// One leading label.
		{"https://*.example.com", "https://a.example.com/", true},
		{"https://*.example.com", "https://A-1.Example.com/x", true},
		{"https://*.example.com", "https://example.com/", false},
		{"https://*.example.com", "https://a.b.example.com/", false},
		{"https://*.example.com", "https://aexample.com/", false},
		{"https://*.example.com", "https://a.example.com.evil.com/", false},
		{"https://*.example.com", "https://a.example.com:8443/", false},
		{"https://*.example.com", "http://a.example.com/", false},
		{"https://*.example.com:*", "https://a.example.com:8443/", true},
		{"http://*.localhost:*", "http://app.localhost:3000/", true},
		// IPv6.
		{"http://[::1]:*", "http://[::1]:8080/", true},
		{"http://[::1]:*", "http://[0:0::1]:8080/", true},
		{"http://[::1]", "http://[::1]/", true},
		{"http://[::1]", "http://[::2]/", false},
		{"http://[::1]", "http://localhost/", false},
		// Hosts that are not canonical or not ASCII never match.
		{"https://xn--bcher-kva.example", "https://bücher.example/", false},
		{"https://xn--bcher-kva.example", "https://xn--bcher-kva.example/", true},
		// Schemes that are not network origins never match.
		{"https://example.com", "data:text/html,<p>hi", false},
		{"https://example.com", "blob:https://example.com/0b5c", false},
		{"https://example.com", "javascript:alert(1)", false},
		{"https://example.com", "file:///etc/passwd", false},
		{"https://example.com", "about:blank", false},
		{"https://example.com", "https:example.com", false},
		{"https://example.com", "/relative", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.url, func(t *testing.T) {
			t.Parallel()
			p, err := policy.ParsePattern(tt.pattern)
			if err != nil {
				t.Fatalf("ParsePattern(%q): %v", tt.pattern, err)
			}
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatalf("url.Parse(%q): %v", tt.url, err)
			}
			if got := p.Matches(u); got != tt.want {
				t.Fatalf("%q.Matches(%q) = %v, want %v", tt.pattern, tt.url, got, tt.want)
			}
		})
	}
}

func TestPatternMatchesHandBuiltURLs(t *testing.T) {
	t.Parallel()
	p, err := policy.ParsePattern("https://example.com")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		u    *url.URL
		want bool
	}{
		{"nil", nil, false},
		{"plain", &url.URL{Scheme: "https", Host: "example.com"}, true},
		{"empty host", &url.URL{Scheme: "https", Path: "/x"}, false},
		{"garbage after ipv6", &url.URL{Scheme: "https", Host: "[::1]x"}, false},
		{"space in host", &url.URL{Scheme: "https", Host: "example.com "}, false},
		{"path in host", &url.URL{Scheme: "https", Host: "example.com/x"}, false},
		{"userinfo in host", &url.URL{Scheme: "https", Host: "evil.com@example.com"}, false},
		{"big port", &url.URL{Scheme: "https", Host: "example.com:70000"}, false},
		{"wildcard host", &url.URL{Scheme: "https", Host: "*.com"}, false},
		{"wildcard port", &url.URL{Scheme: "https", Host: "example.com:*"}, false},
	}
	for _, tt := range tests {
		if got := p.Matches(tt.u); got != tt.want {
			t.Errorf("%s: Matches(%v) = %v, want %v", tt.name, tt.u, got, tt.want)
		}
	}
	if (policy.Pattern{}).Matches(&url.URL{Scheme: "https", Host: "example.com"}) {
		t.Error("the zero Pattern matches a URL")
	}
	if (policy.Pattern{}).String() != "" {
		t.Error("the zero Pattern has a non-empty String()")
	}
}

// FuzzParsePattern checks that ParsePattern never panics, that its errors are
// typed, and that a parsed pattern round-trips through String() and matches
// a concrete URL built from it.
func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{
		"https://example.com", "HTTP://Example.COM:80", "http://127.0.0.1:*", "https://*.example.com",
		"https://*.example.com:*", "http://[::1]:8080", "http://[::ffff:1.2.3.4]", "https://[2001:db8::1]:*",
		"http://*.localhost", "https://example.com:0443", "https://xn--bcher-kva.example",
		"", "https://", "https://example.com/", "ws://example.com", "https://*.com", "https://1.2.3",
		"http://[::1", "http://::1", "https://a@b", "https://example.com:", "https://*", "data:,x",
		"https://bücher.example", "https://0x7f.1", "https://a..b", "http://[fe80::1%eth0]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := policy.ParsePattern(s)
		if err != nil {
			var pe *policy.PatternError
			if !errors.As(err, &pe) || !errors.Is(err, policy.ErrInvalidPattern) || pe.Reason == "" {
				t.Fatalf("ParsePattern(%q) error %v is not a *PatternError", s, err)
			}
			return
		}
		canon := p.String()
		q, err := policy.ParsePattern(canon)
		if err != nil {
			t.Fatalf("ParsePattern(%q) = %q, which does not parse: %v", s, canon, err)
		}
		if q != p || q.String() != canon {
			t.Fatalf("round trip of %q: %q != %q", s, q, canon)
		}
		// A concrete URL inside the pattern must match it.
		concrete := strings.Replace(canon, "://*.", "://x.", 1)
		if c, ok := strings.CutSuffix(concrete, ":*"); ok {
			concrete = c + ":8080"
		}
		concrete += "/"
		u, err := url.Parse(concrete)
		if err != nil {
			return // net/url is stricter than browsers about some hosts
		}
		if !p.Matches(u) {
			t.Fatalf("pattern %q does not match %q", canon, concrete)
		}
	})
}
