package relay

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// successorsEnv is a PostgreSQL relay whose lease statements are counted
// by form: the lease of successors, and all of them.
type successorsEnv struct {
	*env
	r                *Relay
	rec              *recorder
	successors, all  int
	lastWasSuccessor bool
}

func newSuccessorsEnv(t *testing.T, cfg Config) *successorsEnv {
	t.Helper()
	s := &successorsEnv{env: newEnv(t, envelope.Postgres), rec: &recorder{}}
	s.r = s.newRelay(t, s.rec, cfg)
	s.r.fromStartEvery = true // the tests count leases; the pace by cost: TestFromStartPacedByItsCost
	s.r.onLease = func(q string) {
		s.all++
		s.lastWasSuccessor = q == s.r.sql.leaseSuccessorsMarked || q == s.r.sql.leaseSuccessorsDeleted
		if s.lastWasSuccessor {
			s.successors++
		}
	}
	return s
}

// poll polls as the poll loop does (a batch delivered whole carries its
// mark into the next lease) and returns what it delivered.
func (s *successorsEnv) poll(t *testing.T) []*envelope.Event {
	t.Helper()
	before := s.rec.count()
	if _, err := s.r.pollCarry(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	return s.rec.events()[before:]
}

// roundRobin is n messages of topic "t" spread over keys ordering keys
// k0, k1, … in turn, payloads from first.
func roundRobin(n, keys, first int) []envelope.Message {
	var ms []envelope.Message
	for i := range n {
		ms = append(ms, msg("t", fmt.Sprintf("k%02d", i%keys), first+i))
	}
	return ms
}

// keysOf is the ordering keys of es, in order.
func keysOf(es []*envelope.Event) []string {
	var ks []string
	for _, e := range es {
		ks = append(ks, e.OrderingKey)
	}
	return ks
}

// A backlog of more keys than a batch holds drains through leases of the
// delivered keys' next events, each key in sequence order, every event
// once; and an event of a key the batches did not hold — written behind
// the first events of the others — waits at most floorEvery leases.
func TestSuccessorsDrainKeysInOrder(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeleteOnPublish=%v", del), func(t *testing.T) {
			t.Parallel()
			s := newSuccessorsEnv(t, Config{BatchSize: 20, DeleteOnPublish: del})
			ms := append(roundRobin(5*20, 20, 0), msg("late-keyed", "z", 0), msg("late-unordered", "", 0))
			written := s.enqueue(t, append(ms, roundRobin(95*20, 20, 100)...)...)
			lateAt := map[string]int{}
			var polls int
			for polls = 1; s.rec.count() < len(written) && polls < 500; polls++ {
				for _, e := range s.poll(t) {
					if e.Topic == "late-keyed" || e.Topic == "late-unordered" {
						lateAt[e.Topic] = polls
					}
				}
			}
			got := s.rec.events()
			if len(got) != len(written) {
				t.Fatalf("delivered %d of %d events in %d polls", len(got), len(written), polls)
			}
			perKey := map[string][]*envelope.Event{}
			seen := map[int64]bool{}
			for _, e := range got {
				if seen[e.Sequence] {
					t.Fatalf("event %d delivered twice", e.Sequence)
				}
				seen[e.Sequence] = true
				perKey[e.OrderingKey] = append(perKey[e.OrderingKey], e)
			}
			for k, es := range perKey {
				if k != "" && !inSequence(es) {
					t.Fatalf("key %s delivered out of order: %s", k, describe(es))
				}
			}
			if s.successors < s.all/2 {
				t.Fatalf("%d of %d leases were leases of successors; want most of a keyed drain's", s.successors, s.all)
			}
			for _, topic := range []string{"late-keyed", "late-unordered"} {
				if at := lateAt[topic]; at == 0 || at > floorEvery+1 {
					t.Fatalf("%s delivered at poll %d; want within the first %d", topic, at, floorEvery+1)
				}
			}
			s.r.flushCarried(context.Background()) // as the loop does when it stops
			if n := s.count(t, "published_at IS NULL"); n != 0 {
				t.Fatalf("%d events left unpublished", n)
			}
		})
	}
}

