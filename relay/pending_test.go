package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestCarriedMarkCommitsWithTheNextLease: the poll loop's mark of a full
// batch delivered whole is written in the next lease's transaction — the
// events stay leased, unpublished, until that lease commits, and are then
// published whether or not the lease found anything.
func TestCarriedMarkCommitsWithTheNextLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 20, 0)
	rec := &recorder{}
	var observed atomic.Int64
	r := e.newRelay(t, rec, Config{BatchSize: 10, Observer: ObserverFuncs{OnDelivered: func(context.Context, Delivered) { observed.Add(1) }}})
	ctx := context.Background()
	for i, want := range []int{0, 10, 20} {
		if _, err := r.pollCarry(ctx, true); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, "published_at IS NOT NULL"); n != want {
			t.Fatalf("after poll %d: %d events published, want %d (the mark of the batch before)", i+1, n, want)
		}
		// The Observer is told after the marks are written.
		if n := observed.Load(); n != int64(want) {
			t.Fatalf("after poll %d: the Observer was told of %d deliveries, want %d (those marked)", i+1, n, want)
		}
	}
	if rec.count() != 20 || r.carried != nil {
		t.Fatalf("%d events delivered, mark still carried: %v", rec.count(), r.carried != nil)
	}
}

// TestCarriedMarkWrittenWhenTheLeaseFails: when the lease a mark was
// carried into fails, the mark is written on its own before the poll
// returns: the delivered events do not wait for their lease to run out
// and are not delivered again.
func TestCarriedMarkWrittenWhenTheLeaseFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 20, 0)
	rec := &recorder{}
	r := e.newRelay(t, rec, Config{BatchSize: 10})
	ctx := context.Background()
	if _, err := r.pollCarry(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The lease reads the table of paused topics: without it, it fails;
	// the mark does not read it.
	if _, err := e.db.Exec(`ALTER TABLE herald_outbox_paused RENAME TO herald_outbox_paused_away`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.pollCarry(ctx, true); err == nil {
		t.Fatal("the lease succeeded without the table of paused topics")
	}
	if n := e.count(t, "published_at IS NOT NULL"); n != 10 {
		t.Fatalf("after the failed lease %d events published, want the 10 delivered", n)
	}
	if r.carried != nil {
		t.Fatal("the mark is still carried after the lease failed")
	}
	if _, err := e.db.Exec(`ALTER TABLE herald_outbox_paused_away RENAME TO herald_outbox_paused`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.pollCarry(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.count(t, "published_at IS NOT NULL"); n != 20 || rec.count() != 20 {
		t.Fatalf("%d events published, %d deliveries; want 20 and 20", n, rec.count())
	}
}

// TestMarkNotCarried: a mark is written at once with AsyncCommit, when an
// event of the batch failed, and when the batch was short of unordered
// events (the loop waits before its next poll).
func TestMarkNotCarried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("AsyncCommit", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envelope.Postgres)
		fillKeyed(t, e, 20, 0)
		r := e.newRelay(t, &recorder{}, Config{BatchSize: 10, AsyncCommit: true})
		if _, err := r.pollCarry(ctx, true); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, "published_at IS NOT NULL"); n != 10 || r.carried != nil {
			t.Fatalf("%d events published, mark carried: %v; want 10, not carried", n, r.carried != nil)
		}
	})
	t.Run("failure", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envelope.Postgres)
		fillKeyed(t, e, 20, 0)
		var once sync.Once
		r := e.newRelay(t, &batchFunc{fn: func(es []*envelope.Event) []error {
			errs := make([]error, len(es))
			once.Do(func() { errs[0] = errors.New("refused") })
			return errs
		}}, Config{BatchSize: 10})
		if _, err := r.pollCarry(ctx, true); err != nil {
			t.Fatal(err)
		}
		if n, f := e.count(t, "published_at IS NOT NULL"), e.count(t, "attempts = 1"); n != 9 || f != 1 || r.carried != nil {
			t.Fatalf("%d events published, %d failures recorded, mark carried: %v; want 9, 1, not carried", n, f, r.carried != nil)
		}
	})
	t.Run("short", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envelope.Postgres)
		fillKeyed(t, e, 5, 0)
		r := e.newRelay(t, &recorder{}, Config{BatchSize: 10})
		if _, err := r.pollCarry(ctx, true); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, "published_at IS NOT NULL"); n != 5 || r.carried != nil {
			t.Fatalf("%d events published, mark carried: %v; want 5, not carried", n, r.carried != nil)
		}
	})
}

