package relay

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// fillKeyed inserts n pending events spread round-robin over keys keys
// (unordered when keys is 0) in one statement.
func fillKeyed(t *testing.T, e *env, n, keys int) {
	t.Helper()
	key := "NULL"
	if keys > 0 {
		key = "'k' || (g % " + itoa(keys) + ")"
	}
	var q string
	var args []any
	switch e.d {
	case envelope.MySQL:
		if keys > 0 {
			key = "CONCAT('k', g % " + itoa(keys) + ")"
		}
		q = `INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at)
			SELECT uuid(), 'backlog', '{}', ` + key + `, UTC_TIMESTAMP(6) FROM (
				WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ` + itoa(n) + `) SELECT g FROM s) AS s`
	case envelope.Postgres:
		q = `INSERT INTO herald_outbox (id, topic, payload, ordering_key)
			SELECT gen_random_uuid(), 'backlog', '{}', ` + key + ` FROM generate_series(1, ` + itoa(n) + `) g`
	default:
		q = `WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ` + itoa(n) + `)
			INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at)
			SELECT lower(hex(randomblob(16))), 'backlog', '{}', ` + key + `, ? FROM s`
		args = append(args, outbox.TimeArg(e.d, time.Now()))
	}
	if e.d == envelope.MySQL {
		// One session whose recursion limit (MariaDB's, 1000 here) allows n.
		conn, err := e.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(context.Background(), "SET SESSION max_recursive_iterations = "+itoa(n+1)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(context.Background(), q, args...); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := e.db.Exec(q, args...); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// leaseBuffers runs the relay's lease statement under EXPLAIN (ANALYZE,
// BUFFERS) in a transaction it rolls back, and returns the shared buffers
// the statement touched and the rows it leased.
func leaseBuffers(t *testing.T, r *Relay) (buffers, rows int) {
	t.Helper()
	ctx := context.Background()
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	args := append([]any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize, r.cfg.BatchSize}, append(slices.Clip(r.fargs), "")...) // "": the walk from the first key
	var plan []byte
	if err := tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+r.sql.leaseWalk, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var p []struct {
		Plan struct {
			Rows int `json:"Actual Rows"`
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &p); err != nil || len(p) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", plan, err)
	}
	return p[0].Plan.Hit + p[0].Plan.Read, p[0].Plan.Rows
}

// TestLeaseCostIndependentOfBacklog: with a backlog concentrated on few
// keys, a lease touches about as many pages at 20,000 held-back events as
// at 2,000 (the scan in sequence order it replaced touched every held-back
// event: 4.9 s per lease at 100,000 events on 16 keys).
func TestLeaseCostIndependentOfBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	r := e.newRelay(t, &recorder{}, Config{Name: "probe"})
	fillKeyed(t, e, 2000, 4)
	small, n := leaseBuffers(t, r)
	if n != 4 {
		t.Fatalf("a lease over 2,000 events on 4 keys leased %d, want the 4 heads", n)
	}
	fillKeyed(t, e, 18000, 4)
	if _, err := e.db.Exec("ANALYZE herald_outbox"); err != nil {
		t.Fatal(err)
	}
	large, n := leaseBuffers(t, r)
	if n != 4 {
		t.Fatalf("a lease over 20,000 events on 4 keys leased %d, want the 4 heads", n)
	}
	t.Logf("shared buffers per lease: %d at 2,000 pending events, %d at 20,000", small, large)
	if large > 3*small {
		t.Fatalf("a lease touched %d buffers at 20,000 pending events and %d at 2,000: its cost grows with the held-back backlog", large, small)
	}
}

// TestLeaseFindsEverythingBehindAHeldBackBacklog: unordered events and the
// heads of keys written after a large backlog of a few keys are leased at
// once, however far behind the first BatchSize pending events they are.
func TestLeaseFindsEverythingBehindAHeldBackBacklog(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		fillKeyed(t, e, 3000, 2)
		late := e.enqueue(t, msg("late", "", 1), msg("late", "", 2), msg("late", "cold-key", 3))
		r := e.newRelay(t, &recorder{}, Config{Name: "probe", BatchSize: 10})
		// The first lease walks keys; so does every lease after a short one.
		batch, _, err := r.lease(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64]bool{}
		for _, ev := range batch {
			got[ev.Sequence] = true
		}
		if len(batch) != 5 {
			t.Fatalf("leased %d events, want 5: the 2 hot keys' heads, 2 unordered and the cold key's head", len(batch))
		}
		for _, ev := range late {
			if !got[ev.Sequence] {
				t.Fatalf("event %d (%q) written after the backlog was not leased", ev.Sequence, ev.OrderingKey)
			}
		}
	})
}