// A key's successor is the first pending event after those delivered,
// tested as found: one that waits for its retry, or belongs to a paused
// topic or a topic the relay does not take, holds its key back; the lease
// never steps over it to a later event of its key.
func TestSuccessorIsNotSteppedOver(t *testing.T) {
	t.Parallel()
	s := newSuccessorsEnv(t, Config{BatchSize: 10, ExcludeTopics: []string{"skipped"}})
	var ms []envelope.Message
	for i := range 3 * 10 {
		topic := "t"
		switch i {
		case 10: // k0's second event
			topic = "paused"
		case 11: // k1's second event
			topic = "skipped"
		}
		ms = append(ms, msg(topic, fmt.Sprintf("k%d", i%10), i))
	}
	written := s.enqueue(t, ms...)
	if _, err := s.db.Exec(`INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES ('paused', '', now())`); err != nil {
		t.Fatal(err)
	}
	first := s.poll(t)
	if len(first) != 10 || s.r.carried == nil {
		t.Fatalf("first poll delivered %s (mark carried: %v); want the 10 heads, the mark carried", describe(first), s.r.carried != nil)
	}
	// k2's second event waits for a retry.
	if _, err := s.db.Exec(`UPDATE herald_outbox SET next_attempt_at = now() + interval '1 hour', attempts = 1 WHERE sequence = $1`, written[12].Sequence); err != nil {
		t.Fatal(err)
	}
	second := s.poll(t)
	if !s.lastWasSuccessor {
		t.Fatal("the second lease was not the lease of successors")
	}
	for _, e := range second {
		if k := e.OrderingKey; k == "k0" || k == "k1" || k == "k2" {
			t.Fatalf("leased %s (sequence %d) while an earlier event of its key is held back: %s", k, e.Sequence, describe(second))
		}
	}
	if len(second) != 7 {
		t.Fatalf("second poll delivered %s; want the second events of k3…k9", describe(second))
	}
	if n := s.count(t, fmt.Sprintf("sequence <= %d AND published_at IS NOT NULL", written[9].Sequence)); n != 10 {
		t.Fatalf("%d of the first 10 events published by the carried mark, want 10", n)
	}
}

// The window of the lease of successors leaves out only the last block of
// consecutive sequences the batch delivered (carriedBlock): an event of a
// delivered key that lies between delivered events, below that block, is
// still found as its key's next event. Here k0's second event (sequence
// 2) lies between the batch's first event (k0's head, 1) and the block of
// the other heads (3…11) and waits for a retry: k0 gets nothing, and its
// third event is not leased ahead of it. With the whole batch taken for
// the block, the window stepped over sequence 2 and leased k0's third.
func TestSuccessorWindowSkipsOnlyTheCarriedBlock(t *testing.T) {
	t.Parallel()
	s := newSuccessorsEnv(t, Config{BatchSize: 10})
	ms := []envelope.Message{msg("t", "k0", 0), msg("t", "k0", 1)}
	for i := 1; i < 10; i++ {
		ms = append(ms, msg("t", fmt.Sprintf("k%d", i), i))
	}
	for i := range 10 {
		ms = append(ms, msg("t", fmt.Sprintf("k%d", i), 10+i))
	}
	written := s.enqueue(t, ms...)
	first := s.poll(t)
	if len(first) != 10 || s.r.carried == nil || slices.ContainsFunc(first, func(e *envelope.Event) bool { return e.Sequence == written[1].Sequence }) {
		t.Fatalf("first poll delivered %s (mark carried: %v); want the 10 heads, the mark carried", describe(first), s.r.carried != nil)
	}
	if from, to, below := carriedBlock(first); from != written[2].Sequence || to != written[10].Sequence || below != 1 {
		t.Fatalf("carriedBlock = %d, %d, %d; want %d, %d, 1", from, to, below, written[2].Sequence, written[10].Sequence)
	}
	if _, err := s.db.Exec(`UPDATE herald_outbox SET next_attempt_at = now() + interval '1 hour', attempts = 1 WHERE sequence = $1`, written[1].Sequence); err != nil {
		t.Fatal(err)
	}
	second := s.poll(t)
	if !s.lastWasSuccessor {
		t.Fatal("the second lease was not the lease of successors")
	}
	if slices.Contains(keysOf(second), "k0") || len(second) != 9 {
		t.Fatalf("second poll delivered %s; want the second events of k1…k9, nothing of k0 while its second event waits", describe(second))
	}
}

