package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// enqueueKeyed enqueues n events of one key, topics "<key><i>" from 1.
func enqueueKeyed(t *testing.T, e *env, key string, n int) []*envelope.Event {
	t.Helper()
	var ms []envelope.Message
	for i := range n {
		ms = append(ms, msg(fmt.Sprintf("%s%d", key, i+1), key, i))
	}
	return e.enqueue(t, ms...)
}

// eachRunsDialect runs fn as a parallel subtest on each dialect whose
// lease takes runs of a key: PostgreSQL, and MySQL/MariaDB with
// HERALD_RELAY_MYSQL=1.
func eachRunsDialect(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, d := range testDialects() {
		if d == envelope.SQLite {
			continue
		}
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, d))
		})
	}
}

// inSequence reports whether es are in strictly increasing sequence order.
func inSequence(es []*envelope.Event) bool {
	return slices.IsSortedFunc(es, func(a, b *envelope.Event) int { return int(a.Sequence - b.Sequence) }) &&
		len(slices.CompactFunc(slices.Clone(es), func(a, b *envelope.Event) bool { return a.Sequence == b.Sequence })) == len(es)
}

// TestKeyRunsDrainOneKeyInFewPolls: a backlog of one ordering key drains
// a batch per poll (a run of the key), not one event per poll, in order.
// Before runs, 300 events of one key took 300 polls.
func TestKeyRunsDrainOneKeyInFewPolls(t *testing.T) {
	t.Parallel()
	eachRunsDialect(t, func(t *testing.T, e *env) {
		enqueueKeyed(t, e, "k", 300)
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{BatchSize: 100})
		polls := 0
		for rec.count() < 300 && polls < 10 {
			if _, err := r.poll(context.Background()); err != nil {
				t.Fatal(err)
			}
			polls++
		}
		got := rec.events()
		if len(got) != 300 || !inSequence(got) {
			t.Fatalf("after %d polls: %d events delivered, in order %v", polls, len(got), inSequence(got))
		}
		// The first lease takes the key's head alone; every later one a run.
		if polls > 5 {
			t.Fatalf("300 events of one key took %d polls of BatchSize 100", polls)
		}
		if n := e.count(t, "published_at IS NULL"); n != 0 {
			t.Fatalf("%d events left unpublished", n)
		}
	})
}

// TestKeyRunsStopAtAFailure: in a run, a failure stops its key — the
// events behind it are not delivered, not failed, and released — and
// the next poll delivers the rest in order, beginning with the failed one.
func TestKeyRunsStopAtAFailure(t *testing.T) {
	t.Parallel()
	eachRunsDialect(t, func(t *testing.T, e *env) {
		enqueueKeyed(t, e, "a", 5)
		e.enqueue(t, msg("b1", "b", 1), msg("b2", "b", 2))
		failA3 := true
		rec := &recorder{fail: func(ev *envelope.Event) error {
			if ev.Topic == "a3" && failA3 {
				failA3 = false
				return errors.New("broker down")
			}
			return nil
		}}
		clk := &clock{t: time.Now()}
		r := e.newRelay(t, rec, Config{RetryBase: time.Hour, RetryMax: time.Hour})
		r.dbClock = clk.now
		// Events of different keys are delivered concurrently (Concurrency):
		// their order among each other is not part of the contract.
		got := pollOnce(t, r, rec)
		slices.Sort(got)
		if !slices.Equal(got, []string{"a1", "b1"}) {
			t.Fatalf("poll 1 delivered %v, want the heads a1 b1", got)
		}
		got = pollOnce(t, r, rec)
		slices.Sort(got)
		if !slices.Equal(got, []string{"a2", "b2"}) {
			t.Fatalf("poll 2 delivered %v, want a2 (a3 failed, a4 a5 held back) and b2", got)
		}
		if n := e.count(t, "topic IN ('a4', 'a5') AND published_at IS NULL AND attempts = 0 AND lease_until IS NULL"); n != 2 {
			t.Fatalf("a4 and a5 must be released, not failed: %d of them are", n)
		}
		if n := e.count(t, "topic = 'a3' AND attempts = 1 AND published_at IS NULL"); n != 1 {
			t.Fatal("a3's failure was not recorded")
		}
		if got := pollOnce(t, r, rec); len(got) != 0 {
			t.Fatalf("poll 3 delivered %v; a3 is not due for an hour", got)
		}
		clk.add(2 * time.Hour)
		if got := pollOnce(t, r, rec); !slices.Equal(got, []string{"a3", "a4", "a5"}) {
			t.Fatalf("poll 4 delivered %v, want the run a3 a4 a5", got)
		}
	})
}

