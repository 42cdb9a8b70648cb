// Package tmptree makes private temporary directory trees that belong to a live process, and
// removes the trees of processes that have exited.
//
// A browser's profile (cookies, local storage, caches, downloads) lives in such a tree while the
// browser runs, and the process that started it removes the tree when the browser stops. A
// process that is killed never gets to: without this package its trees would stay in the
// temporary directory, with a session's cookies in them, until the machine is cleaned.
//
// Each tree holds a lock file, locked (flock) by its process for as long as the tree is in use.
// The kernel drops the lock when the process ends, however it ends, so a tree whose lock can be
// taken belongs to nobody and [SweepDead] removes it. A tree without a lock file (being made, or
// made by an older version) is left alone: only a tree that says whose it is can be judged dead.
package tmptree

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// LockName is the lock file in a tree's root: a 0600 file of the tree's process's user.
const LockName = ".owner.lock"

// pendingName is where the lock file is made and locked before it is renamed into place, so that
// a sweep never sees a lock file nobody holds yet.
const pendingName = ".owner.lock.pending"

// Tree is a directory made by [New] and held by this process until Close. Keep the Tree
// reachable while the directory is in use: Go closes an unreachable file (its finalizer), and
// closing the lock file frees the tree for any sweep.
type Tree struct {
	// Dir is the tree's root: a new directory, mode 0700, of this process's user.
	Dir  string
	lock *os.File
}

// New makes a fresh directory named prefix followed by a random string in parent (the temporary
// directory when parent is ""), and locks it for this process.
func New(parent, prefix string) (*Tree, error) {
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return nil, err
	}
	lock, err := lockInto(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return &Tree{Dir: dir, lock: lock}, nil
}

// lockInto creates the tree's lock file, locked before anyone can find it under its name.
func lockInto(dir string) (*os.File, error) {
	pending := filepath.Join(dir, pendingName)
	f, err := os.OpenFile(pending, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	err = flock(f)
	if err == nil {
		err = os.Rename(pending, filepath.Join(dir, LockName))
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// Close releases the tree without removing it: the caller removes the tree first, or leaves it
// for the next [SweepDead].
func (t *Tree) Close() error {
	return t.lock.Close()
}

// SweepDead removes the trees in parent (the temporary directory when parent is "") whose names
// start with prefix, that belong to this process's user, and whose lock no process holds. It
// returns the trees it removed; an error names the trees it could not judge or remove, and never
// stops the sweep. Links, other users' directories and trees without a lock file are not touched.
func SweepDead(parent, prefix string) ([]string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) || !e.IsDir() { // a link is not a directory here
			continue
		}
		dir := filepath.Join(parent, e.Name())
		dead, err := sweepOne(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dir, err))
		}
		if dead {
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}

// SweepDeadAndLog is [SweepDead] in the temporary directory, for a start that must not fail on
// it: it logs how many trees it removed, and as a warning what it could not judge or remove.
func SweepDeadAndLog(log *slog.Logger, prefix string) {
	removed, err := SweepDead("", prefix)
	if len(removed) > 0 {
		log.Info("removed the temporary trees of exited processes", "prefix", prefix, "count", len(removed))
	}
	if err != nil {
		log.Warn("some temporary trees of other processes could not be judged or removed", "prefix", prefix, "err", err)
	}
}

// sweepOne removes dir when it is this user's and its lock is free, holding the lock meanwhile.
func sweepOne(dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || !ownedByMe(fi) {
		return false, nil //nolint:nilerr // gone since the listing, or not ours: nothing to judge
	}
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	lfi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !lfi.Mode().IsRegular() || !ownedByMe(lfi) {
		return false, nil
	}
	switch err := flock(f); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return false, nil // its process lives
	case err != nil:
		return false, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, err
	}
	return true, nil
}

// flock takes f's exclusive lock without waiting.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) //nolint:gosec // a descriptor fits an int
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// ownedByMe reports whether fi belongs to this process's effective user.
func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
