package daemon

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/auth"
	"github.com/originweave/bap/server/internal/console"
)

// mountConsole serves the operator console at /console (ADR 0020) and puts its authenticator in
// front of the profile's: in the local profile the console's session cookie (a one-time login URL
// from `bap console` on the socket), in the remote profile nothing but bearer tokens, with the
// console's public client registered for every tenant with people. It returns the setter of the
// TCP address the local login URLs name (known once the server listens).
func mountConsole(ctx context.Context, cfg Config, o *api.Options, svc *app.Service, pool *pgxpool.Pool, log *slog.Logger) (func(addr string), error) {
	var public atomic.Pointer[string]
	co := console.Options{Profile: console.ProfileLocal, Service: svc, Logger: log.With("adapter", "console"),
		PublicURL: func() string {
			if p := public.Load(); p != nil {
				return *p
			}
			return ""
		}}
	if cfg.Profile == ProfileRemote {
		co.Profile = console.ProfileRemote
		co.Issuer = strings.TrimSuffix(cfg.Issuer, "/")
		co.Resource = auth.CanonicalResource(cfg.Issuer)
		co.Auth = console.Wrap(nil, o.Authenticator)
		if err := auth.EnsureConsoleClients(ctx, pool, co.Issuer+"/console/"); err != nil {
			return nil, err
		}
	} else {
		co.Auth = console.Wrap(console.NewSessions(nil), o.Authenticator)
	}
	o.Authenticator = co.Auth.ForAPI()
	h := console.New(co)
	o.Mount = append(o.Mount, api.Mount{Pattern: "/console", Label: "console", Handler: h},
		api.Mount{Pattern: "/console/", Label: "console", Handler: h})
	return func(addr string) {
		u := "http://" + addr
		public.Store(&u)
	}, nil
}