// TestKeyRunsGiveABatchDeliveryOneEventPerKeyPerCall: a run reaches a
// BatchDelivery in waves, so each DeliverBatch call still holds at most
// one event per ordering key, and a key's events come in order.
func TestKeyRunsGiveABatchDeliveryOneEventPerKeyPerCall(t *testing.T) {
	t.Parallel()
	eachRunsDialect(t, func(t *testing.T, e *env) {
		for i := range 40 {
			e.enqueue(t, msg(fmt.Sprintf("a%d", i), "a", i), msg(fmt.Sprintf("b%d", i), "b", i), msg(fmt.Sprintf("u%d", i), "", i))
		}
		var mu sync.Mutex
		var calls [][]*envelope.Event
		bd := &batchFunc{fn: func(es []*envelope.Event) []error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, slices.Clone(es))
			return nil
		}}
		r := e.newRelay(t, bd, Config{BatchSize: 50})
		for range 10 {
			if _, err := r.poll(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.count(t, "published_at IS NULL"); n != 0 {
			t.Fatalf("%d events left after 10 polls of 50", n)
		}
		perKey := map[string][]*envelope.Event{}
		longest := 0
		for i, c := range calls {
			seen := map[string]bool{}
			for _, ev := range c {
				if k := ev.OrderingKey; k != "" {
					if seen[k] {
						t.Fatalf("call %d holds two events of key %s: %s", i, k, describe(c))
					}
					seen[k] = true
					perKey[k] = append(perKey[k], ev)
				}
			}
			longest = max(longest, len(c))
		}
		for k, es := range perKey {
			if len(es) != 40 || !inSequence(es) {
				t.Fatalf("key %s: %d events, in order %v", k, len(es), inSequence(es))
			}
		}
		if len(calls) < 40 {
			t.Fatalf("%d calls: the runs were not delivered in waves", len(calls))
		}
	})
}

// flakyLog is a delivery that fails every every-th try and records the
// others, for relays running concurrently.
type flakyLog struct {
	mu    sync.Mutex
	every int
	tries int
	log   []*envelope.Event
}

func newFlakyLog(every int) (*recorder, *flakyLog) {
	f := &flakyLog{every: every}
	return &recorder{fail: func(ev *envelope.Event) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.tries++
		if f.tries%f.every == 0 {
			return fmt.Errorf("every %dth try fails", f.every)
		}
		f.log = append(f.log, ev)
		return nil
	}}, f
}

// firstByKey returns, per ordering key, the events in the order of their
// first delivery, and how many events were delivered at least once.
func (f *flakyLog) firstByKey() (map[string][]*envelope.Event, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := map[int64]bool{}
	perKey := map[string][]*envelope.Event{}
	for _, ev := range f.log {
		if !first[ev.Sequence] {
			first[ev.Sequence] = true
			perKey[ev.OrderingKey] = append(perKey[ev.OrderingKey], ev)
		}
	}
	return perKey, len(first)
}

// TestKeyRunsAcrossTwoRelaysKeepOrder: two relays drain a backlog of
// three keys in runs, with random failures, and every key's events are
// first delivered in sequence order, each exactly after the one before.
func TestKeyRunsAcrossTwoRelaysKeepOrder(t *testing.T) {
	t.Parallel()
	eachRunsDialect(t, func(t *testing.T, e *env) {
		var written []*envelope.Event
		for i := range 300 {
			written = append(written, e.enqueue(t, msg("t", fmt.Sprintf("k%d", i%3), i))...)
		}
		d, f := newFlakyLog(13)
		for i := range 2 {
			start(t, e.newRelay(t, d, Config{Name: fmt.Sprintf("r%d", i), BatchSize: 50, Concurrency: 4}))
		}
		testkit.Eventually(t, time.Minute, func() bool { return e.count(t, "published_at IS NULL") == 0 }, "every event published")
		perKey, delivered := f.firstByKey()
		for k, es := range perKey {
			if len(es) != 100 || !inSequence(es) {
				t.Fatalf("key %s: %d events first delivered, in sequence order %v: %s", k, len(es), inSequence(es), describe(es))
			}
		}
		if delivered != len(written) {
			t.Fatalf("%d of %d events delivered", delivered, len(written))
		}
	})
}

