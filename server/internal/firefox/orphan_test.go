package firefox

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/tmptree"
	"github.com/originweave/bap/server/internal/waitfor"
)

// orphanHelperEnv makes this test binary the process TestKilledParentTakesFirefoxAlong kills:
// TestMain launches its browser there (under the TMPDIR the test gives it), and TestOrphanHelper
// says what it launched.
const orphanHelperEnv = "BAP_FIREFOX_ORPHAN_HELPER"

// TestKilledParentTakesFirefoxAlong: when the process that launched Firefox is killed (bap
// serve, SIGKILL), Firefox and its content processes exit too, rather than staying up with the
// Remote Agent listening and the sessions' cookies in the profile; and the tree it leaves behind
// is removed by the next launch (tmptree), as a dead process's tree already is by this one.
func TestKilledParentTakesFirefoxAlong(t *testing.T) {
	tmp, err := os.MkdirTemp("", "bap-firefox-orphan-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil { // the browser user passes through it
		t.Fatal(err)
	}
	earlier, err := tmptree.New(tmp, treePrefix) // the tree of a bap killed earlier
	if err != nil {
		t.Fatal(err)
	}
	if err := earlier.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestOrphanHelper$")
	cmd.Env = append(os.Environ(), orphanHelperEnv+"=1", "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // the helper waits on it until it is killed
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "firefox %d %s", &pid, &dir); err == nil {
			break
		}
	}
	if pid == 0 {
		_ = cmd.Process.Kill()
		t.Fatalf("the helper did not say what it launched: %v", cmd.Wait())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	if _, err := os.Lstat(earlier.Dir); !os.IsNotExist(err) {
		t.Errorf("the launch left the dead process's tree %s (%v)", earlier.Dir, err)
	}
	if alive := processGroup(t, pid); len(alive) == 0 {
		t.Fatalf("no live process in Firefox's group %d before the kill", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitfor.Until(t, 30*time.Second, "Firefox's processes exit with the process that launched them", func() (bool, string) {
		alive := processGroup(t, pid)
		return len(alive) == 0, fmt.Sprint("alive: ", alive)
	})
	removed, err := tmptree.SweepDead(tmp, treePrefix)
	if err != nil || !slices.Equal(removed, []string{dir}) {
		t.Fatalf("sweeping after the kill: removed %v (%v), want [%s]", removed, err, dir)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("left in the temporary directory: %v", entries)
	}
}

// TestOrphanHelper is the process TestKilledParentTakesFirefoxAlong kills; in a normal run it does
// nothing.
func TestOrphanHelper(t *testing.T) {
	if os.Getenv(orphanHelperEnv) == "" {
		return
	}
	fmt.Printf("firefox %d %s\n", browser.cmd.Process.Pid, browser.dir())
	_, _ = io.ReadAll(os.Stdin) // until the test kills this process
}
