// Package tlsmint is an in-memory certificate authority for a browser's egress proxy: it mints,
// for each host a recording or replaying session opens a TLS connection to, a certificate the
// proxy presents in the site's place, so the proxy sees (and records, or answers from an archive)
// what travels inside (ADR 0037).
//
// Its key is made when the authority is, lives only in this process's memory, and is trusted by
// one browser only, by the hash of its public key (Chromium's --ignore-certificate-errors-spki-list):
// no other browser, system store or file ever trusts it. The proxy verifies the real site's
// certificate itself, against the system's roots, before anything is sent.
package tlsmint

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"math/big"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// maxCached bounds the certificates kept; past it the cache starts over (minting one costs an
// ECDSA signature, about 30 µs).
const maxCached = 1024

// validity is how long a minted certificate (and the authority) is valid from a day before it was
// made: longer than any browser process lives.
const validity = 90 * 24 * time.Hour

// Authority mints certificates for hosts under a key of its own. It is safe for concurrent use.
type Authority struct {
	key     *ecdsa.PrivateKey
	cert    *x509.Certificate
	leafKey *ecdsa.PrivateKey
	now     func() time.Time

	mu     sync.Mutex
	serial int64
	cache  map[string]*tls.Certificate
}

// New makes an authority with a fresh P-256 key (now: nil is time.Now).
func New(now func() time.Time) (*Authority, error) {
	if now == nil {
		now = time.Now
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsmint: generating the authority's key: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsmint: generating the certificates' key: %w", err)
	}
	start := now().Add(-24 * time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "BAP egress proxy (one browser, in memory)"},
		NotBefore:             start,
		NotAfter:              start.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tlsmint: signing the authority's certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsmint: %w", err)
	}
	return &Authority{key: key, cert: cert, leafKey: leafKey, now: now, serial: 1, cache: map[string]*tls.Certificate{}}, nil
}

// SPKIHash is the base64 SHA-256 of the authority's SubjectPublicKeyInfo, the form Chromium's
// --ignore-certificate-errors-spki-list takes.
func (a *Authority) SPKIHash() string {
	sum := sha256.Sum256(a.cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Root is the authority's certificate (for a client that trusts it by pool, as tests do).
func (a *Authority) Root() *x509.Certificate { return a.cert }

// Certificate returns a certificate for host (a DNS name or an IP address, no port), signed by
// the authority and chained to it.
func (a *Authority) Certificate(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	ip, ipErr := netip.ParseAddr(strings.Trim(host, "[]"))
	if ipErr != nil && !validDNSName(host) {
		return nil, fmt.Errorf("tlsmint: %q is not a host name or an IP address", host)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.cache[host]; ok {
		return c, nil
	}
	a.serial++
	start := a.now().Add(-24 * time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(a.serial),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    start,
		NotAfter:     start.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ipErr == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("tlsmint: signing a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsmint: %w", err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: a.leafKey, Leaf: leaf}
	if len(a.cache) >= maxCached {
		a.cache = map[string]*tls.Certificate{}
	}
	a.cache[host] = c
	return c, nil
}

// validDNSName reports whether s (lower case) is a DNS name a certificate may carry: labels of
// letters, digits, hyphens and underscores, 1–63 bytes each, 253 in all.
func validDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}
