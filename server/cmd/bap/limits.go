package main

import (
	"errors"
	"flag"
	"strconv"

	"github.com/originweave/bap/server/internal/daemon"
)

// capFlag is a backpressure cap of `bap serve`: N > 0 caps at N, 0 means no cap. It starts at the
// daemon's default, so -h shows the default; daemon.Config reads 0 as "the default" and a negative
// value as "no cap", hence the translation.
type capFlag struct{ p *int }

func (c capFlag) String() string {
	if c.p == nil {
		return ""
	}
	if *c.p < 0 {
		return "0"
	}
	return strconv.Itoa(*c.p)
}

func (c capFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return errors.New("must be a whole number ≥ 0 (0: no cap)")
	}
	if n == 0 {
		n = -1
	}
	*c.p = n
	return nil
}

// limitFlags adds the backpressure flags (docs/operability.md, "Backpressure").
func limitFlags(fs *flag.FlagSet, cfg *daemon.Config) {
	for _, f := range []struct {
		p     *int
		def   int
		name  string
		usage string
	}{
		{&cfg.MaxSessions, daemon.DefaultMaxSessions, "max-sessions", "at most `N` browser sessions on this node; more → 503 overloaded (0: no cap)"},
		{&cfg.MaxSessionsPerTenant, daemon.DefaultMaxSessionsPerTenant, "max-sessions-per-tenant", "at most `N` open browser sessions per tenant, all nodes together; more → 429 rate_limited (0: no cap)"},
		{&cfg.MaxInflight, daemon.DefaultMaxInflight, "max-inflight", "at most `N` requests in flight on this node (event streams excluded); more → 503 overloaded (0: no cap)"},
		{&cfg.MaxInflightPerTenant, daemon.DefaultMaxInflightPerTenant, "max-inflight-per-tenant", "at most `N` requests in flight per tenant on this node; more → 429 rate_limited (0: no cap)"},
		{&cfg.MaxQueuedTasksPerTenant, daemon.DefaultMaxQueuedTasksPerTenant, "max-queued-tasks", "at most `N` waiting tasks per tenant (created, or delegated and not started); more → create_task 429 rate_limited (0: no cap)"},
	} {
		*f.p = f.def
		fs.Var(capFlag{f.p}, f.name, f.usage)
	}
}
