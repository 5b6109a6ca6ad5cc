package testkit

import (
	"testing"

	"github.com/heraldgo/herald/internal/pgcluster"
)

// PrivatePostgres is a PostgreSQL cluster of the test's own, made with
// initdb in a temporary directory and run with pg_ctl on a free port, so a
// test can crash and restart it (or run it with settings of its own)
// without touching the machine's shared server. It runs as the OS user
// postgres when the test runs as root (initdb refuses root).
type PrivatePostgres = pgcluster.Cluster

// NewPrivatePostgres initialises and starts a private cluster with the
// given extra server settings ("name=value"), and stops and removes it when
// the test ends. It fails the test, saying what is missing, when the
// PostgreSQL server binaries are not installed; -short skips it.
func NewPrivatePostgres(t testing.TB, settings ...string) *PrivatePostgres {
	t.Helper()
	needServer(t, "a private PostgreSQL cluster (initdb, pg_ctl)")
	p, err := pgcluster.Start(settings...)
	if p != nil {
		t.Cleanup(func() { _ = p.Stop() })
	}
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return p
}
