package relay

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// LeaseByLock is PostgreSQL's alone, and cannot hold rows locked that a
// TxDelivery's own transaction must mark: New says so, naming the option.
func TestLeaseByLockRefused(t *testing.T) {
	t.Parallel()
	db, _ := openSQLite(t)
	_, err := New(db, &recorder{}, Config{Dialect: envelope.SQLite, LeaseByLock: true})
	if !errors.Is(err, envelope.ErrUnsupported) || !strings.Contains(err.Error(), "LeaseByLock") {
		t.Fatalf("LeaseByLock on SQLite: %v; want an ErrUnsupported error naming LeaseByLock", err)
	}
	e := newEnv(t, envelope.Postgres)
	_, err = New(e.db, txFunc(func(context.Context, *envelope.Event) error { return nil }), Config{LeaseByLock: true})
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "LeaseByLock") {
		t.Fatalf("LeaseByLock with a TxDelivery: %v; want an ErrConfiguration error naming LeaseByLock", err)
	}
}

// While a backlog of unordered events drains, a relay with LeaseByLock
// writes each event once — its mark, with the relay's name — and never a
// lease: the lease of unordered events locks its rows instead. Every event
// is delivered once.
func TestLeaseByLockWritesEachEventOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	if _, err := e.db.Exec(`CREATE TABLE lease_writes (sequence bigint NOT NULL);
CREATE FUNCTION log_lease_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.lease_until IS DISTINCT FROM OLD.lease_until AND NEW.lease_until IS NOT NULL THEN
    INSERT INTO lease_writes VALUES (NEW.sequence);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER log_lease_write BEFORE UPDATE ON herald_outbox FOR EACH ROW EXECUTE FUNCTION log_lease_write()`); err != nil {
		t.Fatal(err)
	}
	const n, batch = 200, 10
	fillKeyed(t, e, n, 0)
	rec := &recorder{}
	r := e.newRelay(t, rec, Config{Name: "locker", BatchSize: batch, LeaseByLock: true})
	var locked, written atomic.Int64
	r.onLease = func(q string) {
		if q == r.sql.leaseUnorderedLocked {
			locked.Add(1)
		} else {
			written.Add(1)
		}
	}
	start(t, r)
	testkit.Eventually(t, 30*time.Second, func() bool { return e.count(t, "published_at IS NULL") == 0 }, "events left unpublished")
	stop(t, r)
	for id, k := range rec.ids() {
		if k != 1 {
			t.Fatalf("event %s delivered %d times, want once", id, k)
		}
	}
	if got := len(rec.ids()); got != n {
		t.Fatalf("%d events delivered, want %d", got, n)
	}
	if c := e.count(t, "leased_by IS DISTINCT FROM 'locker'"); c != 0 {
		t.Fatalf("%d published events do not name the relay in leased_by", c)
	}
	var leaseWrites int
	if err := e.db.QueryRow(`SELECT count(DISTINCT sequence) FROM lease_writes`).Scan(&leaseWrites); err != nil {
		t.Fatal(err)
	}
	// The leases not from the floor (the first, which walks the keys; one
	// from the start of the table every floorEvery) write their lease.
	if locked.Load() < n/batch-3 || int64(leaseWrites) > written.Load()*batch {
		t.Fatalf("%d leases by lock and %d written, %d events with a lease written; want all but the first few leases by lock, and no lease written by them",
			locked.Load(), written.Load(), leaseWrites)
	}
}

// A batch held by lock is its relay's while the delivery takes longer than
// the Lease — the relay keeps its transaction alive, as it renews a lease —
// and another relay draining the table beside it steps over its rows: every
// event is delivered exactly once.
func TestLeaseByLockHeldThroughASlowDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	const n, batch = 60, 10
	fillKeyed(t, e, n, 0)
	const lease = time.Second
	var (
		mu        sync.Mutex
		delivered = map[uuid.UUID][]string{}
		heldSince time.Time // when the slow batch's delivery began
		slowDone  = make(chan struct{})
	)
	record := func(name string, es []*envelope.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range es {
			delivered[ev.ID] = append(delivered[ev.ID], name)
		}
	}
	var calls atomic.Int64
	a := e.newRelay(t, &batchFunc{fn: func(es []*envelope.Event) []error {
		if calls.Add(1) == 3 { // a batch leased by lock: the third lease is from the floor
			mu.Lock()
			heldSince = time.Now()
			mu.Unlock()
			time.Sleep(3 * lease) // a slow endpoint that ignores its context
			close(slowDone)
		}
		record("a", es)
		return make([]error, len(es))
	}}, Config{Name: "a", BatchSize: batch, Lease: lease, DeliveryTimeout: lease / 2, LeaseByLock: true})
	var heldQuery atomic.Bool
	a.onLease = func(q string) {
		if calls.Load() == 2 {
			heldQuery.Store(q == a.sql.leaseUnorderedLocked)
		}
	}
	// b polls beside a; lateB counts b's leases that began after a's slow
	// batch had been out longer than a Lease.
	var lateB atomic.Int64
	b := e.newRelay(t, &batchFunc{fn: func(es []*envelope.Event) []error {
		record("b", es)
		return make([]error, len(es))
	}}, Config{Name: "b", BatchSize: batch, Observer: pollFunc(func(p Poll) {
		mu.Lock()
		late := !heldSince.IsZero() && time.Since(heldSince) > lease+lease/2 && time.Since(heldSince) < 3*lease
		mu.Unlock()
		if late {
			lateB.Add(1)
		}
	})})
	start(t, a)
	testkit.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !heldSince.IsZero()
	}, "a's slow batch did not start")
	start(t, b)
	select {
	case <-slowDone:
	case <-time.After(30 * time.Second):
		t.Fatal("a's slow delivery did not end")
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return e.count(t, "published_at IS NULL") == 0 }, "events left unpublished")
	stop(t, a)
	stop(t, b)
	if !heldQuery.Load() {
		t.Fatal("a's slow batch was not leased by lock")
	}
	if lateB.Load() == 0 {
		t.Fatal("b did not poll while a's slow batch was out longer than its Lease")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != n {
		t.Fatalf("%d events delivered, want %d", len(delivered), n)
	}
	for id, by := range delivered {
		if len(by) != 1 {
			t.Fatalf("event %s delivered by %v; want once", id, by)
		}
	}
}

