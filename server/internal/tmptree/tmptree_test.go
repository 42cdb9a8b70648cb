package tmptree

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// helperEnv names the parent directory a helper process makes its tree in (TestHelperHoldsATree).
const helperEnv = "TMPTREE_HELPER_PARENT"

func TestSweepRemovesOnlyTreesNobodyHolds(t *testing.T) {
	parent := t.TempDir()
	const prefix = "bap-test-"
	mk := func(t *testing.T) *Tree {
		t.Helper()
		tr, err := New(parent, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tr.Dir, "Cookies"), []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		return tr
	}

	held := mk(t)
	defer held.Close()
	released := mk(t)
	if err := released.Close(); err != nil {
		t.Fatal(err)
	}
	// A tree without a lock file: one being made, or an older version's.
	unlocked := filepath.Join(parent, prefix+"legacy")
	if err := os.Mkdir(unlocked, 0o700); err != nil {
		t.Fatal(err)
	}
	// A tree whose lock file was made but not yet renamed into place.
	pending := filepath.Join(parent, prefix+"pending")
	if err := os.Mkdir(pending, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pending, pendingName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A link named like a tree, to a released tree elsewhere: neither is touched.
	elsewhere := t.TempDir()
	target, err := New(elsewhere, prefix)
	if err != nil {
		t.Fatal(err)
	}
	_ = target.Close()
	link := filepath.Join(parent, prefix+"link")
	if err := os.Symlink(target.Dir, link); err != nil {
		t.Fatal(err)
	}
	// A released tree of another prefix.
	other, err := New(parent, "other-")
	if err != nil {
		t.Fatal(err)
	}
	_ = other.Close()
	// A tree whose lock file is a link to a free lock elsewhere.
	linkedLock := filepath.Join(parent, prefix+"linkedlock")
	if err := os.Mkdir(linkedLock, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(target.Dir, LockName), filepath.Join(linkedLock, LockName)); err != nil {
		t.Fatal(err)
	}

	removed, err := SweepDead(parent, prefix)
	if want := []string{released.Dir}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	if err == nil || !strings.Contains(err.Error(), "linkedlock") {
		t.Errorf("a lock file that is a link is reported: err = %v", err)
	}
	for _, gone := range []string{released.Dir} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", gone, err)
		}
	}
	for _, kept := range []string{held.Dir, unlocked, pending, link, target.Dir, other.Dir, linkedLock} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s was touched: %v", kept, err)
		}
	}
	if _, err := os.Stat(filepath.Join(held.Dir, "Cookies")); err != nil {
		t.Errorf("the held tree lost a file: %v", err)
	}
}

// TestSweepRemovesAKilledProcesssTree is the case the package is for: a process that holds a tree
// is killed; its tree is kept while it lives and removed once it has died.
func TestSweepRemovesAKilledProcesssTree(t *testing.T) {
	parent := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsATree$")
	cmd.Env = append(os.Environ(), helperEnv+"="+parent)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // the helper holds its tree until this closes or it is killed
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("the helper said nothing: %v", err)
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(line), "tree ")
	if !ok {
		_ = cmd.Process.Kill()
		t.Fatalf("the helper said %q", line)
	}

	if removed, err := SweepDead(parent, "bap-test-"); err != nil || len(removed) != 0 {
		t.Fatalf("while its process lives: removed %v, err %v", removed, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	removed, err := SweepDead(parent, "bap-test-")
	if err != nil || !slices.Equal(removed, []string{dir}) {
		t.Fatalf("after its process was killed: removed %v, err %v; want [%s]", removed, err, dir)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s is still there (%v)", dir, err)
	}
}

// TestHelperHoldsATree is the process TestSweepRemovesAKilledProcesssTree kills; it does nothing
// in a normal run.
func TestHelperHoldsATree(t *testing.T) {
	parent := os.Getenv(helperEnv)
	if parent == "" {
		return
	}
	tr, err := New(parent, "bap-test-")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("tree", tr.Dir)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the test kills us
	runtime.KeepAlive(tr)                             // an unreachable lock file would be closed by its finalizer
	os.Exit(0)
}

func TestNewMakesAPrivateDirectory(t *testing.T) {
	tr, err := New(t.TempDir(), "bap-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	fi, err := os.Stat(tr.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Errorf("mode %v, want a 0700 directory", fi.Mode())
	}
	entries, err := os.ReadDir(tr.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != LockName {
		t.Errorf("a new tree holds %v, want only its lock file", entries)
	}
}

func TestSweepDeadAndLogSaysWhatItRemoved(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // SweepDeadAndLog sweeps the temporary directory
	for range 2 {
		tr, err := New(tmp, "bap-test-")
		if err != nil {
			t.Fatal(err)
		}
		_ = tr.Close()
	}
	var logs strings.Builder
	SweepDeadAndLog(slog.New(slog.NewTextHandler(&logs, nil)), "bap-test-")
	if got := logs.String(); !strings.Contains(got, `msg="removed the temporary trees of exited processes" prefix=bap-test- count=2`) {
		t.Errorf("logged %q", got)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}
