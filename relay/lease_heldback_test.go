package relay

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// holdHeads makes the head of every key in the outbox a failed event
// whose retry is an hour away: each key's backlog is held back behind
// it. It returns how many heads it held.
func holdHeads(t *testing.T, e *env) int {
	t.Helper()
	heads := headSequences(t, e)
	ph := "?"
	if e.d == envelope.Postgres {
		ph = "$1"
	}
	q := `UPDATE herald_outbox SET attempts = 1, last_error = 'held', next_attempt_at = ` + ph + ` WHERE sequence IN (` + strings.Join(heads, ",") + `)`
	if _, err := e.db.Exec(q, outbox.TimeArg(e.d, time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	return len(heads)
}

// headSequences are the sequences of the keys' heads, as text.
func headSequences(t *testing.T, e *env) []string {
	t.Helper()
	rows, err := e.db.Query(`SELECT MIN(sequence) FROM herald_outbox WHERE ordering_key IS NOT NULL AND published_at IS NULL GROUP BY ordering_key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var heads []string
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		heads = append(heads, strconv.FormatInt(s, 10))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return heads
}

// TestLeaseWalksPastHeldBackHeads: the heads of a few keys failed and
// wait for their retry, a backlog of their keys behind them; events
// written after that backlog — unordered ones and other keys' runs — are
// delivered in a few polls, each key in order, and nothing of the held
// keys is.
func TestLeaseWalksPastHeldBackHeads(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		fillKeyed(t, e, 3000, 3)
		if n := holdHeads(t, e); n != 3 {
			t.Fatalf("held %d heads, want 3", n)
		}
		var late []*envelope.Event
		for i := range 4 {
			late = append(late, e.enqueue(t, msg(fmt.Sprintf("c%d", i), "cold-c", i), msg(fmt.Sprintf("d%d", i), "cold-d", i), msg(fmt.Sprintf("u%d", i), "", i))...)
		}
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{Name: "probe", BatchSize: 10})
		for polls := 0; rec.count() < len(late) && polls < 8; polls++ {
			if _, err := r.poll(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		got := rec.events()
		if len(got) != len(late) {
			t.Fatalf("delivered %d events in 8 polls, want the %d written after the held-back backlog: %s", len(got), len(late), describe(got))
		}
		perKey := map[string][]*envelope.Event{}
		for _, ev := range got {
			if ev.Topic == "backlog" {
				t.Fatalf("delivered %d of a held-back key", ev.Sequence)
			}
			perKey[ev.OrderingKey] = append(perKey[ev.OrderingKey], ev)
		}
		for k, es := range perKey {
			if k != "" && (len(es) != 4 || !inSequence(es)) {
				t.Fatalf("key %s: %d events, in order %v: %s", k, len(es), inSequence(es), describe(es))
			}
		}
	})
}

// TestWalkReachesEveryKey: with more keys whose heads are held back than
// a walk visits (BatchSize), a key after them in key order is still
// reached: the walk goes on from where the last full walk stopped. On
// PostgreSQL and SQLite the walk once restarted from the first key every
// time, and the key waited as long as the keys before it did.
func TestWalkReachesEveryKey(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		fillKeyed(t, e, 400, 20) // keys k0…k19, 20 events each
		holdHeads(t, e)
		cold := e.enqueue(t, msg("cold", "z-cold", 1), msg("cold", "z-cold", 2))
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{Name: "probe", BatchSize: 4})
		for polls := 0; rec.count() < 2 && polls < 20; polls++ {
			if _, err := r.poll(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		got := rec.events()
		if len(got) != 2 || got[0].Sequence != cold[0].Sequence || got[1].Sequence != cold[1].Sequence {
			t.Fatalf("delivered %s; want the cold key's two events, in order", describe(got))
		}
	})
}

// An idle relay issues one statement a poll: a walk that leased nothing
// asks where it ended (walkEnd) only until a walk from the first key found
// no key, and again once a lease returned an event.
func TestIdleWalkAsksOnce(t *testing.T) {
	t.Parallel()
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, d)
			rec := &recorder{}
			r := e.newRelay(t, rec, Config{BatchSize: 4})
			for range 5 {
				if _, err := r.poll(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if r.walkEnds != 1 {
				t.Fatalf("%d walkEnd statements in 5 idle polls, want 1", r.walkEnds)
			}
			e.enqueue(t, msg("a", "k", 1))
			for range 5 {
				if _, err := r.poll(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if rec.count() != 1 || r.walkEnds != 2 {
				t.Fatalf("after an event: %d delivered, %d walkEnd statements; want 1 and 2", rec.count(), r.walkEnds)
			}
		})
	}
}

// handlerReads is the sum of the session's Handler_read_* counters: the
// index entries and rows the statements of the session read (MySQL and
// MariaDB count them alike).
func handlerReads(t *testing.T, conn *sql.DB) int64 {
	t.Helper()
	rows, err := conn.Query(`SHOW SESSION STATUS LIKE 'Handler_read%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestMySQLLeaseCostIndependentOfHeldBackBacklog: the heads of 4 keys
// failed, their backlog behind them; a lease reads about as many index
// entries and rows (the session's Handler_read_* counters, over one
// connection) at 20,000 held-back events as at 2,000, and leases what was
// written after them. The lease before bounded candidate sources read
// every held-back event: 4,210 handler reads at 2,000, 40,210 at 20,000,
// 200,210 at 100,000 (BENCHMARKS.md, "MySQL and MariaDB").
// HERALD_LEASE_BACKLOG=n adds a measurement at n events, with EXPLAIN.
func TestMySQLLeaseCostIndependentOfHeldBackBacklog(t *testing.T) {
	t.Parallel()
	if !mysqlEnabled() {
		t.Skip("MySQL relay tests: HERALD_RELAY_MYSQL=1")
	}
	e := newEnv(t, envelope.MySQL)
	// The relay's pool: one connection, whose session counters are the
	// lease's.
	one, err := sql.Open("mysql", e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = one.Close() })
	one.SetMaxOpenConns(1)
	r, err := New(one, &recorder{}, Config{Name: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	filled := 0
	measure := func(n int) int64 {
		t.Helper()
		if _, err := e.db.Exec("DELETE FROM herald_outbox WHERE topic = 'late'"); err != nil {
			t.Fatal(err)
		}
		fillKeyed(t, e, n-filled, 4)
		filled = n
		holdHeads(t, e)
		e.enqueue(t, msg("late", "", 1), msg("late", "late-key", 2), msg("late", "late-key", 3))
		if _, err := e.db.Exec("ANALYZE TABLE herald_outbox"); err != nil {
			t.Fatal(err)
		}
		r.walk.Store(int64(r.cfg.BatchSize)) // as after a short lease
		r.runs.Store(true)                   // and one that held keyed events
		before := handlerReads(t, one)
		batch, _, err := r.lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reads := handlerReads(t, one) - before
		r.releaseEvents(ctx, batch)
		if len(batch) != 3 {
			t.Fatalf("at %d held-back events: leased %s, want the 3 late events (the late key's in a run)", n, describe(batch))
		}
		t.Logf("lease with the key walk and runs: %d handler reads at %d held-back events", reads, n)
		return reads
	}
	small := measure(2000)
	large := measure(20000)
	if large > 3*small {
		t.Fatalf("a lease read %d at 20,000 held-back events and %d at 2,000: its cost grows with the backlog", large, small)
	}
	if s := os.Getenv("HERALD_LEASE_BACKLOG"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 20000 {
			t.Fatalf("HERALD_LEASE_BACKLOG=%q: a number of events above 20000", s)
		}
		measure(n)
		explainLeaseMySQL(t, e.db, r)
	}
}

// explainLeaseMySQL logs EXPLAIN of the lease's first two statements.
func explainLeaseMySQL(t *testing.T, db *sql.DB, r *Relay) {
	t.Helper()
	args := append([]any{nil, 2 * r.cfg.BatchSize, r.cfg.BatchSize, "", r.cfg.Lease.Microseconds(), r.cfg.BatchSize}, r.fargs...)
	for _, st := range []struct{ name, q string }{
		{"candidates (with the key walk)", r.my.candidates[1][1]},
		{"lock", strings.Replace(r.my.lockHeads, "{seqs}", "1,2,3", 1)},
	} {
		q, a := mysqlArgs("EXPLAIN "+st.q, args)
		b := testkit.QueryText(t, db, q, a...)
		t.Logf("EXPLAIN %s:\n%s", st.name, b)
	}
}

func mysqlEnabled() bool { return os.Getenv("HERALD_RELAY_MYSQL") == "1" }

// TestMySQLLeaseAtMaxBatchSize: at MaxBatchSize the MySQL lease's
// statements carry their longest lists — 2 × MaxBatchSize candidates in
// the locking read, a runs plan of one part per keyed head — and still
// lease a full batch, each key's events consecutive from its head.
func TestMySQLLeaseAtMaxBatchSize(t *testing.T) {
	t.Parallel()
	if !mysqlEnabled() {
		t.Skip("MySQL relay tests: HERALD_RELAY_MYSQL=1")
	}
	e := newEnv(t, envelope.MySQL)
	fillKeyed(t, e, 3*MaxBatchSize, 2000)
	r := e.newRelay(t, &recorder{}, Config{Name: "probe", BatchSize: MaxBatchSize})
	ctx := context.Background()
	r.walk.Store(0)
	r.runs.Store(true)
	batch, _, err := r.lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != MaxBatchSize {
		t.Fatalf("leased %d, want a full batch of %d", len(batch), MaxBatchSize)
	}
	leasedSeq := map[int64]bool{}
	for _, ev := range batch {
		leasedSeq[ev.Sequence] = true
	}
	// Of each key, the leased events are a prefix of its events.
	rows, err := e.db.Query("SELECT sequence, ordering_key FROM herald_outbox ORDER BY sequence")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ended := map[string]bool{} // a key's run has ended
	for rows.Next() {
		var s int64
		var k string
		if err := rows.Scan(&s, &k); err != nil {
			t.Fatal(err)
		}
		switch {
		case !leasedSeq[s]:
			ended[k] = true
		case ended[k]:
			t.Fatalf("key %s: event %d leased behind one of its key that is not", k, s)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
