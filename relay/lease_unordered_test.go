package relay

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// drainByLeases leases and marks until a lease comes back empty, and
// returns the events in the order they were leased and how many leases
// ran in the unordered form (leaseUnorderedPostgres).
func drainByLeases(t *testing.T, r *Relay) (got []*envelope.Event, unorderedLeases int) {
	t.Helper()
	ctx := context.Background()
	for range 10000 {
		q, _, _ := r.leaseQuery()
		batch, _, err := r.lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			return got, unorderedLeases
		}
		if q == r.sql.leaseUnordered {
			unorderedLeases++
		}
		got = append(got, batch...)
		if _, err := r.mark(ctx, batch, make([]error, len(batch))); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the drain did not end")
	return nil, 0
}

// After a full lease of unordered events, the next lease from the floor
// takes the next unordered events in one range scan; it is not the form
// after a short lease, after a lease with keyed events, or from the start
// of the table.
func TestUnorderedBacklogLeasesInOneScan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 95, 0)
	r := e.newRelay(t, &recorder{}, Config{BatchSize: 10})
	if q, _, _ := r.leaseQuery(); q == r.sql.leaseUnordered {
		t.Fatal("a relay's first lease takes unordered events alone")
	}
	got, unordered := drainByLeases(t, r)
	if len(got) != 95 {
		t.Fatalf("delivered %d events, want 95", len(got))
	}
	for i, ev := range got {
		if i > 0 && ev.Sequence <= got[i-1].Sequence {
			t.Fatalf("event %d leased after %d: not in sequence order", ev.Sequence, got[i-1].Sequence)
		}
	}
	// Ten leases: the first and the short last one are full forms, and
	// none of the others starts from the table's start (floorEvery > 10).
	if unordered != 8 {
		t.Fatalf("%d of the drain's leases took unordered events alone, want 8", unordered)
	}
	if q, _, _ := r.leaseQuery(); q == r.sql.leaseUnordered {
		t.Fatal("after a short lease the next lease takes unordered events alone")
	}
}

// Keyed events that arrive inside a backlog of unordered events are
// leased, in their key's order, though the unordered form steps over
// them: by the full form that every lease from the start of the table
// runs.
func TestUnorderedBacklogStillLeasesKeyedEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 50, 0)
	keyed := e.enqueue(t, msg("backlog", "k", 1), msg("backlog", "k", 2))
	fillKeyed(t, e, 400, 0)
	r := e.newRelay(t, &recorder{}, Config{BatchSize: 10})
	r.fromStartEvery = true // the bound counted in leases; the pace by cost: TestFromStartPacedByItsCost
	got, unordered := drainByLeases(t, r)
	if len(got) != 452 {
		t.Fatalf("delivered %d events, want 452", len(got))
	}
	if unordered == 0 {
		t.Fatal("no lease took unordered events alone")
	}
	at := map[int64]int{}
	for i, ev := range got {
		at[ev.Sequence] = i
	}
	first, ok1 := at[keyed[0].Sequence]
	second, ok2 := at[keyed[1].Sequence]
	if !ok1 || !ok2 || first > second {
		t.Fatalf("key k's events leased at %d (%v) and %d (%v): want both, in order", first, ok1, second, ok2)
	}
	// Stepped over at most until the next lease from the start.
	if limit := 50 + 10*(floorEvery+2); second > limit {
		t.Fatalf("key k's second event was leased as the %dth event, after more than %d", second, limit)
	}
}

