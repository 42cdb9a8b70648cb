package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNotInstalled reports that no directory holds all of initdb, pg_ctl and postgres.
var ErrNotInstalled = errors.New("PostgreSQL server binaries not found (install the Debian package `postgresql`)")

// debianBinGlob is where the Debian packages postgresql-<major> put the server binaries.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// binaries is one installation of the PostgreSQL server programs.
type binaries struct {
	dir     string // holds initdb, pg_ctl and postgres
	version string // as printed by `postgres --version`, e.g. "15.18"
	major   string // e.g. "15" (or "9.6" for versions before 10), comparable with PG_VERSION
}

func (b binaries) path(program string) string { return filepath.Join(b.dir, program) }

// findBinaries picks the installation to run. Candidates are the directory of initdb found on pathEnv
// (symlinks resolved) and every directory matching glob. When dataMajor (the PG_VERSION of an existing
// cluster) is set, the candidate of that major version is chosen, because a cluster can only be run by
// the major version that created it; otherwise the highest version wins, ties going to PATH.
func findBinaries(ctx context.Context, pathEnv, glob, dataMajor string) (binaries, error) {
	var dirs []string
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if p, err := filepath.EvalSymlinks(filepath.Join(d, "initdb")); err == nil {
			dirs = append(dirs, filepath.Dir(p))
			break
		}
	}
	if glob != "" {
		matches, err := filepath.Glob(glob)
		if err != nil {
			return binaries{}, fmt.Errorf("listing %s: %w", glob, err)
		}
		dirs = append(dirs, matches...)
	}

	var found []binaries
	seen := map[string]bool{}
	for _, d := range dirs {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			d = r
		}
		if seen[d] || !hasPrograms(d) {
			continue
		}
		seen[d] = true
		b, err := probe(ctx, d)
		if err != nil {
			return binaries{}, err
		}
		found = append(found, b)
	}
	return choose(found, dataMajor)
}

// choose implements the preference order documented on findBinaries.
func choose(found []binaries, dataMajor string) (binaries, error) {
	if len(found) == 0 {
		return binaries{}, ErrNotInstalled
	}
	if dataMajor != "" {
		var have []string
		for _, b := range found {
			if b.major == dataMajor {
				return b, nil
			}
			have = append(have, b.major)
		}
		return binaries{}, fmt.Errorf("the cluster was created by PostgreSQL %s but only PostgreSQL %s is installed "+
			"(install the Debian package `postgresql-%s`, or upgrade the cluster with pg_upgrade): %w",
			dataMajor, strings.Join(have, ", "), dataMajor, ErrNotInstalled)
	}
	best := found[0]
	for _, b := range found[1:] {
		if compareVersions(b.version, best.version) > 0 {
			best = b
		}
	}
	return best, nil
}

func hasPrograms(dir string) bool {
	for _, p := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// probe asks the postgres binary in dir for its version. `postgres --version` is allowed as root.
func probe(ctx context.Context, dir string) (binaries, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return binaries{}, fmt.Errorf("running %s --version: %w", filepath.Join(dir, "postgres"), err)
	}
	v, err := parseVersion(string(out))
	if err != nil {
		return binaries{}, fmt.Errorf("%s: %w", filepath.Join(dir, "postgres"), err)
	}
	return binaries{dir: dir, version: v, major: majorOf(v)}, nil
}

// parseVersion extracts "15.18" from "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)".
func parseVersion(s string) (string, error) {
	f := strings.Fields(s)
	for i, w := range f {
		if w == "(PostgreSQL)" && i+1 < len(f) {
			v := f[i+1]
			// Development builds print e.g. "17beta1" or "18devel": keep the leading numeric part.
			end := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
			if end >= 0 {
				v = v[:end]
			}
			if v == "" || v[0] == '.' {
				break
			}
			return strings.TrimSuffix(v, "."), nil
		}
	}
	return "", fmt.Errorf("unrecognised version output %q", strings.TrimSpace(s))
}

// majorOf returns the major version as PG_VERSION spells it: "15" for 15.18, "9.6" for 9.6.24.
func majorOf(v string) string {
	parts := strings.Split(v, ".")
	if n, err := strconv.Atoi(parts[0]); err == nil && n < 10 && len(parts) > 1 {
		return parts[0] + "." + parts[1]
	}
	return parts[0]
}

// compareVersions compares dotted numeric versions.
func compareVersions(a, b string) int {
	num := func(s string) []int {
		var out []int
		for _, p := range strings.Split(s, ".") {
			n, _ := strconv.Atoi(p)
			out = append(out, n)
		}
		return out
	}
	return slices.Compare(num(a), num(b))
}

// ProgramPath returns the path of one program (pg_dump, psql, …) of the installation a new
// embedded cluster would run: for tools and tests that need the client matching the server
// (pg_dump of a cluster refuses a newer server).
func ProgramPath(ctx context.Context, program string) (string, error) {
	b, err := findBinaries(ctx, os.Getenv("PATH"), debianBinGlob, "")
	if err != nil {
		return "", err
	}
	return b.path(program), nil
}
