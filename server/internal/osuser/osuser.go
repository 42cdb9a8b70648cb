// Package osuser is the unprivileged OS account a child process runs as when bap runs as root:
// PostgreSQL refuses root, and Chromium's sandbox needs a non-root user. It resolves the account,
// gives child processes its credentials and prepares files and directories for it.
//
// When the process does not run as root, the account is the current user and nothing switches:
// Credential is nil and Chown does nothing.
package osuser

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// ErrRoot reports an account that is root (uid 0): the point of switching is not to be root.
var ErrRoot = errors.New("the account is root")

// Account is the OS user a child process runs as and its files belong to.
type Account struct {
	// Name is the user name ("" when the current uid has no passwd entry).
	Name string
	UID  uint32
	GID  uint32
	// Groups are the supplementary groups; together with GID they decide directory access.
	Groups []uint32
	// Switch is set when this process runs as root and children must run as this account.
	Switch bool
	// Role names the account in messages, e.g. "cluster user" or "browser user".
	Role string
}

// Resolve returns the account named runAs when euid is 0, else the current user, for which runAs
// must be empty or name it. role names the account in errors. A runAs that does not exist wraps
// [user.UnknownUserError]; one that is root wraps [ErrRoot].
func Resolve(euid int, runAs, role string) (Account, error) {
	if euid != 0 {
		a := Account{UID: uint32(euid), GID: uint32(os.Getegid()), Role: role} //nolint:gosec // ids are non-negative
		if u, err := user.LookupId(strconv.Itoa(euid)); err == nil {
			a.Name = u.Username
		}
		if runAs != "" && runAs != a.Name {
			return Account{}, fmt.Errorf("the %s %q needs root; this process runs as uid %d", role, runAs, euid)
		}
		return a, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		return Account{}, fmt.Errorf("looking up the %s %q: %w", role, runAs, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return Account{}, fmt.Errorf("%s %q: %w", role, runAs, err)
	}
	if uid == 0 {
		return Account{}, fmt.Errorf("%s %q: %w", role, runAs, ErrRoot)
	}
	a := Account{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Switch: true, Role: role}
	gids, err := u.GroupIds()
	if err != nil {
		return Account{}, fmt.Errorf("listing the groups of %q: %w", runAs, err)
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) != a.GID {
			a.Groups = append(a.Groups, uint32(n))
		}
	}
	return a, nil
}

// Credential is what child processes run as; nil means "as we are".
func (a Account) Credential() *syscall.Credential {
	if !a.Switch {
		return nil
	}
	return &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: a.Groups}
}

// Chown gives path (not what a symlink points to) to the account when we run as root; otherwise
// it is already ours.
func (a Account) Chown(path string) error {
	if !a.Switch {
		return nil
	}
	if err := os.Lchown(path, int(a.UID), int(a.GID)); err != nil {
		return fmt.Errorf("giving %s to %s: %w", path, a.Name, err)
	}
	return nil
}

// CheckSearchable reports the first directory from / down to dir that the account cannot search
// (enter), judging by the mode bits the way the kernel does: owner bits for the owner, else group
// bits for its groups, else the other bits. ACLs are not consulted.
func (a Account) CheckSearchable(dir string) error {
	if !a.Switch {
		return nil // we created or were given the directory and can evidently use it
	}
	var chain []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	slices.Reverse(chain)
	for _, d := range chain {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("checking access of %s: %w", d, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if !a.canSearch(fi.Mode().Perm(), st.Uid, st.Gid) {
			return fmt.Errorf("the %s %s (uid %d) cannot enter %s (mode %04o, owner uid %d, group gid %d): "+
				"every directory above %s must be searchable by it, e.g. `chmod o+x %s`",
				a.Role, a.Name, a.UID, d, fi.Mode().Perm(), st.Uid, st.Gid, dir, d)
		}
	}
	return nil
}

func (a Account) canSearch(perm fs.FileMode, uid, gid uint32) bool {
	switch {
	case uid == a.UID:
		return perm&0o100 != 0
	case gid == a.GID || slices.Contains(a.Groups, gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// EnsurePrivateDir makes dir a directory owned by the account with mode 0700. When adopt is false
// the directory must not exist yet or must already be exactly that (it lives in a shared place such
// as /tmp, where someone else could have created it first); when true it is fixed up.
func (a Account) EnsurePrivateDir(dir string, adopt bool) error {
	err := os.Mkdir(dir, 0o700)
	switch {
	case err == nil:
		if err := a.Chown(dir); err != nil {
			return err
		}
		return os.Chmod(dir, 0o700)
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("checking %s: %w", dir, err)
	}
	if adopt {
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		if err := a.Chown(dir); err != nil {
			return err
		}
		return os.Chmod(dir, 0o700)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != a.UID || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("refusing to use %s: it is not a directory owned by uid %d "+
			"with mode 0700 (mode %v); remove it if it is stale", dir, a.UID, fi.Mode())
	}
	return nil
}
