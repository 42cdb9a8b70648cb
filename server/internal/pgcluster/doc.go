// Package pgcluster runs an embedded, private PostgreSQL cluster with the PostgreSQL server binaries
// installed on the machine (initdb, pg_ctl, postgres). `bap serve` uses it when BAP_DATABASE_URL is not
// set, and the pgtest harness uses it for tests.
//
// It owns one directory, Config.DataDir:
//
//	<DataDir>/pgdata          the cluster (initdb'd into pgdata.initdb first, renamed when complete)
//	<DataDir>/pgsock          the Unix socket directory, mode 0700
//	<DataDir>/postgres.log    the server's output, appended to at every start
//	<DataDir>/pgcluster.lock  flock(2) held while Start runs, so two processes never race
//
// # Access
//
// The server listens on its Unix socket only (an empty listen_addresses). The socket directory and socket
// are mode 0700 and owned by the cluster's OS user, and pg_hba.conf trusts exactly one role, the
// superuser `bap`, on the local socket; everything else is rejected. So only the cluster's OS user
// (and root) can connect, without a password. Unix socket paths are limited to 107 bytes; when
// <DataDir>/pgsock/.s.PGSQL.5432 would be longer (or the path has a comma, which a connection string
// cannot carry in its host), the socket directory is /tmp/bap-pg-<hash>, where
// <hash> is the first 16 hex digits of the SHA-256 of the absolute data dir. That directory is created
// 0700 and owned by the cluster user, refused if it exists with another owner or a looser mode, and
// removed (when empty) by Stop.
//
// # Users
//
// PostgreSQL refuses to run as root. When the process runs as root, initdb, pg_ctl and postgres run as
// Config.RunAsUser (default "postgres", the user the Debian package creates), pgdata, the socket
// directory and postgres.log are owned by that user, and every directory above them must be searchable
// by it (Start checks the mode bits and says which directory to fix). Otherwise everything runs as the
// current user.
//
// # Lifecycle
//
// Start runs initdb when pgdata has no complete cluster, then starts the server with pg_ctl, or adopts a
// server that is already running on pgdata (a bap killed without stopping it leaves one running). An
// adopted server is owned like a started one: Stop stops it. A stale postmaster.pid whose process is
// dead is left for pg_ctl and postgres to handle; pgcluster never deletes it. Server settings live in
// <DataDir>/pgdata/bap.conf, rewritten at every start and included at the end of postgresql.conf, so
// ALTER SYSTEM still overrides them.
//
// pgcluster imports pgx only to check that the server answers and to create the `bap` database. It must
// not import any other bap package.
package pgcluster
