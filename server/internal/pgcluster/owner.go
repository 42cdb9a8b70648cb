package pgcluster

import (
	"errors"
	"fmt"
	"os/user"

	"github.com/originweave/bap/server/internal/osuser"
)

// owner is the OS user the cluster's files belong to and its programs run as.
type owner = osuser.Account

// resolveOwner returns the cluster user: runAs when euid is 0, else the current user, for which runAs
// must be empty or name it.
func resolveOwner(euid int, runAs string) (owner, error) {
	o, err := osuser.Resolve(euid, runAs, "cluster user")
	var unknown user.UnknownUserError
	switch {
	case errors.As(err, &unknown):
		return owner{}, fmt.Errorf("%w (PostgreSQL refuses to run as root; the Debian package `postgresql` "+
			"creates the user `postgres`)", err)
	case errors.Is(err, osuser.ErrRoot):
		return owner{}, fmt.Errorf("%w: PostgreSQL refuses to run as root", err)
	}
	return o, err
}
