package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/auth"
	"github.com/originweave/bap/server/internal/pgcluster"
	"github.com/originweave/bap/server/internal/ratelimit"
	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/store"
)

// validateRemote checks the remote profile's settings: TLS (or an explicit --insecure-http), URLs.
func (c *Config) validateRemote() error {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	switch {
	case c.TLSCert == "" && !c.InsecureHTTP:
		return errors.New("the remote profile serves TLS: give --tls-cert and --tls-key (or --insecure-http, for tests only)")
	case c.TLSCert != "" && c.InsecureHTTP:
		return errors.New("--insecure-http and --tls-cert/--tls-key contradict each other")
	}
	if ip := net.ParseIP(host); (host == "" || (ip != nil && ip.IsUnspecified())) && c.advertiseDefaulted {
		return fmt.Errorf("--listen %q serves every interface: give --advertise-url, the URL clients reach this server at (it is the OAuth resource and issuer)", c.Listen)
	}
	for flag, v := range map[string]string{"--advertise-url": c.AdvertiseURL, "--issuer": c.Issuer} {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%s %q: must be an absolute http(s) URL without query or fragment", flag, v)
		}
		if flag == "--issuer" && strings.Trim(u.Path, "/") != "" {
			return fmt.Errorf("--issuer %q: an issuer with a path is not supported", v)
		}
	}
	return nil
}

// remote is the wiring of the remote profile: the authorization server, the bearer-token check
// and the per-client limiter, and the TCP listener opened early (so that a --listen with port 0
// yields URLs with the real port).
type remote struct {
	auth    *auth.Server
	limiter *ratelimit.Limiter
	tcp     net.Listener
}

// prelisten opens the remote profile's TCP listener (TLS when configured) and, when the URLs were
// derived from a --listen with port 0, rewrites them with the port the kernel chose.
func prelisten(cfg *Config) (net.Listener, error) {
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	if _, port, _ := net.SplitHostPort(cfg.Listen); port == "0" {
		host, _, _ := net.SplitHostPort(cfg.Listen)
		_, real, _ := net.SplitHostPort(l.Addr().String())
		base := scheme(cfg) + "://" + net.JoinHostPort(host, real)
		if cfg.advertiseDefaulted {
			cfg.AdvertiseURL = base
		}
		if cfg.issuerDefaulted {
			cfg.Issuer = cfg.AdvertiseURL
		}
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("loading --tls-cert/--tls-key: %w", err)
		}
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	return l, nil
}

func scheme(cfg *Config) string {
	if cfg.TLSCert != "" {
		return "https"
	}
	return "http"
}

// newRemote builds the authorization server on pool.
func newRemote(ctx context.Context, cfg Config, pool *pgxpool.Pool, key *serverkey.Key, log *slog.Logger, tcp net.Listener) (*remote, error) {
	as, err := auth.New(ctx, auth.Config{
		// The resource is the public URL (the issuer's, which defaults to the advertise URL): behind a
		// load balancer every node serves the same resource at its own --advertise-url.
		Pool: pool, ServerKey: key, Issuer: cfg.Issuer, Resource: cfg.Issuer, AccessTokenTTL: cfg.AccessTokenTTL, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	rate, burst := cfg.ClientRateLimit, cfg.ClientBurst
	if rate == 0 {
		rate, burst = 100, 200
	}
	return &remote{auth: as, limiter: ratelimit.New(rate, burst), tcp: tcp}, nil
}

// apply sets the remote profile's authentication in the transport's options.
func (r *remote) apply(o *api.Options) {
	o.Authenticator = api.Bearer{Verifier: r.auth, ResourceMetadataURL: r.auth.ResourceMetadataURL()}
	o.Audit = r.auth.Audit()
	o.Limiter = r.limiter
	for _, rt := range r.auth.Routes() {
		o.Mount = append(o.Mount, api.Mount{Pattern: rt.Pattern, Label: rt.Label, Handler: rt.Handler})
	}
}

// ErrDataDirInUse is returned when another bap process owns the embedded cluster of the data dir.
var ErrDataDirInUse = errors.New("data dir in use")

// OpenAdminDatabase opens the database for an administrative command (`bap client …`, `bap user
// …`): like OpenDatabase, except that when a running `bap serve` owns the embedded cluster of
// cfg.DataDir it connects to that cluster through its Unix socket instead of refusing, without
// owning, migrating or stopping it (it checks that the schema is the one this build knows).
func OpenAdminDatabase(ctx context.Context, cfg Config) (*Database, error) {
	cfg.setDefaults()
	db, err := OpenDatabase(ctx, cfg)
	if !errors.Is(err, ErrDataDirInUse) {
		return db, err
	}
	dsn, err := pgcluster.ConnStringFor(cfg.DataDir, pgcluster.Database)
	if err != nil {
		return nil, err
	}
	pool, err := store.Open(ctx, dsn, 2)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database of the running server: %w", err)
	}
	// A server that is still starting may be applying migrations: wait for it (up to a minute).
	want := store.SchemaVersion()
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := store.AppliedVersion(ctx, pool)
		if err == nil && v == want {
			return &Database{Pool: pool}, nil
		}
		if (err == nil && v > want) || time.Now().After(deadline) || ctx.Err() != nil {
			pool.Close()
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("the running server's database has schema %d, this bap knows %d: use the same bap version", v, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
