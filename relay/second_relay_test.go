package relay

import (
	"context"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// TestSecondRelayLeasesPastTheFirstsLease: while one relay holds a lease
// on the first events of a backlog, a second relay's lease takes the next
// ones — a full batch, not nothing. The lease's candidates were the first
// BatchSize pending events, leased or not: a second relay found only the
// first's events, all of them failing the lease predicate, and waited for
// the first's marks (two relays drained no faster than one).
func TestSecondRelayLeasesPastTheFirstsLease(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		for _, keys := range []int{0, 100} {
			if _, err := e.db.Exec("DELETE FROM herald_outbox"); err != nil {
				t.Fatal(err)
			}
			fillKeyed(t, e, 300, keys)
			a := e.newRelay(t, &recorder{}, Config{Name: "a", BatchSize: 50})
			b := e.newRelay(t, &recorder{}, Config{Name: "b", BatchSize: 50})
			first, _, err := a.lease(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			second, _, err := b.lease(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(first) != 50 || len(second) != 50 {
				t.Fatalf("%d keys: relay a leased %d events, then relay b %d; want 50 each", keys, len(first), len(second))
			}
			seen := map[int64]bool{}
			for _, ev := range first {
				seen[ev.Sequence] = true
			}
			for _, ev := range second {
				if seen[ev.Sequence] {
					t.Fatalf("%d keys: event %d leased by both relays", keys, ev.Sequence)
				}
			}
		}
	})
}

// TestRetriesDoNotHoldBackOthers: a batch's worth of unordered events
// waiting for their retry at the front of the table does not hold back the
// events behind them: the lease's candidates were the first BatchSize
// pending events, each of them not due, and the lease took nothing until
// their retries fell due.
func TestRetriesDoNotHoldBackOthers(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		fillKeyed(t, e, 15, 0)
		q := `UPDATE herald_outbox SET attempts = 1, next_attempt_at = $1
			WHERE sequence IN (SELECT sequence FROM herald_outbox ORDER BY sequence LIMIT 10)`
		if e.d == envelope.MySQL { // no LIMIT in an IN subquery of the table updated
			q = `UPDATE herald_outbox SET attempts = 1, next_attempt_at = ? ORDER BY sequence LIMIT 10`
		}
		if _, err := e.db.Exec(q, outbox.TimeArg(e.d, time.Now().Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		r := e.newRelay(t, &recorder{}, Config{Name: "r", BatchSize: 10})
		batch, _, err := r.lease(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) != 5 {
			t.Fatalf("leased %d events, want the 5 behind the 10 waiting for their retry", len(batch))
		}
	})
}

// TestSecondRelayLeasesPastALeaseInFlight: while one relay's lease is in
// flight — its rows locked, its lease_until not yet committed — a second
// relay leases the events behind it. The candidate sources took BatchSize
// events each: exactly the rows the first lease was locking, all skipped
// as locked, and the second relay leased nothing and waited its poll
// interval.
func TestSecondRelayLeasesPastALeaseInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	for _, keys := range []int{0, 100} {
		if _, err := e.db.Exec("DELETE FROM herald_outbox"); err != nil {
			t.Fatal(err)
		}
		fillKeyed(t, e, 300, keys)
		tx, err := e.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		// The first relay's lease, not yet committed.
		if _, err := tx.Exec(`UPDATE herald_outbox SET lease_until = now() + interval '1 minute', leased_by = 'a'
			WHERE sequence IN (SELECT sequence FROM herald_outbox ORDER BY sequence LIMIT 50)`); err != nil {
			t.Fatal(err)
		}
		b := e.newRelay(t, &recorder{}, Config{Name: "b", BatchSize: 50})
		second, _, err := b.lease(context.Background())
		_ = tx.Rollback()
		if err != nil {
			t.Fatal(err)
		}
		if len(second) != 50 {
			t.Fatalf("%d keys: with 50 events under a lease in flight, the second relay leased %d; want 50", keys, len(second))
		}
		for _, ev := range second {
			if ev.LeasedBy != "b" {
				t.Fatalf("%d keys: event %d leased by %q", keys, ev.Sequence, ev.LeasedBy)
			}
		}
	}
}
