package main

import (
	"flag"
	"os"
	"os/user"
	"strconv"

	"github.com/originweave/bap/server/internal/browser"
	"github.com/originweave/bap/server/internal/daemon"
)

// browserFlags are bap serve's flags of the browser: the engines it runs, the account the browser
// runs as when bap is root, and the explicit opt-out of its sandbox. Each defaults from the
// environment, which is also what `bap version` reports of the last two.
func browserFlags(fs *flag.FlagSet, cfg *daemon.Config) {
	engines := os.Getenv("BAP_ENGINES")
	if engines == "" {
		engines = daemon.DefaultEngines
	}
	cfg.Engines = daemon.ParseEngines(engines)
	fs.Func("engines", "comma-separated browser engines this node runs, the first the default of create_browser_session; each needs an adapter of this build, else bap serve refuses to start (default $BAP_ENGINES, else "+daemon.DefaultEngines+")",
		func(v string) error { cfg.Engines = daemon.ParseEngines(v); return nil })
	fs.StringVar(&cfg.BrowserUser, "browser-user", os.Getenv("BAP_BROWSER_USER"),
		"the unprivileged account Chromium runs as when bap runs as root (default "+browser.DefaultRunAsUser+", which scripts/install-deps.sh creates)")
	fs.BoolVar(&cfg.BrowserNoSandbox, "browser-no-sandbox", envNoSandbox(),
		"run Chromium WITHOUT its sandbox, only where it cannot start (logged at WARN, shown on /readyz; default $BAP_BROWSER_NO_SANDBOX)")
}

// envNoSandbox is BAP_BROWSER_NO_SANDBOX as a boolean; anything but a true value keeps the sandbox.
func envNoSandbox() bool {
	b, err := strconv.ParseBool(os.Getenv("BAP_BROWSER_NO_SANDBOX"))
	return err == nil && b
}

// addBrowserVersion adds to `bap version` how bap serve runs the browser under this environment
// (without flags): with or without its sandbox, and as which account.
func addBrowserVersion(v map[string]any) {
	noSandbox := envNoSandbox()
	v["browser_sandbox"] = !noSandbox
	name := os.Getenv("BAP_BROWSER_USER")
	if os.Geteuid() != 0 {
		name = ""
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	} else if name == "" {
		name = browser.DefaultRunAsUser
	}
	v["browser_user"] = name
	if noSandbox {
		v["warnings"] = []string{"BAP_BROWSER_NO_SANDBOX is set: " + daemon.BrowserNoSandboxWarning}
	}
}
