package policy

import (
	"net/netip"
	"net/url"
	"testing"
)

func TestPrivateAddr(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr    string
		private bool
	}{
		{"127.0.0.1", true}, {"127.1.2.3", true}, {"0.0.0.0", true}, {"10.0.0.5", true},
		{"172.16.0.1", true}, {"172.31.255.255", true}, {"172.32.0.1", false},
		{"192.168.1.1", true}, {"169.254.169.254", true}, {"100.64.0.1", true}, {"100.128.0.1", false},
		{"224.0.0.251", true}, {"255.255.255.255", true},
		{"::1", true}, {"::", true}, {"fe80::1", true}, {"fd12:3456::1", true}, {"ff02::1", true},
		{"::ffff:127.0.0.1", true}, {"::ffff:10.1.1.1", true}, {"::ffff:93.184.216.34", false},
		{"93.184.216.34", false}, {"8.8.8.8", false}, {"2606:4700::1111", false},
	} {
		if got := PrivateAddr(netip.MustParseAddr(tt.addr)); got != tt.private {
			t.Errorf("PrivateAddr(%s) = %v, want %v", tt.addr, got, tt.private)
		}
	}
	if !PrivateAddr(netip.Addr{}) {
		t.Error("the zero address must count as private (fail closed)")
	}
}

func TestNamesExplicitly(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy([]string{"https://*.example.com", "https://api.example.com", "http://127.0.0.1:*", "http://localhost:8080"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		url   string
		named bool
	}{
		{"https://api.example.com/x", true},
		{"wss://api.example.com/socket", true},
		{"https://shop.example.com/", false}, // allowed, but only through the wildcard
		{"http://127.0.0.1:9/", true},
		{"ws://127.0.0.1:4000/", true},
		{"https://127.0.0.1/", false}, // another scheme
		{"http://localhost:8080/", true},
		{"http://localhost:8081/", false},
		{"http://10.0.0.5/", false},
	} {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.NamesExplicitly(u); got != tt.named {
			t.Errorf("NamesExplicitly(%s) = %v, want %v", tt.url, got, tt.named)
		}
	}
	var nilPolicy *Policy
	if nilPolicy.NamesExplicitly(&url.URL{Scheme: "http", Host: "127.0.0.1"}) {
		t.Error("a nil policy names nothing")
	}
}
