package relay

import (
	"context"
	"database/sql"
	"log/slog"
	"strconv"
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

// preparedLeases returns, for the connection db's pool holds alone
// (MaxOpenConns 1), the relay's prepared leases of unordered events: their
// epochs' comments and how many executions ran with a generic plan.
func preparedLeases(t *testing.T, db *sql.DB) (epochs []string, generic int) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT substring(statement from '/\* herald plan [0-9]+ \*/'), generic_plans
		FROM pg_prepared_statements WHERE statement LIKE '%herald plan%' AND statement NOT LIKE '%pg_prepared_statements%' ORDER BY prepare_time`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var g int
		if err := rows.Scan(&s, &g); err != nil {
			t.Fatal(err)
		}
		epochs, generic = append(epochs, s), generic+g
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return epochs, generic
}

// TestDrainLeasePrepared: the lease of unordered events runs prepared, and
// PostgreSQL keeps a generic plan for it, once the table reaches the
// relay's threshold (set here to 0 bytes: the test's table is far below
// planMinBytes), and not below it. 300 unordered events, BatchSize 10, one
// connection shared with the test (MaxOpenConns 1): after the drain its
// pg_prepared_statements holds the lease with its epoch's comment,
// executed with a generic plan; with the threshold left at planMinBytes it
// holds none. Each form of that lease has BatchSize written as its LIMIT:
// with LIMIT $4 PostgreSQL costed the generic plan for a tenth of the
// pending events and, on 100,000 of them, kept planning each execution
// (relayprof; BENCHMARKS.md, "fifteenth pass") — too large a table for
// this test to show it.
func TestDrainLeasePrepared(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int64{0, planMinBytes} {
		e := newEnv(t, envelope.Postgres)
		e.db.SetMaxOpenConns(1)
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{BatchSize: 10})
		if r.execMode.Load() == nil {
			t.Fatal("no exec mode found for pgx's stdlib driver in its default mode")
		}
		r.planMin = threshold
		for _, q := range []string{r.sql.leaseUnordered, r.sql.leaseUnorderedMarked, r.sql.leaseUnorderedDeleted, r.sql.leaseUnorderedLocked} {
			if !strings.Contains(q, "\n    LIMIT 10\n") && !strings.Contains(q, "\nLIMIT 10\n") {
				t.Fatalf("a form of the lease of unordered events without BatchSize as its LIMIT:\n%s", q)
			}
		}
		ms := make([]envelope.Message, 300)
		for i := range ms {
			ms[i] = msg("t", "", i)
		}
		e.enqueue(t, ms...)
		start(t, r)
		testkit.Eventually(t, 30*time.Second, func() bool { return rec.count() == len(ms) }, "%d of %d delivered", rec.count(), len(ms))
		epochs, generic := preparedLeases(t, e.db)
		switch {
		case threshold > 0 && len(epochs) > 0:
			t.Errorf("threshold %d bytes, table far smaller: prepared leases %v, want none", threshold, epochs)
		case threshold == 0 && (len(epochs) == 0 || epochs[0] != "/* herald plan 1 */"):
			t.Errorf("threshold 0: prepared leases %v, want the lease of unordered events in epoch 1", epochs)
		case threshold == 0 && generic == 0:
			t.Errorf("threshold 0: the prepared lease never ran with a generic plan (epochs %v)", epochs)
		}
	}
}

// TestPreparedLeaseNewEpoch: a prepared lease whose table has doubled since
// its epoch began is prepared again under a new epoch (a new statement,
// planned on the table as it is); one that was slow in an epoch at least
// planRecheck old too.
func TestPreparedLeaseNewEpoch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	e.db.SetMaxOpenConns(1)
	rec := &recorder{}
	r := e.newRelay(t, rec, Config{BatchSize: 10})
	r.planMin = 0
	drain := func(n int) {
		t.Helper()
		ms := make([]envelope.Message, n)
		for i := range ms {
			ms[i] = msg("t", "", i)
		}
		before := rec.count()
		e.enqueue(t, ms...)
		r.wake()
		testkit.Eventually(t, 30*time.Second, func() bool { return rec.count() == before+n }, "%d of %d delivered", rec.count()-before, n)
	}
	start(t, r)
	drain(100)
	if epochs, _ := preparedLeases(t, e.db); len(epochs) != 1 {
		t.Fatalf("prepared leases %v, want epoch 1 alone", epochs)
	}
	// The table as it was when the epoch began: a quarter of its size
	// now; read the size again at the next lease.
	r.plan.mu.Lock()
	r.plan.size /= 4
	r.plan.checked = time.Time{}
	r.plan.mu.Unlock()
	drain(50)
	epochs, _ := preparedLeases(t, e.db)
	if len(epochs) != 2 || epochs[1] != "/* herald plan 2 */" {
		t.Fatalf("after the table doubled: prepared leases %v, want epochs 1 and 2", epochs)
	}
	r.slowPrepared() // epoch 2 is younger than planRecheck: kept
	r.plan.mu.Lock()
	young := r.plan.epoch
	r.plan.began = r.plan.began.Add(-planRecheck)
	r.plan.mu.Unlock()
	r.slowPrepared() // now old enough: a new epoch
	drain(50)
	epochs, _ = preparedLeases(t, e.db)
	if young != 2 || len(epochs) != 3 || epochs[2] != "/* herald plan 3 */" {
		t.Fatalf("after a slow lease: epoch %d kept while young; prepared leases %v, want epochs 1 to 3", young, epochs)
	}
}

// TestPlanEpochRules: when the size read makes prepared leases run, and
// when it begins a new epoch.
func TestPlanEpochRules(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var p planState
	p.sized(t0, 1<<20, 8<<20)
	if p.on || p.epoch != 0 {
		t.Fatalf("below the threshold: on %v, epoch %d; want off, no epoch", p.on, p.epoch)
	}
	steps := []struct {
		after time.Duration
		size  int64
		on    bool
		epoch int64
	}{
		{0, 8 << 20, true, 1},                           // reaches the threshold: on, epoch 1
		{planRecheck, 15 << 20, true, 1},                // grown by less than double
		{2 * planRecheck, 16 << 20, true, 2},            // doubled since epoch 1 began
		{3 * planRecheck, 9 << 20, true, 2},             // shrunk by less than half
		{4 * planRecheck, 8 << 20, true, 3},             // halved since epoch 2 began
		{4*planRecheck + planMaxAge, 8 << 20, true, 4},  // the epoch is planMaxAge old
		{5*planRecheck + planMaxAge, 7 << 20, false, 4}, // below the threshold again: off
		{6*planRecheck + planMaxAge, 8 << 20, true, 5},  // back on: a new epoch, whatever the size
	}
	for i, s := range steps {
		p.sized(t0.Add(s.after), s.size, 8<<20)
		if p.on != s.on || p.epoch != s.epoch {
			t.Fatalf("step %d (%d bytes): on %v, epoch %d; want on %v, epoch %d", i, s.size, p.on, p.epoch, s.on, s.epoch)
		}
		if p.on && p.suffix != "\n/* herald plan "+strconv.FormatInt(p.epoch, 10)+" */" {
			t.Fatalf("step %d: suffix %q", i, p.suffix)
		}
	}
}