// A relay that stops answering with a batch held by lock loses it after one
// Lease, as it would lose a written lease: the server ends its idle
// transaction (idle_in_transaction_session_timeout, set to the Lease by the
// lease), another relay delivers the batch, and the silent relay's late
// mark fails rather than marking anything.
func TestLeaseByLockLostWhenTheRelayStopsAnswering(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	fillKeyed(t, e, 40, 0)
	const lease = time.Second
	a := e.newRelay(t, &recorder{}, Config{Name: "silent", BatchSize: 10, Lease: lease, DeliveryTimeout: lease / 2, LeaseByLock: true})
	leaseToUnorderedForm(t, a)
	if _, err := a.mark(context.Background(), nil, nil); err != nil { // the batch leaseToUnorderedForm returned: not a lock
		t.Fatal(err)
	}
	ctx := context.Background()
	held, _, err := a.lease(ctx)
	if err != nil || len(held) != 10 || a.held == nil {
		t.Fatalf("lease by lock: %d events, held %v, %v", len(held), a.held != nil, err)
	}
	var timeout string
	if err := a.held.tx.QueryRow(`SHOW idle_in_transaction_session_timeout`).Scan(&timeout); err != nil || timeout != "1s" {
		t.Fatalf("the held transaction's idle_in_transaction_session_timeout is %q (%v), want the Lease, 1s", timeout, err)
	}
	// a says nothing more. b takes the held batch once the server ended
	// a's transaction.
	rec := &recorder{}
	b := e.newRelay(t, rec, Config{Name: "b", BatchSize: 100})
	want := map[uuid.UUID]bool{}
	for _, ev := range held {
		want[ev.ID] = true
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		if _, err := b.poll(ctx); err != nil {
			t.Fatal(err)
		}
		got := 0
		for id := range rec.ids() {
			if want[id] {
				got++
			}
		}
		return got == len(want)
	}, "b did not get the batch the silent relay held")
	// a comes back and marks its batch: its transaction is gone, so the
	// mark fails and marks nothing of b's.
	if _, err := a.mark(ctx, held, make([]error, len(held))); err == nil {
		t.Fatal("the silent relay's mark after it lost its locks succeeded")
	}
	if c := e.count(t, "leased_by = 'silent' AND lease_until IS NULL"); c != 0 {
		t.Fatalf("%d events marked by the relay that lost its locks", c)
	}
}

// Failures of a batch held by lock are recorded in its transaction — the
// attempt, the error, the retry's time, the relay's name — and the events
// are delivered on their retry.
func TestLeaseByLockRecordsFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	const n = 60
	fillKeyed(t, e, n, 0)
	rec := failingOnce("first attempt refused")
	r := e.newRelay(t, rec, Config{Name: "locker", BatchSize: 10, LeaseByLock: true})
	var locked atomic.Int64
	r.onLease = func(q string) {
		if q == r.sql.leaseUnorderedLocked {
			locked.Add(1)
		}
	}
	start(t, r)
	testkit.Eventually(t, 30*time.Second, func() bool { return e.count(t, "published_at IS NULL") == 0 }, "events left unpublished")
	stop(t, r)
	if locked.Load() == 0 {
		t.Fatal("no lease by lock")
	}
	if c := e.count(t, "attempts = 1 AND last_error = 'first attempt refused' AND leased_by = 'locker'"); c != n {
		t.Fatalf("%d of %d events record their one failed attempt", c, n)
	}
	if got := len(rec.ids()); got != n {
		t.Fatalf("%d events delivered, want %d", got, n)
	}
}

// txFunc is a delivery.TxDelivery made of a function.
type txFunc func(context.Context, *envelope.Event) error

func (f txFunc) Deliver(ctx context.Context, e *envelope.Event) error { return f(ctx, e) }
func (f txFunc) DeliverTx(ctx context.Context, _ *sql.Tx, es []*envelope.Event) []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = f(ctx, e)
	}
	return errs
}
func (f txFunc) Close() error { return nil }

var _ delivery.TxDelivery = txFunc(nil)
