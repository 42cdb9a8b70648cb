package firefox

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/originweave/bap/server/internal/osuser"
	"github.com/originweave/bap/server/internal/tlsmint"
)

// rootNickname names the authority in the profile's certificate database.
const rootNickname = "BAP egress proxy (this browser only, in memory)"

// trustNewAuthority makes an authority for the egress proxies of the browser about to start on
// profile, and has the profile trust it as a root for TLS servers (ADR 0037): NSS's certutil
// (Debian's libnss3-tools) creates the profile's certificate database and adds the authority's
// certificate, run as the browser's account so the database is its own. The profile is fresh and
// used by this browser alone; the key stays in this process's memory.
func trustNewAuthority(ctx context.Context, profile string, acct osuser.Account) (*tlsmint.Authority, error) {
	bin, err := exec.LookPath("certutil")
	if err != nil {
		return nil, fmt.Errorf("certutil (Debian's libnss3-tools) is not installed: %w", err)
	}
	a, err := tlsmint.New(nil)
	if err != nil {
		return nil, err
	}
	pemPath := filepath.Join(profile, "egress-root.pem")
	if err := os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Root().Raw}), 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(pemPath)
	if err := acct.Chown(pemPath); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db := "sql:" + profile
	for _, args := range [][]string{
		{"-N", "-d", db, "--empty-password"},
		{"-A", "-d", db, "-n", rootNickname, "-t", "C,,", "-i", pemPath},
	} {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + profile}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: acct.Credential()}
		if out, err := cmd.CombinedOutput(); err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return nil, fmt.Errorf("certutil %s: %w: %s", args[0], err, out)
			}
			return nil, fmt.Errorf("certutil %s: %w", args[0], err)
		}
	}
	return a, nil
}