// TestStopWritesTheCarriedMark: a relay stopped while it carries a mark
// writes it before Stop returns: every event delivered is published.
func TestStopWritesTheCarriedMark(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 200, 0)
	reached, release := make(chan struct{}), make(chan struct{})
	var n int
	var mu sync.Mutex
	r := e.newRelay(t, &batchFunc{fn: func(es []*envelope.Event) []error {
		mu.Lock()
		n += len(es)
		if n == 30 {
			close(reached)
			<-release
		}
		mu.Unlock()
		return make([]error, len(es))
	}}, Config{BatchSize: 10})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-reached
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.run == nil || r.run.soft.Err() != nil
	}, "the relay did not begin to stop")
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	delivered := n
	mu.Unlock()
	if got := e.count(t, "published_at IS NOT NULL"); got != delivered || delivered != 30 {
		t.Fatalf("after Stop: %d events published, %d delivered; want 30 and 30", got, delivered)
	}
}

// TestLeaseFloorReachesBelow: after full leases the candidate scans start
// at the last lease's lowest sequence, yet an event that becomes leasable
// below that floor is leased within floorEvery leases.
func TestLeaseFloorReachesBelow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 400, 0)
	r := e.newRelay(t, &recorder{}, Config{BatchSize: 10})
	r.fromStartEvery = true // the bound counted in leases; the pace by cost: TestFromStartPacedByItsCost
	ctx := context.Background()
	var first int64
	for i := range 3 {
		batch, _, err := r.lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = batch[0].Sequence
		}
		if _, err := r.mark(ctx, batch, make([]error, len(batch))); err != nil {
			t.Fatal(err)
		}
	}
	if r.floor.Load() <= first {
		t.Fatalf("after three full leases the floor is %d, not above the first event %d", r.floor.Load(), first)
	}
	// The first event becomes pending again, below the floor.
	if _, err := e.db.Exec(`UPDATE herald_outbox SET published_at = NULL, leased_by = NULL, lease_until = NULL WHERE sequence = $1`, first); err != nil {
		t.Fatal(err)
	}
	for i := range floorEvery {
		batch, _, err := r.lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range batch {
			if ev.Sequence == first {
				if i == 0 {
					t.Fatal("the lease right after the floor was set reached below it: no floor")
				}
				return
			}
		}
		if _, err := r.mark(ctx, batch, make([]error, len(batch))); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("event %d below the floor was not leased in %d leases", first, floorEvery)
}