// TestLeaseOfUnorderedEventsStaysUnderJITCost: on a table of unordered
// events, the lease a relay runs (without the key walk) is estimated far
// below PostgreSQL's jit_above_cost, so the server never JIT-compiles it.
// With the walk's recursive CTE in every lease, the estimate grew with the
// table (52,000 at 20,000 rows, past 100,000 at 50,000) and every poll
// paid tens of milliseconds of JIT compilation.
func TestLeaseOfUnorderedEventsStaysUnderJITCost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	r := e.newRelay(t, &recorder{}, Config{Name: "probe"})
	fillKeyed(t, e, 50000, 0)
	if _, err := e.db.Exec("ANALYZE herald_outbox"); err != nil {
		t.Fatal(err)
	}
	cost := func(query string, args ...any) float64 {
		t.Helper()
		var plan []byte
		if err := e.db.QueryRow("EXPLAIN (FORMAT JSON) "+query, args...).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		var p []struct {
			Plan struct {
				Total float64 `json:"Total Cost"`
			} `json:"Plan"`
		}
		if err := json.Unmarshal(plan, &p); err != nil || len(p) != 1 {
			t.Fatalf("EXPLAIN output %s: %v", plan, err)
		}
		return p[0].Plan.Total
	}
	plain := cost(r.sql.lease, append(append([]any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize}, r.fargs...), int64(0))...)                            // 0: no lease floor
	walk := cost(r.sql.leaseWalk, append([]any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize, r.cfg.BatchSize}, append(slices.Clip(r.fargs), "")...)...) // "": the walk from the first key
	t.Logf("estimated cost at 50,000 unordered events: lease %.0f, lease with the key walk %.0f", plain, walk)
	if plain >= 100000/4 || plain*4 > walk {
		t.Fatalf("the lease is estimated at %.0f (with the walk %.0f): near jit_above_cost (100,000), or no cheaper than the walk", plain, walk)
	}
	if strings.Contains(r.sql.lease, "RECURSIVE") {
		t.Fatal("the lease without the walk carries the walk's CTE")
	}
}

// TestWalkFollowsShortLeases: a short lease with keyed events (or none)
// makes the next lease walk keys; a full one does not; short leases of
// unordered events walk only every walkEvery-th time.
func TestWalkFollowsShortLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	r := e.newRelay(t, &recorder{}, Config{Name: "probe", BatchSize: 4})
	ctx := context.Background()
	lease := func() {
		t.Helper()
		batch, _, err := r.lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r.releaseEvents(ctx, batch)
	}
	e.enqueue(t, msg("t", "", 1), msg("t", "", 2), msg("t", "", 3), msg("t", "", 4))
	lease() // full
	if r.walk.Load() != 0 {
		t.Fatal("a full lease asked for a walk")
	}
	if _, err := e.db.Exec("DELETE FROM herald_outbox"); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, msg("t", "", 1))
	walks := 0
	for range walkEvery {
		lease() // short, unordered only
		if r.walk.Load() > 0 {
			walks++
		}
	}
	if walks != 1 {
		t.Fatalf("%d of %d short unordered leases asked for a walk, want 1", walks, walkEvery)
	}
	e.enqueue(t, msg("t", "key", 1))
	if _, err := e.db.Exec("DELETE FROM herald_outbox WHERE ordering_key IS NULL"); err != nil {
		t.Fatal(err)
	}
	lease() // short, keyed
	if r.walk.Load() == 0 {
		t.Fatal("a short lease with a keyed event did not ask for a walk")
	}
}