// TestKeyRunsRedeliveredInOrderAfterLeaseExpiry: a relay that leased a
// run and died (never marked it) lets its lease run out; another relay
// then leases the run again and delivers all of it, in order.
func TestKeyRunsRedeliveredInOrderAfterLeaseExpiry(t *testing.T) {
	t.Parallel()
	eachRunsDialect(t, func(t *testing.T, e *env) {
		enqueueKeyed(t, e, "k", 6)
		clk := &clock{t: time.Now()}
		rec := &recorder{}
		dead := e.newRelay(t, rec, Config{Name: "dead", Lease: time.Minute})
		live := e.newRelay(t, rec, Config{Name: "live", Lease: time.Minute})
		dead.dbClock, live.dbClock = clk.now, clk.now
		if got := pollOnce(t, dead, rec); !slices.Equal(got, []string{"k1"}) {
			t.Fatalf("first poll delivered %v", got)
		}
		// The dead relay's next lease takes the run k2…k6, and it dies.
		batch, _, err := dead.lease(context.Background())
		if err != nil || len(batch) != 5 {
			t.Fatalf("lease of the run: %s, %v", describe(batch), err)
		}
		if got := pollOnce(t, live, rec); len(got) != 0 {
			t.Fatalf("another relay delivered %v under a live lease", got)
		}
		clk.add(2 * time.Minute)
		if got := pollOnce(t, live, rec); !slices.Equal(got, []string{"k2"}) {
			t.Fatalf("after the lease ran out: %v, want the head k2 (this relay's first lease)", got)
		}
		if got := pollOnce(t, live, rec); !slices.Equal(got, []string{"k3", "k4", "k5", "k6"}) {
			t.Fatalf("then %v, want the rest of the run in order", got)
		}
	})
}

// TestKeyRunsOffForATrickle: a runs lease that finds no followers turns
// runs off, so a steady trickle of events whose keys each hold one
// pending event keeps the plain lease; a key leased twice in a row (a
// backlog behind it) turns them on again.
func TestKeyRunsOffForATrickle(t *testing.T) {
	t.Parallel()
	eachRunsDialect(t, func(t *testing.T, e *env) {
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{})
		step := func(name, key string, wantRuns bool) {
			t.Helper()
			e.enqueue(t, msg(name, key, 1))
			if got := pollOnce(t, r, rec); !slices.Equal(got, []string{name}) {
				t.Fatalf("delivered %v, want %s", got, name)
			}
			if got := r.runs.Load(); got != wantRuns {
				t.Fatalf("after %s: next lease takes runs = %v, want %v", name, got, wantRuns)
			}
		}
		step("a1", "a", true)  // keyed: the next lease looks for runs
		step("b1", "b", false) // that runs lease found no followers
		step("c1", "c", false) // a trickle: plain leases
		step("d1", "d", false)
		step("d2", "d", true) // d leased twice in a row: a backlog behind d
	})
}

// TestKeyRunsOneKeyTwoRelays: two relays drain a backlog of one ordering
// key in runs, concurrently, with failures: the key's events are first
// delivered in sequence order, none is lost, and the runs carried more
// than one event a lease.
func TestKeyRunsOneKeyTwoRelays(t *testing.T) {
	t.Parallel()
	eachRunsDialect(t, func(t *testing.T, e *env) {
		written := enqueueKeyed(t, e, "k", 400)
		d, f := newFlakyLog(17)
		var mu sync.Mutex
		biggest := 0 // the largest lease, under mu
		for i := range 2 {
			start(t, e.newRelay(t, d, Config{Name: fmt.Sprintf("r%d", i), BatchSize: 40, Concurrency: 4,
				Observer: pollFunc(func(p Poll) {
					mu.Lock()
					defer mu.Unlock()
					biggest = max(biggest, p.Leased)
				})}))
		}
		testkit.Eventually(t, time.Minute, func() bool { return e.count(t, "published_at IS NULL") == 0 }, "every event published")
		perKey, delivered := f.firstByKey()
		order := perKey["k"]
		if delivered != len(written) || len(order) != len(written) || !inSequence(order) {
			t.Fatalf("%d of %d events first delivered, in sequence order %v", len(order), len(written), inSequence(order))
		}
		mu.Lock()
		defer mu.Unlock()
		if biggest < 2 {
			t.Fatalf("no lease held more than %d event of the key: no runs", biggest)
		}
	})
}

// pollFunc is an Observer that is told of every poll.
type pollFunc func(Poll)

func (f pollFunc) Delivered(context.Context, Delivered)       {}
func (f pollFunc) Failed(context.Context, Failed)             {}
func (f pollFunc) DeadLettered(context.Context, DeadLettered) {}
func (f pollFunc) Polled(_ context.Context, p Poll)           { f(p) }
