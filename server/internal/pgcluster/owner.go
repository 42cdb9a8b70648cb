package pgcluster

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

// owner is the OS user the cluster's files belong to and its programs run as.
type owner struct {
	name string
	uid  uint32
	gid  uint32
	// groups are the supplementary groups; together with gid they decide directory access.
	groups []uint32
	// switchUser is set when we run as root and must run the PostgreSQL programs as this user.
	switchUser bool
}

// resolveOwner returns the cluster user: runAs when euid is 0, else the current user, for which
// runAs must be empty or name it.
func resolveOwner(euid int, runAs string) (owner, error) {
	if euid != 0 {
		o := owner{uid: uint32(euid), gid: uint32(os.Getegid())} //nolint:gosec // ids are non-negative
		if u, err := user.LookupId(strconv.Itoa(euid)); err == nil {
			o.name = u.Username
		}
		if runAs != "" && runAs != o.name {
			return owner{}, fmt.Errorf("RunAsUser %q needs root; this process runs as uid %d", runAs, euid)
		}
		return o, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		return owner{}, fmt.Errorf("looking up the cluster user %q (PostgreSQL refuses to run as root; "+
			"the Debian package `postgresql` creates the user `postgres`): %w", runAs, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return owner{}, fmt.Errorf("cluster user %q: %w", runAs, err)
	}
	if uid == 0 {
		return owner{}, fmt.Errorf("cluster user %q is root: PostgreSQL refuses to run as root", runAs)
	}
	o := owner{name: u.Username, uid: uint32(uid), gid: uint32(gid), switchUser: true}
	gids, err := u.GroupIds()
	if err != nil {
		return owner{}, fmt.Errorf("listing the groups of %q: %w", runAs, err)
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) != o.gid {
			o.groups = append(o.groups, uint32(n))
		}
	}
	return o, nil
}

// credential is what child processes run as; nil means "as we are".
func (o owner) credential() *syscall.Credential {
	if !o.switchUser {
		return nil
	}
	return &syscall.Credential{Uid: o.uid, Gid: o.gid, Groups: o.groups}
}

// chown gives path to the cluster user when we run as root; otherwise it is already ours.
func (o owner) chown(path string) error {
	if !o.switchUser {
		return nil
	}
	if err := os.Lchown(path, int(o.uid), int(o.gid)); err != nil {
		return fmt.Errorf("giving %s to %s: %w", path, o.name, err)
	}
	return nil
}

// checkSearchable reports the first directory from / down to dir that the cluster user cannot search
// (enter), judging by the mode bits the way the kernel does: owner bits for the owner, else group bits
// for its groups, else the other bits. ACLs are not consulted.
func (o owner) checkSearchable(dir string) error {
	if !o.switchUser {
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
		if !o.canSearch(fi.Mode().Perm(), st.Uid, st.Gid) {
			return fmt.Errorf("the cluster user %s (uid %d) cannot enter %s (mode %04o, owner uid %d, group gid %d): "+
				"every directory above the data dir must be searchable by it, e.g. `chmod o+x %s`",
				o.name, o.uid, d, fi.Mode().Perm(), st.Uid, st.Gid, d)
		}
	}
	return nil
}

func (o owner) canSearch(perm fs.FileMode, uid, gid uint32) bool {
	switch {
	case uid == o.uid:
		return perm&0o100 != 0
	case gid == o.gid || slices.Contains(o.groups, gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// ensurePrivateDir makes dir a directory owned by the cluster user with mode 0700. When adopt is
// false the directory must not exist yet or must already be exactly that (it lives in a shared place
// such as /tmp, where someone else could have created it first); when true it is fixed up.
func (o owner) ensurePrivateDir(dir string, adopt bool) error {
	err := os.Mkdir(dir, 0o700)
	switch {
	case err == nil:
		if err := o.chown(dir); err != nil {
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
		if err := o.chown(dir); err != nil {
			return err
		}
		return os.Chmod(dir, 0o700)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != o.uid || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("refusing to use %s as the socket directory: it is not a directory owned by uid %d "+
			"with mode 0700 (mode %v); remove it if it is stale", dir, o.uid, fi.Mode())
	}
	return nil
}
