// Package pgtest is the harness for tests that need PostgreSQL. A package's TestMain calls Main once;
// each test calls NewDB (or NewDBURL) and gets a database of its own, cloned from a template that Main's
// setup function (typically the migrations) prepared once for the whole test binary:
//
//	func TestMain(m *testing.M) { pgtest.Main(m, migrate.Apply) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := pgtest.NewDB(t)
//		...
//	}
//
// The server is BAP_TEST_DATABASE_URL when set (any server where that role may CREATE DATABASE; the
// harness never touches databases it did not create, all named bap_test_*), else a private cluster
// (package pgcluster) in a fresh directory under $TMPDIR, started at the first NewDB and stopped when
// the tests finish. The private cluster trades durability for speed (fsync off): its data is thrown
// away. A test binary that dies before stopping its cluster (a panic, -timeout) leaves it running; the
// next test binary that starts a private cluster stops and removes such leftovers (their owner.pid
// names a dead process).
//
// A missing database fails the test loudly (t.Fatal); it never skips.
//
// pgtest may import pgcluster and pgx; it must not import other bap packages, and only test code may
// import it.
package pgtest