// The unordered form keeps the relay's topics, excluded topics and
// tenants, and leases no event of a paused topic.
func TestUnorderedBacklogKeepsFiltersAndPausedTopics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	// Events the relay takes before and after a stretch of events it
	// must not take (paused, excluded, outside its topics or tenants), so
	// that its leases come back full and the unordered form runs over
	// the stretch.
	var ms []envelope.Message
	want := 0
	for i := range 240 {
		topic, tenant := "orders.created", "acme"
		if i >= 60 && i < 180 {
			topic = []string{"orders.created", "orders.paused", "orders.skipped", "billing.paid"}[i%4]
			if i%3 == 0 {
				tenant = "other"
			}
		}
		if topic == "orders.created" && tenant == "acme" {
			want++
		}
		ms = append(ms, envelope.Message{Topic: topic, Payload: i, Tenant: tenant})
	}
	e.enqueue(t, ms...)
	if _, err := e.db.Exec(`INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES ('orders.paused', '', now())`); err != nil {
		t.Fatal(err)
	}
	r := e.newRelay(t, &recorder{}, Config{BatchSize: 5, Topics: []string{"orders.*"}, ExcludeTopics: []string{"orders.skipped"}, Tenants: []string{"acme"}})
	got, unordered := drainByLeases(t, r)
	if unordered == 0 {
		t.Fatal("no lease took unordered events alone")
	}
	if len(got) != want {
		t.Fatalf("leased %d events, want the %d of topic orders.created and tenant acme", len(got), want)
	}
	for _, ev := range got {
		if ev.Topic != "orders.created" || ev.Tenant != "acme" {
			t.Fatalf("leased %s of tenant %q: %s", ev.Topic, ev.Tenant, fmt.Sprint(ev.Sequence))
		}
	}
}

