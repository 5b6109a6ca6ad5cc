package relay

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// stressEvents is the size of TestManyRelays on PostgreSQL:
// HERALD_RELAY_STRESS_EVENTS, default 20000.
func stressEvents(t *testing.T, def int) int {
	if v := os.Getenv("HERALD_RELAY_STRESS_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("HERALD_RELAY_STRESS_EVENTS=%q: want a number >= 100", v)
		}
		return n
	}
	return def
}

// flaky is the delivery of TestManyRelays: ~10% of deliveries fail at
// random, the head of the "poison" key fails until every unordered event
// is delivered, and every success is recorded in the order the
// deliveries happened.
type flaky struct {
	mu         sync.Mutex
	log        []*envelope.Event
	seen       map[uuid.UUID]int
	unordered  atomic.Int64 // unordered events delivered (first time)
	wantUnord  int64
	poisonHead uuid.UUID
	failures   atomic.Int64
}

func (f *flaky) Deliver(ctx context.Context, e *envelope.Event) error {
	if e.ID == f.poisonHead && f.unordered.Load() < f.wantUnord {
		f.failures.Add(1)
		return errors.New("poison: waits until every unordered event is delivered")
	}
	if mrand.IntN(10) == 0 {
		f.failures.Add(1)
		return errors.New("random failure")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, e)
	f.seen[e.ID]++
	if f.seen[e.ID] == 1 && e.OrderingKey == "" {
		f.unordered.Add(1)
	}
	return nil
}

func (f *flaky) Close() error { return nil }

func runManyRelays(t *testing.T, e *env, relays, events, keys int) {
	var ms []envelope.Message
	unordered := 0
	for i := range events - 3 {
		m := msg(fmt.Sprintf("stress.t%d", i%7), "", i)
		if i%5 != 0 { // 80% keyed
			m.OrderingKey = fmt.Sprintf("key-%d", mrand.IntN(keys))
		} else {
			unordered++
		}
		ms = append(ms, m)
	}
	// The poison key's head comes first, so it holds back its two followers.
	ms = append([]envelope.Message{msg("stress.poison", "poison", 0)}, ms...)
	ms = append(ms, msg("stress.poison", "poison", 1), msg("stress.poison", "poison", 2))
	var written []*envelope.Event
	enq := time.Now()
	for chunk := 0; chunk < len(ms); chunk += 5000 {
		written = append(written, e.enqueue(t, ms[chunk:min(chunk+5000, len(ms))]...)...)
	}
	t.Logf("enqueued %d events in %s", len(ms), time.Since(enq).Round(time.Millisecond))
	f := &flaky{seen: map[uuid.UUID]int{}, wantUnord: int64(unordered), poisonHead: written[0].ID}
	for i := range relays {
		r := e.newRelay(t, f, Config{Name: fmt.Sprintf("relay-%d", i), BatchSize: 100, MaxAttempts: 1_000_000,
			RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxPollInterval: 10 * time.Millisecond})
		start(t, r)
	}
	began := time.Now()
	testkit.Eventually(t, 5*time.Minute, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.seen) == len(written)
	}, "every event delivered")
	t.Logf("%d events (%d unordered) over %d keys, %d relays: delivered in %s with %d failed attempts",
		len(written), unordered, keys, relays, time.Since(began).Round(time.Millisecond), f.failures.Load())

	f.mu.Lock()
	defer f.mu.Unlock()
	dups := 0
	last := map[string]int64{}
	first := map[uuid.UUID]bool{}
	for _, ev := range f.log {
		if first[ev.ID] {
			dups++
			continue
		}
		first[ev.ID] = true
		if ev.OrderingKey == "" {
			continue
		}
		if prev, ok := last[ev.OrderingKey]; ok && ev.Sequence <= prev {
			t.Fatalf("key %s: event %d delivered after %d", ev.OrderingKey, ev.Sequence, prev)
		}
		last[ev.OrderingKey] = ev.Sequence
	}
	// No lease expires in this test, so a duplicate means two relays held
	// one event at once.
	if dups > 0 {
		t.Fatalf("%d duplicate deliveries", dups)
	}
	testkit.Eventually(t, time.Minute, func() bool {
		return e.count(t, "published_at IS NULL") == 0
	}, "every event marked published")
}

// TestManyRelays is the "many relays" run: 4 relays on one
// PostgreSQL table, 20,000 events over 200 ordering keys plus unordered
// ones, ~10% of deliveries failing at random. Every event is delivered,
// each key in order, without duplicates, and unordered events are never
// held back by a failing key (the poison key's head fails until all of
// them are delivered). HERALD_RELAY_STRESS_EVENTS changes the size.
func TestManyRelays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	runManyRelays(t, e, 4, stressEvents(t, 20000), 200)
}

// TestManyRelaysSQLite is the same with two relays on one SQLite file.
func TestManyRelaysSQLite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	runManyRelays(t, e, 2, 2000, 50)
}

func TestSlowBatchIsNotDeliveredTwice(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		const lease = 2 * time.Second
		for i := range 5 {
			e.enqueue(t, msg("slow", "", i))
		}
		var mu sync.Mutex
		count := map[uuid.UUID]int{}
		byRelay := map[string]int{}
		started := make(chan struct{}, 5)
		slow := func(name string) *recorder {
			return &recorder{fail: func(ev *envelope.Event) error {
				started <- struct{}{}
				// Half a lease per event, one at a time: the batch of five
				// takes 2.5 leases; only renewal keeps it this relay's.
				t := time.NewTimer(lease / 2)
				defer t.Stop()
				<-t.C
				mu.Lock()
				count[ev.ID]++
				byRelay[name]++
				mu.Unlock()
				return nil
			}}
		}
		cfg := Config{Lease: lease, DeliveryTimeout: lease * 3 / 4, Concurrency: 1}
		a := e.newRelay(t, slow("a"), cfg)
		start(t, a)
		<-started // a holds the batch
		b := e.newRelay(t, slow("b"), cfg)
		start(t, b)
		testkit.Eventually(t, time.Minute, func() bool {
			return e.count(t, "published_at IS NOT NULL") == 5
		}, "the slow batch marked")
		mu.Lock()
		defer mu.Unlock()
		for id, n := range count {
			if n != 1 {
				t.Fatalf("event %s delivered %d times", id, n)
			}
		}
		if byRelay["a"] != 5 || byRelay["b"] != 0 {
			t.Fatalf("deliveries by relay: %v", byRelay)
		}
	})
}
