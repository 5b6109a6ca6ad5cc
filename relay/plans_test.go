package relay

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestRelayStatementsPlannedPerExecution: on pgx's default query mode (the
// statement cache) no statement of the relay is planned generically — a
// generic plan made while the table was empty reads the whole table for
// the connection's life. Thirty events delivered one by one, on one
// connection shared with the test (MaxOpenConns 1): pg_prepared_statements
// of that connection holds no relay statement with a generic plan. Before
// the relay passed pgx's cache-describe mode, the lease and the mark were
// named statements there, planned generically after their fifth
// execution.
func TestRelayStatementsPlannedPerExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	e.db.SetMaxOpenConns(1)
	rec := &recorder{}
	r := e.newRelay(t, rec, Config{})
	if r.execMode.Load() == nil {
		t.Fatal("no exec mode found for pgx's stdlib driver in its default mode")
	}
	start(t, r)
	for i := range 30 {
		e.enqueue(t, msg("t", "", i))
		testkit.Eventually(t, 10*time.Second, func() bool { return rec.count() == i+1 }, "event %d not delivered", i)
	}
	var named, generic int
	if err := e.db.QueryRowContext(context.Background(), `SELECT count(*), coalesce(sum(generic_plans), 0) FROM pg_prepared_statements
		WHERE statement LIKE '%leased_by%' AND statement NOT LIKE '%pg_prepared_statements%' AND statement NOT LIKE '%WHERE 1 = 0'`).Scan(&named, &generic); err != nil {
		t.Fatal(err)
	}
	if generic > 0 || named > 0 {
		var s string
		_ = e.db.QueryRowContext(context.Background(), `SELECT left(statement, 300) FROM pg_prepared_statements WHERE statement LIKE '%leased_by%' AND statement NOT LIKE '%pg_prepared_statements%' AND statement NOT LIKE '%WHERE 1 = 0'`).Scan(&s)
		t.Log(s)
		t.Fatalf("the relay's statements: %d named, %d executions with a generic plan; want none (planned at each execution)", named, generic)
	}
}

// TestRelayKeepsConfiguredExecMode: a pgx pool configured for another
// query mode (simple protocol, as behind PgBouncer) is left in it.
func TestRelayKeepsConfiguredExecMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	db, err := openDB("pgx", e.dsn+"&default_query_exec_mode=simple_protocol")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e.db = db
	rec := &recorder{}
	r := e.newRelay(t, rec, Config{})
	if m := r.execMode.Load(); m != nil {
		t.Fatalf("exec mode %v set on a pool in simple-protocol mode", *m)
	}
	start(t, r)
	e.enqueue(t, msg("t", "", 1))
	testkit.Eventually(t, 10*time.Second, func() bool { return rec.count() == 1 }, "not delivered")
}

// TestWarnsOfConnectionChurn: a relay whose *sql.DB keeps no idle
// connection (each statement opens one) says so at WARN, naming
// SetMaxIdleConns, once; with room for its connections it says nothing
// over as many polls.
func TestWarnsOfConnectionChurn(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		churn := func(t *testing.T, idle int) (*logRecords, *Relay) {
			db, err := openDB(driverOf(e.d), e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxIdleConns(idle)
			logs := &logRecords{}
			e2 := *e
			e2.db = db
			r := e2.newRelay(t, &recorder{}, Config{Logger: slog.New(logs), MaxPollInterval: 5 * time.Millisecond})
			// Windows of 2 s (a minute in production): long enough to
			// hold two closes even where opening a connection is slow
			// (a PostgreSQL whose catalogs have bloated takes 0.6 s).
			r.pool.every = 2 * time.Second
			start(t, r)
			return logs, r
		}
		warnings := func(logs *logRecords) (n int) {
			for _, rec := range logs.atLeast(slog.LevelWarn) {
				if strings.Contains(rec.Message, "SetMaxIdleConns") {
					n++
				}
			}
			return n
		}
		logs, r := churn(t, -1) // none kept idle
		testkit.Eventually(t, 30*time.Second, func() bool { return warnings(logs) > 0 }, "no warning of the pool's churn after %d polls", r.polls.Load())
		if n := warnings(logs); n != 1 {
			t.Errorf("%d warnings, want 1 (once per %s)", n, poolWarnEvery)
		}
		logs, r = churn(t, 8)
		started := time.Now()
		testkit.Eventually(t, time.Minute, func() bool {
			// at least 200 polls over three windows of the watch
			return r.polls.Load() >= 200 && time.Since(started) > 3*r.pool.every
		}, "fewer than 200 polls")
		if n := warnings(logs); n != 0 {
			t.Errorf("%d warnings with 8 idle connections kept", n)
		}
	})
}