// A relay looks past any number of pending events it does not take — a
// paused topic's backlog, topics or tenants of other relays — to the
// events behind them, keyed or not. Its candidate sources once ignored
// its filter and the paused topics: 2 × BatchSize such events at the
// front of the table filled them, every lease came back empty, and
// nothing behind them was delivered.
func TestLeaseLooksPastEventsItDoesNotTake(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		var ms []envelope.Message
		for i := range 60 {
			ms = append(ms, envelope.Message{Topic: "billing.paused", Payload: i},
				envelope.Message{Topic: "billing.other", Payload: i},
				envelope.Message{Topic: "orders.created", Payload: i, Tenant: "other"})
		}
		ms = append(ms, msg("orders.created", "", 1), msg("orders.created", "k", 2), msg("orders.created", "", 3), msg("orders.created", "k", 4))
		e.enqueue(t, ms...)
		stmt, args := `INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES ('billing.paused', '', now())`, []any(nil)
		switch e.d {
		case envelope.SQLite:
			stmt, args = `INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES ('billing.paused', '', ?1)`, []any{outbox.TimeArg(e.d, time.Now())}
		case envelope.MySQL:
			stmt = `INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES ('billing.paused', '', UTC_TIMESTAMP(6))`
		}
		if _, err := e.db.Exec(stmt, args...); err != nil {
			t.Fatal(err)
		}
		for _, cfg := range []Config{
			{Name: "orders", BatchSize: 10, Topics: []string{"orders.*"}, Tenants: []string{""}},
			{Name: "not-billing-other", BatchSize: 10, ExcludeTopics: []string{"billing.other"}, Tenants: []string{""}},
		} {
			r := e.newRelay(t, &recorder{}, cfg)
			got, _ := drainByLeases(t, r)
			if len(got) != 4 {
				t.Fatalf("relay %s leased %d events behind the 180 it does not take (%s), want 4", cfg.Name, len(got), describe(got))
			}
			// Put them back for the next relay.
			if _, err := e.db.Exec(`UPDATE herald_outbox SET published_at = NULL, leased_by = NULL, lease_until = NULL WHERE topic = 'orders.created'`); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// leaseToUnorderedForm leases and marks batches of r until its next lease
// is the lease of unordered events, and returns the last batch, leased
// and not marked.
func leaseToUnorderedForm(t *testing.T, r *Relay) []*envelope.Event {
	t.Helper()
	ctx := context.Background()
	for range 3 { // until a full lease from the floor: the first walks keys
		batch, _, err := r.lease(ctx)
		if err != nil || len(batch) != r.cfg.BatchSize {
			t.Fatalf("lease: %d events, %v", len(batch), err)
		}
		if q, _, _ := r.leaseQuery(); q == r.sql.leaseUnordered {
			return batch
		}
		if _, err := r.mark(ctx, batch, make([]error, len(batch))); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("after full leases of unordered events the next lease is not the unordered form")
	return nil
}

// jitGuardCases are connections on which a one-statement lease form is
// far below jit_above_cost ("cheap") and, with the threshold at 2, over
// half of it ("dear": guarded, it runs in a transaction with jit off).
var jitGuardCases = []struct {
	name, params string
	guarded      bool
}{
	{"cheap", "&jit=on&jit_above_cost=1e12", false},
	{"dear", "&jit=on&jit_above_cost=2", true},
}

// Where PostgreSQL may JIT-compile the one-statement form (its estimate at
// half of jit_above_cost or more), the carried mark runs in the lease's
// transaction instead, which sets jit off; elsewhere in the statement.
// Either way the carried events are marked and the next ones leased.
func TestCarriedMarkKeepsTheJITGuard(t *testing.T) {
	t.Parallel()
	for _, c := range jitGuardCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := jitEnv(t)
			fillKeyed(t, e, 60, 0)
			r := e.withParams(t, c.params).newRelay(t, &recorder{}, Config{Name: c.name, BatchSize: 10})
			r.cfg.LeaseByLock = false // the written lease's one-statement form
			first := leaseToUnorderedForm(t, r)
			carried := &carriedMark{delivered: first, seqs: r.seqArg(first), at: time.Now()}
			args := []any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize, r.floor.Load()}
			if _, _, one := r.leaseWithMark(context.Background(), r.sql.leaseUnordered, args, carried); one == c.guarded {
				t.Fatalf("one statement = %v with jit_above_cost %v (the form's estimate %v); want %v",
					one, math.Float64frombits(r.jitAbove.Load()), r.jitCost[r.sql.leaseUnorderedMarked].cost, !c.guarded)
			}
			r.carried = carried
			second, _, err := r.lease(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(second) != 10 || second[0].Sequence != first[9].Sequence+1 {
				t.Fatalf("second lease: %s; want the next 10 events after %d", describe(second), first[9].Sequence)
			}
			var published int
			if err := e.db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE sequence BETWEEN $1 AND $2 AND published_at IS NOT NULL`,
				first[0].Sequence, first[9].Sequence).Scan(&published); err != nil {
				t.Fatal(err)
			}
			if published != 10 {
				t.Fatalf("%d of the 10 carried events are published, want 10", published)
			}
		})
	}
}

// A mark carried into the lease of unordered events runs in the lease's
// statement: the carried events are published (or deleted) and the next
// ones leased, in one statement. The lease leaves the carried events out,
// so even those whose lease ran out before their mark are marked, not
// leased again.
func TestCarriedMarkRunsInTheUnorderedLease(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeleteOnPublish=%v", del), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envelope.Postgres)
			fillKeyed(t, e, 60, 0)
			r := e.newRelay(t, &recorder{}, Config{BatchSize: 10, DeleteOnPublish: del})
			r.cfg.LeaseByLock = false // the written lease's one-statement form
			ctx := context.Background()
			first := leaseToUnorderedForm(t, r)
			// Delivered, and its lease ran out before the mark.
			if _, err := e.db.Exec(`UPDATE herald_outbox SET lease_until = now() - interval '1 second' WHERE leased_by = $1`, r.cfg.Name); err != nil {
				t.Fatal(err)
			}
			r.carried = &carriedMark{delivered: first, seqs: r.seqArg(first), at: time.Now()}
			second, _, err := r.lease(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.carried != nil {
				t.Fatal("the carried mark is still carried after the lease")
			}
			if len(second) != 10 || second[0].Sequence != first[9].Sequence+1 {
				t.Fatalf("second lease: %s; want the next 10 events after %d", describe(second), first[9].Sequence)
			}
			left := "published_at IS NOT NULL"
			if del {
				left = "sequence > 0" // deleted: not in the table at all
			}
			var inTable, done int
			if err := e.db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE `+left+`) FROM herald_outbox WHERE sequence BETWEEN $1 AND $2`, first[0].Sequence, first[9].Sequence).Scan(&inTable, &done); err != nil {
				t.Fatal(err)
			}
			switch {
			case del && inTable != 0:
				t.Fatalf("%d of the 10 carried events are still in the table; DeleteOnPublish deletes them", inTable)
			case !del && done != 10:
				t.Fatalf("%d of the 10 carried events are published, want 10", done)
			}
			var leasedAgain int
			if err := e.db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE sequence BETWEEN $1 AND $2 AND lease_until > now()`, first[0].Sequence, first[9].Sequence).Scan(&leasedAgain); err != nil {
				t.Fatal(err)
			}
			if leasedAgain != 0 {
				t.Fatalf("%d carried events were leased again by the lease that marked them", leasedAgain)
			}
		})
	}
}