// When the carried mark finds a delivered event no longer leased by this
// relay (its lease ran out and another relay took it), that event stays
// pending, and no successor is leased by the statement — not even after
// the events of its key that the mark did publish: the full form runs at
// once and leases the next events of the other keys, nothing of that one.
func TestSuccessorsNeedTheWholeMark(t *testing.T) {
	t.Parallel()
	s := newSuccessorsEnv(t, Config{BatchSize: 10})
	s.enqueue(t, roundRobin(2*20, 2, 0)...)
	var carried []*envelope.Event
	for range 3 { // the heads, then runs of both keys
		got := s.poll(t)
		if len(got) == 10 && s.r.carried != nil {
			carried = got
			break
		}
	}
	if carried == nil {
		t.Fatal("no run of 10 events was delivered with its mark carried")
	}
	var k0 []int64
	for _, e := range carried {
		if e.OrderingKey == "k00" {
			k0 = append(k0, e.Sequence)
		}
	}
	if len(k0) < 2 {
		t.Fatalf("the batch %s holds %d events of k0; want a run", describe(carried), len(k0))
	}
	// The run's head was taken over by another relay after the lease ran
	// out; the events behind it are still this relay's.
	if _, err := s.db.Exec(`UPDATE herald_outbox SET leased_by = 'other', lease_until = now() + interval '1 hour' WHERE sequence = $1`, k0[0]); err != nil {
		t.Fatal(err)
	}
	var forms []bool
	s.r.onLease = func(q string) { forms = append(forms, q == s.r.sql.leaseSuccessorsMarked) }
	next := s.poll(t)
	if !slices.Equal(forms, []bool{true, false}) {
		t.Fatalf("lease forms run (true: successors): %v; want the successors, then the full form", forms)
	}
	if keys := keysOf(next); slices.Contains(keys, "k00") || len(keys) == 0 {
		t.Fatalf("the next poll delivered %s; want events of k1, nothing of k0 while its head is another relay's", describe(next))
	}
}

// A backlog of keys that hold one event each: the lease of successors
// finds nothing, and the full form runs in the same poll — the relay does
// not wait a poll interval with events pending.
func TestSuccessorsOfDrainedKeysFallBackAtOnce(t *testing.T) {
	t.Parallel()
	s := newSuccessorsEnv(t, Config{BatchSize: 10})
	fillKeyed(t, s.env, 40, 40)
	for i := range 4 {
		if got := s.poll(t); len(got) != 10 {
			t.Fatalf("poll %d delivered %s; want 10 heads", i+1, describe(got))
		}
	}
	if s.successors != 3 || s.all != 7 {
		t.Fatalf("%d leases, %d of them of successors; want 7 and 3 (each empty, each followed by the full form)", s.all, s.successors)
	}
}

// Two relays drain many keys, with failures, through leases of
// successors: every key's events are first delivered in sequence order,
// each exactly once after the one before.
func TestSuccessorsAcrossTwoRelaysKeepOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 2000, 50)
	d, f := newFlakyLog(97)
	var smu sync.Mutex
	successors := 0
	for i := range 2 {
		r := e.newRelay(t, d, Config{Name: fmt.Sprintf("r%d", i), BatchSize: 20, Concurrency: 4, MaxPollInterval: 50 * time.Millisecond})
		r.onLease = func(q string) {
			if q == r.sql.leaseSuccessorsMarked {
				smu.Lock()
				successors++
				smu.Unlock()
			}
		}
		start(t, r)
	}
	testkit.Eventually(t, time.Minute, func() bool { return e.count(t, "published_at IS NULL") == 0 }, "every event published")
	perKey, delivered := f.firstByKey()
	if delivered != 2000 {
		t.Fatalf("%d of 2000 events delivered", delivered)
	}
	for k, es := range perKey {
		if len(es) != 40 || !inSequence(es) {
			t.Fatalf("key %s: %d events first delivered, in sequence order %v: %s", k, len(es), inSequence(es), describe(es))
		}
	}
	smu.Lock()
	defer smu.Unlock()
	if successors == 0 {
		t.Fatal("no lease of successors ran")
	}
}

