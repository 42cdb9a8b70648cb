package osuser

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	var unknown user.UnknownUserError
	for _, tc := range []struct {
		name  string
		euid  int
		runAs string
		check func(Account, error) bool
	}{
		{"root is refused", 0, "root", func(_ Account, err error) bool { return errors.Is(err, ErrRoot) }},
		{"a missing account", 0, "bap-no-such-user-4711", func(_ Account, err error) bool { return errors.As(err, &unknown) }},
		{"another account needs root", 4711, "root", func(_ Account, err error) bool {
			return err != nil && strings.Contains(err.Error(), "needs root")
		}},
		{"not root: the current user, no switch", 4711, "", func(a Account, err error) bool {
			return err == nil && a.UID == 4711 && !a.Switch && a.Credential() == nil && a.Chown("/nonexistent") == nil
		}},
	} {
		a, err := Resolve(tc.euid, tc.runAs, "test user")
		if !tc.check(a, err) {
			t.Errorf("%s: Resolve(%d, %q) = %+v, %v", tc.name, tc.euid, tc.runAs, a, err)
		}
	}
}

func TestEnsurePrivateDir(t *testing.T) {
	t.Parallel()
	a, err := Resolve(os.Geteuid(), "", "test user")
	if os.Geteuid() == 0 {
		a = Account{UID: 0, Role: "test user"} // root, no switch: the directory stays ours
	} else if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	fresh := filepath.Join(base, "fresh")
	if err := a.EnsurePrivateDir(fresh, false); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created %s: %v, %v; want mode 0700", fresh, fi.Mode(), err)
	}
	if err := a.EnsurePrivateDir(fresh, false); err != nil {
		t.Errorf("an existing private dir: %v", err)
	}
	loose := filepath.Join(base, "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.EnsurePrivateDir(loose, false); err == nil || !strings.Contains(err.Error(), "refusing to use") {
		t.Errorf("a 0755 dir not adopted = %v, want a refusal", err)
	}
	if err := a.EnsurePrivateDir(loose, true); err != nil {
		t.Errorf("adopting %s: %v", loose, err)
	}
	if fi, _ := os.Stat(loose); fi.Mode().Perm() != 0o700 {
		t.Errorf("adopted %s has mode %v, want 0700", loose, fi.Mode())
	}
}
