package relay

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
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
	if e.d == envelope.Postgres {
		q = `INSERT INTO herald_outbox (id, topic, payload, ordering_key)
			SELECT gen_random_uuid(), 'backlog', '{}', ` + key + ` FROM generate_series(1, ` + itoa(n) + `) g`
	} else {
		q = `WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ` + itoa(n) + `)
			INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at)
			SELECT lower(hex(randomblob(16))), 'backlog', '{}', ` + key + `, ? FROM s`
		args = append(args, e.d.TimeArg(time.Now()))
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
	args := append([]any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize, r.walk.Load()}, r.fargs...)
	var plan []byte
	if err := tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+r.sql.lease, args...).Scan(&plan); err != nil {
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
