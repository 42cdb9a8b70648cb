package pgcluster

import "path/filepath"

// ConnStringFor returns the connection string of the cluster under dataDir, as ConnString would
// for a running Cluster, without starting or adopting it: for a process that only connects to a
// cluster another process owns (e.g. `bap client create` next to a running `bap serve`). The
// socket's own permissions (and pg_hba.conf) still decide who may connect.
func ConnStringFor(dataDir, dbname string) (string, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", err
	}
	dir, _ := socketDirFor(abs)
	c := &Cluster{socketDir: dir, port: port}
	return c.ConnString(dbname), nil
}
