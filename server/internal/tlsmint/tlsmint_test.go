package tlsmint

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"testing"
	"time"
)

func TestCertificatesVerifyAgainstTheAuthorityOnly(t *testing.T) {
	t.Parallel()
	a, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host, verifyAs string
		wantErr        bool
	}{
		{host: "shop.example.com", verifyAs: "shop.example.com"},
		{host: "SHOP.example.com.", verifyAs: "shop.example.com"},
		{host: "127.0.0.1", verifyAs: "127.0.0.1"},
		{host: "[::1]", verifyAs: "::1"},
		{host: "shop.example.com", verifyAs: "bank.example.com", wantErr: true},
	}
	for _, tc := range tests {
		c, err := a.Certificate(tc.host)
		if err != nil {
			t.Fatalf("%s: %v", tc.host, err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(a.Root())
		_, err = c.Leaf.Verify(x509.VerifyOptions{DNSName: tc.verifyAs, Roots: roots, CurrentTime: time.Now()})
		if (err != nil) != tc.wantErr {
			t.Errorf("%s as %s: %v", tc.host, tc.verifyAs, err)
		}
		// Another authority's root does not verify it: each browser trusts its own.
		others := x509.NewCertPool()
		others.AddCert(other.Root())
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: tc.verifyAs, Roots: others}); err == nil {
			t.Errorf("%s verified against another authority", tc.host)
		}
	}
	if c1, _ := a.Certificate("shop.example.com"); c1 == nil {
		t.Fatal("no certificate")
	} else if c2, _ := a.Certificate("shop.example.com"); c1 != c2 {
		t.Error("a host's certificate was minted twice")
	}
}

func TestRefusesWhatIsNotAHost(t *testing.T) {
	t.Parallel()
	a, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"", "a b", "shop..example", "-shop.example", "shop.example.com:443", "*.example.com", "ex\x00ample"} {
		if _, err := a.Certificate(h); err == nil {
			t.Errorf("%q: minted", h)
		}
	}
}

func TestSPKIHashIsTheKeysHash(t *testing.T) {
	t.Parallel()
	a, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(a.Root().RawSubjectPublicKeyInfo)
	if got, want := a.SPKIHash(), base64.StdEncoding.EncodeToString(sum[:]); got != want {
		t.Fatalf("SPKIHash %s, want %s", got, want)
	}
	c, _ := a.Certificate("shop.example.com")
	if len(c.Certificate) != 2 || string(c.Certificate[1]) != string(a.Root().Raw) {
		t.Fatal("the chain does not carry the authority's certificate (the browser matches its key there)")
	}
}

func FuzzCertificate(f *testing.F) {
	for _, s := range []string{"shop.example.com", "127.0.0.1", "[::1]", "", "a..b", "xn--bcher-kva.example", "_dmarc.example"} {
		f.Add(s)
	}
	a, err := New(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host string) {
		c, err := a.Certificate(host)
		if err != nil {
			return
		}
		if len(c.Leaf.DNSNames)+len(c.Leaf.IPAddresses) != 1 {
			t.Fatalf("%q: %d names", host, len(c.Leaf.DNSNames)+len(c.Leaf.IPAddresses))
		}
	})
}
