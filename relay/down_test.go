package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// throughProxy opens dsn (PostgreSQL, URL form) through a TCP proxy the
// test controls.
func throughProxy(t *testing.T, dsn string) (*sql.DB, *testkit.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("needs a URL-form PostgreSQL DSN to put a proxy in front of it: %v", err)
	}
	p := testkit.NewProxy(t, u.Host)
	u.Host = p.Addr()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, p
}

func hasLog(logs *logRecords, level slog.Level, substr string) bool {
	for _, r := range logs.atLeast(level) {
		if strings.Contains(r.Message, substr) {
			return true
		}
	}
	return false
}

// Regression (issue 9 §3): relay.New with the database down returned
// ErrConfiguration ("outbox table … is missing"), which a service treats
// as permanent. New now returns the relay, Run keeps trying and logs while
// the database is down, and delivers once it is back.
func TestRelayStartsWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	db, p := throughProxy(t, e.dsn)
	p.SetDown(true)
	logs := &logRecords{}
	rec := &recorder{}
	r, err := New(db, rec, Config{Logger: slog.New(logs), MinPollInterval: time.Millisecond, MaxPollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("New with the database down: %v (ErrConfiguration: %v)", err, errors.Is(err, envelope.ErrConfiguration))
	}
	if !hasLog(logs, slog.LevelWarn, "does not answer") {
		t.Fatal("New did not say the database does not answer")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	e.enqueue(t, msg("a", "k", 1))
	testkit.Eventually(t, 30*time.Second, func() bool { return hasLog(logs, slog.LevelWarn, "poll failed") },
		"a WARN while the database is down")
	if rec.count() != 0 {
		t.Fatal("delivered through a proxy that is down")
	}
	p.SetDown(false)
	testkit.Eventually(t, 30*time.Second, func() bool { return rec.count() == 1 }, "delivered once the database is back")
	// Connections cut under a running relay: it goes on.
	p.Cut()
	e.enqueue(t, msg("a", "k", 2))
	testkit.Eventually(t, 30*time.Second, func() bool { return rec.count() == 2 }, "delivered after the connections were cut")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A missing table is still ErrConfiguration: from New when the database
// answers, and from Run when the database first answers after New.
func TestMissingTableIsAConfigurationErrorWhenTheDatabaseAnswers(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.Postgres(t) // a schema of its own, no outbox table
	db, p := throughProxy(t, dsn)
	d := &recorder{}
	quiet := slog.New(slog.DiscardHandler)
	if _, err := New(db, d, Config{Logger: quiet}); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "envelope.Migrate") {
		t.Fatalf("New, database up, no table: %v", err)
	}
	p.SetDown(true)
	r, err := New(db, d, Config{Logger: quiet, MinPollInterval: time.Millisecond, MaxPollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("New, database down: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("Run ended while the database was down: %v", err)
	default:
	}
	p.SetDown(false)
	select {
	case err := <-done:
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("Run, once the database answers without the table: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not end on the missing table within a minute")
	}
	<-r.Stopped()
}

// wrappedDriver hides pgx behind a driver type the relay does not know,
// as otelsql and similar wrappers do.
type wrappedDriver struct{ driver.Driver }

var registerWrapped sync.Once

// A driver the relay does not know makes New ask the database for the
// dialect; with the database down that is a connection error, not
// ErrConfiguration, and Config.Dialect avoids it.
func TestUnknownDriverWithTheDatabaseDown(t *testing.T) {
	t.Parallel()
	registerWrapped.Do(func() { sql.Register("herald-wrapped-pgx", wrappedDriver{stdlib.GetDefaultDriver()}) })
	e := newEnv(t, envelope.Postgres)
	u, err := url.Parse(e.dsn)
	if err != nil || u.Host == "" {
		t.Skip("needs a URL-form DSN")
	}
	p := testkit.NewProxy(t, u.Host)
	u.Host = p.Addr()
	db, err := sql.Open("herald-wrapped-pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	quiet := slog.New(slog.DiscardHandler)
	if r, err := New(db, &recorder{}, Config{Logger: quiet}); err != nil || r.Dialect() != envelope.Postgres {
		t.Fatalf("database up: %v", err)
	}
	p.SetDown(true)
	_, err = New(db, &recorder{}, Config{Logger: quiet})
	if err == nil || errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "Config.Dialect") {
		t.Fatalf("database down, dialect unknown: %v; want a connection error that points at Config.Dialect", err)
	}
	if _, err := New(db, &recorder{}, Config{Logger: quiet, Dialect: envelope.Postgres}); err != nil {
		t.Fatalf("database down, Config.Dialect set: %v", err)
	}
}

// A partitioned outbox table, or one with inheritance children, is refused
// by New with ErrConfiguration naming the table: the lease finds the rows
// it locked again by their ctid, unique within one table only.
func TestSplitTableIsAConfigurationError(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, "herald_outbox"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE herald_parted (LIKE herald_outbox INCLUDING DEFAULTS) PARTITION BY RANGE (sequence)`,
		`CREATE TABLE herald_parted_paused (LIKE herald_outbox_paused INCLUDING ALL)`,
		`CREATE TABLE herald_parted_1 PARTITION OF herald_parted FOR VALUES FROM (MINVALUE) TO (MAXVALUE)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	if _, err := New(db, &recorder{}, Config{Logger: quiet}); err != nil {
		t.Fatalf("New on the plain table: %v", err)
	}
	if _, err := New(db, &recorder{}, Config{Logger: quiet, Table: "herald_parted"}); !errors.Is(err, envelope.ErrConfiguration) ||
		!strings.Contains(err.Error(), "herald_parted is partitioned") {
		t.Fatalf("New on a partitioned table: %v; want ErrConfiguration naming herald_parted", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE herald_outbox_child () INHERITS (herald_outbox)`); err != nil {
		t.Fatal(err)
	}
	if _, err := New(db, &recorder{}, Config{Logger: quiet}); !errors.Is(err, envelope.ErrConfiguration) ||
		!strings.Contains(err.Error(), "inheritance children") {
		t.Fatalf("New on a table with an inheritance child: %v; want ErrConfiguration", err)
	}
}