// TestShortLeaseFromTheStartLeasesAgain: in a drain, the periodic lease
// from the start of the table that comes back empty — its candidates, the
// first pending events of its snapshot, all taken by another relay — is
// followed at once by a lease from the floor, not by a wait of the poll
// interval. Here another transaction locks those candidates just before
// that lease runs, and the poll interval is an hour: the events past
// them are delivered only if the relay leases again at once.
func TestShortLeaseFromTheStartLeasesAgain(t *testing.T) {
	t.Parallel()
	for _, byLock := range []bool{false, true} {
		t.Run(fmt.Sprintf("LeaseByLock=%v", byLock), func(t *testing.T) {
			t.Parallel()
			const n, batch = 400, 10
			e := newEnv(t, envelope.Postgres)
			fillKeyed(t, e, n, 0)
			rec := &recorder{}
			r := e.newRelay(t, rec, Config{BatchSize: batch, LeaseByLock: byLock, MinPollInterval: time.Hour, MaxPollInterval: time.Hour})
			r.fromStartEvery = true
			ctx := context.Background()
			blocker, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = blocker.Rollback() }()
			var blocked atomic.Int64 // events the blocker locked
			r.onLease = func(q string) {
				// The poll loop's goroutine, before the statement: the
				// periodic lease from the start (a floor replaced).
				if blocked.Load() > 0 || q != r.sql.lease || r.floor.Load() != 0 || r.resume == 0 {
					return
				}
				var k int64
				err := blocker.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT sequence FROM herald_outbox
WHERE published_at IS NULL AND (lease_until IS NULL OR lease_until < now())
ORDER BY sequence LIMIT $1 FOR UPDATE SKIP LOCKED) c`, 2*batch).Scan(&k)
				if err != nil {
					t.Error(err)
				}
				blocked.Store(k)
			}
			start(t, r)
			testkit.Eventually(t, 30*time.Second, func() bool {
				k := blocked.Load()
				return k > 0 && rec.count() == n-int(k)
			}, "the events past the locked ones were not delivered: the relay waited its poll interval after the empty lease from the start")
			if k := blocked.Load(); k != 2*batch {
				t.Fatalf("the blocker locked %d events, want %d (the lease's candidates)", k, 2*batch)
			}
			stop(t, r)
		})
	}
}

// After a full lease of unordered events the next one starts after that
// batch, which its statement leaves out anyway (it carries the batch's
// mark); after a full lease that held keyed events it starts at the
// batch's lowest, where the next events of its keys may lie.
func TestLeaseFloorAfterTheBatch(t *testing.T) {
	t.Parallel()
	for _, keys := range []int{0, 5} {
		t.Run(fmt.Sprintf("keys=%d", keys), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envelope.Postgres)
			fillKeyed(t, e, 200, keys)
			r := e.newRelay(t, &recorder{}, Config{BatchSize: 5})
			ctx := context.Background()
			for range 3 { // the first lease walks keys: no floor
				batch, _, err := r.lease(ctx)
				if err != nil || len(batch) != 5 {
					t.Fatalf("lease: %s, %v", describe(batch), err)
				}
				if _, err := r.mark(ctx, batch, make([]error, len(batch))); err != nil {
					t.Fatal(err)
				}
				want := batch[0].Sequence
				if keys == 0 {
					want = batch[len(batch)-1].Sequence + 1
				}
				if got := r.floor.Load(); got != want && got != 0 {
					t.Fatalf("after the lease of %s the floor is %d, want %d", describe(batch), got, want)
				}
			}
			if r.floor.Load() == 0 {
				t.Fatal("no floor was set after full leases")
			}
		})
	}
}

// The leases from the start of the table are paced by their own cost:
// while the last one's duration times fromStartPace (at most
// fromStartMaxWait) has not passed since it ended, full leases keep their
// floor past floorEvery of them; once it has, the next full lease sets
// the floor to the start, and the lease from the start records its cost.
func TestFromStartPacedByItsCost(t *testing.T) {
	t.Parallel()
	r := &Relay{}
	if !r.fromStartDue() {
		t.Fatal("before any lease from the start, one is not due")
	}
	for _, c := range []struct {
		cost  time.Duration
		ended time.Duration // before now
		due   bool
	}{
		{50 * time.Millisecond, 0, false},                      // waits 950 ms
		{50 * time.Millisecond, time.Second, true},             // waited them
		{time.Hour, 0, false},                                  // waits fromStartMaxWait
		{time.Hour, fromStartMaxWait + time.Millisecond, true}, // no longer
		{time.Millisecond, -time.Hour, false},                  // not yet ended by this clock
	} {
		r.fromStartCost, r.fromStartEnd = c.cost, time.Now().Add(-c.ended)
		if got := r.fromStartDue(); got != c.due {
			t.Errorf("last lease from the start took %s and ended %s ago: due %v, want %v", c.cost, c.ended, got, c.due)
		}
	}

	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 600, 0)
	r = e.newRelay(t, &recorder{}, Config{BatchSize: 10})
	ctx := context.Background()
	leaseAndMark := func() {
		t.Helper()
		batch, _, err := r.lease(ctx)
		if err != nil || len(batch) != 10 {
			t.Fatalf("lease: %s, %v", describe(batch), err)
		}
		if _, err := r.mark(ctx, batch, make([]error, len(batch))); err != nil {
			t.Fatal(err)
		}
	}
	for r.floor.Load() == 0 { // the first lease walks keys, the second starts from the start
		leaseAndMark()
	}
	r.fromStartCost, r.fromStartEnd = time.Hour, time.Now().Add(time.Hour) // not due
	for i := range 3 * floorEvery {
		leaseAndMark()
		if r.floor.Load() == 0 {
			t.Fatalf("full lease %d from the floor set the floor to the start while the last lease from the start was not paid for", i+1)
		}
	}
	r.fromStartEnd = time.Now().Add(-time.Hour) // due
	leaseAndMark()
	if r.floor.Load() != 0 {
		t.Fatalf("once due, the lease after %d full ones left the floor at %d, not the start", 3*floorEvery, r.floor.Load())
	}
	before := time.Now()
	leaseAndMark() // from the start
	if r.fromStartEnd.Before(before) || r.fromStartCost <= 0 {
		t.Fatalf("the lease from the start did not record its cost: ended %v (lease began after %v), took %s", r.fromStartEnd, before, r.fromStartCost)
	}
}