// Where PostgreSQL may JIT-compile the lease of successors (its estimate
// at half of jit_above_cost or more), the full form runs instead, the
// mark in its transaction, which sets jit off; elsewhere the lease of
// successors runs. Either way the carried events are published and the
// keys' next events leased.
func TestSuccessorsKeepTheJITGuard(t *testing.T) {
	t.Parallel()
	for _, c := range jitGuardCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := jitEnv(t).withParams(t, c.params)
			written := e.enqueue(t, roundRobin(3*10, 10, 0)...)
			rec := &recorder{}
			r := e.newRelay(t, rec, Config{Name: c.name, BatchSize: 10})
			var successors int
			r.onLease = func(q string) {
				if q == r.sql.leaseSuccessorsMarked {
					successors++
				}
			}
			for range 2 {
				if _, err := r.pollCarry(context.Background(), true); err != nil {
					t.Fatal(err)
				}
			}
			if got := successors == 1; got == c.guarded {
				t.Fatalf("leases of successors: %d with jit_above_cost %v; want %v", successors, math.Float64frombits(r.jitAbove.Load()), map[bool]int{true: 0, false: 1}[c.guarded])
			}
			got := rec.events()
			seqs := func(es []*envelope.Event) []int64 {
				var s []int64
				for _, e := range es {
					s = append(s, e.Sequence)
				}
				slices.Sort(s)
				return s
			}
			if len(got) != 20 || !slices.Equal(seqs(got[10:]), seqs(written[10:20])) {
				t.Fatalf("delivered %s; want the heads of 10 keys, then their next events", describe(got))
			}
			if n := e.count(t, fmt.Sprintf("sequence <= %d AND published_at IS NOT NULL", written[9].Sequence)); n != 10 {
				t.Fatalf("%d of the first 10 events published, want 10", n)
			}
		})
	}
}

// The lease of successors is estimated at about the same cost on a table
// ten times as large: its estimate must stay under half of jit_above_cost
// at any size, or the relay runs the full form instead (the JIT guard).
// With the followers' limit computed in the statement, PostgreSQL
// estimated a tenth of the key index per head, and at 1,000,000 events
// the relay never ran this form.
func TestSuccessorsEstimateIndependentOfTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	r := e.newRelay(t, &recorder{}, Config{Name: "probe", BatchSize: 100})
	estimate := func() float64 {
		t.Helper()
		if _, err := e.db.Exec("ANALYZE herald_outbox"); err != nil {
			t.Fatal(err)
		}
		var lit string // the first 100 events, as if just delivered
		var lo, hi int64
		if err := e.db.QueryRow(`SELECT '{' || string_agg(sequence::text, ',') || '}', min(sequence), max(sequence) FROM (SELECT sequence FROM herald_outbox ORDER BY sequence LIMIT 100) s`).Scan(&lit, &lo, &hi); err != nil {
			t.Fatal(err)
		}
		cost, err := r.estimateCost(context.Background(), r.sql.leaseSuccessorsMarked,
			append([]any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize}, append(slices.Clip(r.fargs), lit, int64(100), int64(0), lo, hi, int64(100))...))
		if err != nil {
			t.Fatal(err)
		}
		return cost
	}
	fillKeyed(t, e, 5000, 100)
	small := estimate()
	fillKeyed(t, e, 45000, 100)
	large := estimate()
	t.Logf("estimated cost of the lease of successors: %.0f at 5,000 events, %.0f at 50,000", small, large)
	// Measured: 183 and 414; with the limit computed in the statement,
	// 1,205 and 10,673.
	if large > 4*small {
		t.Fatalf("the estimate grew from %.0f to %.0f with ten times the events", small, large)
	}
}
