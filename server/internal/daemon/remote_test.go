package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The two profiles are separate code paths in configuration: each refuses the other's settings.
func TestConfigProfiles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"local default", Config{}, ""},
		{"local non-loopback", Config{Listen: "0.0.0.0:7777"}, "loopback"},
		{"local with TLS", Config{TLSCert: "c", TLSKey: "k"}, "remote profile"},
		{"remote without TLS", Config{Profile: ProfileRemote}, "--tls-cert"},
		{"remote insecure", Config{Profile: ProfileRemote, InsecureHTTP: true}, ""},
		{"remote TLS", Config{Profile: ProfileRemote, TLSCert: "c", TLSKey: "k"}, ""},
		{"remote half TLS", Config{Profile: ProfileRemote, TLSCert: "c"}, "go together"},
		{"remote TLS and insecure", Config{Profile: ProfileRemote, TLSCert: "c", TLSKey: "k", InsecureHTTP: true}, "contradict"},
		{"remote all interfaces", Config{Profile: ProfileRemote, InsecureHTTP: true, Listen: "0.0.0.0:7443"}, "--advertise-url"},
		{"remote all interfaces advertised", Config{Profile: ProfileRemote, InsecureHTTP: true, Listen: "0.0.0.0:7443", AdvertiseURL: "https://bap.example.com"}, ""},
		{"remote bad advertise", Config{Profile: ProfileRemote, InsecureHTTP: true, AdvertiseURL: "bap.example.com"}, "absolute http(s) URL"},
		{"remote issuer with path", Config{Profile: ProfileRemote, InsecureHTTP: true, Issuer: "https://as.example.com/tenant"}, "path"},
		{"remote fixtures", Config{Profile: ProfileRemote, InsecureHTTP: true, MCPConformanceFixtures: true}, "local profile only"},
		{"ttl too long", Config{Profile: ProfileRemote, InsecureHTTP: true, AccessTokenTTL: time.Hour}, "at most 15m"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.cfg
			c.DataDir = t.TempDir()
			c.setDefaults()
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	c := Config{Profile: ProfileRemote, InsecureHTTP: true, Listen: "127.0.0.1:7443"}
	c.setDefaults()
	if c.AdvertiseURL != "http://127.0.0.1:7443" || c.Issuer != c.AdvertiseURL || c.Socket != "" {
		t.Errorf("remote defaults: advertise %q issuer %q socket %q", c.AdvertiseURL, c.Issuer, c.Socket)
	}
}

// prelisten serves TLS with --tls-cert/--tls-key and puts the kernel's port into the default URLs.
func TestPrelistenTLSAndPortZero(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)

	c := Config{Profile: ProfileRemote, Listen: "127.0.0.1:0", TLSCert: certFile, TLSKey: keyFile, DataDir: dir}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := prelisten(&c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	if c.AdvertiseURL != "https://127.0.0.1:"+port || c.Issuer != c.AdvertiseURL {
		t.Fatalf("URLs %q / %q, want https://127.0.0.1:%s", c.AdvertiseURL, c.Issuer, port)
	}
	go func() {
		conn, err := l.Accept()
		if err == nil {
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	pool := x509.NewCertPool()
	cert, _ := x509.ParseCertificate(der)
	pool.AddCert(cert)
	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	_ = conn.Close()

	bad := Config{Profile: ProfileRemote, Listen: "127.0.0.1:0", TLSCert: keyFile, TLSKey: certFile, DataDir: dir}
	bad.setDefaults()
	if _, err := prelisten(&bad); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Fatalf("swapped cert and key: %v", err)
	}
}
