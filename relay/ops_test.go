package relay

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestDeadLetterHoldsItsKeyUntilRetried(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		evs := e.enqueue(t,
			msg("payments.charge", "order:1", 1), // fails until fixed, dead-lettered
			msg("payments.notify", "order:1", 2), // held behind it
			msg("orders.unordered", "", 3),
			msg("payments.notify", "order:2", 4),
			msg("payments.receipt", "order:1", 5), // held behind it
		)
		var broken atomic.Bool
		broken.Store(true)
		rec := &recorder{fail: func(ev *envelope.Event) error {
			if ev.Topic == "payments.charge" && broken.Load() {
				return errors.New("gateway says no")
			}
			return nil
		}}
		deadCh := make(chan DeadLettered, 1)
		r := e.newRelay(t, rec, Config{MaxAttempts: 3, Observer: ObserverFuncs{
			OnDeadLettered: func(_ context.Context, d DeadLettered) { deadCh <- d },
		}})
		ctx := context.Background()
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		d := <-deadCh
		if d.Event.ID != evs[0].ID || d.Attempts != 3 {
			t.Fatalf("dead-lettered %+v", d)
		}
		testkit.Eventually(t, 20*time.Second, func() bool { return rec.count() == 2 }, "the other keys delivered")
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// Stopped, and with nothing else to do, one more poll must lease
		// nothing: order:1 waits behind its dead event.
		if res, err := r.poll(ctx); err != nil || res.leased != 0 {
			t.Fatalf("poll leased %d (%v); order:1 must wait behind its dead event", res.leased, err)
		}
		b, err := r.Backlog(ctx)
		if err != nil || b.Pending != 2 || b.DeadLettered != 1 || b.OldestPendingAge <= 0 {
			t.Fatalf("backlog: %+v %v", b, err)
		}
		row := e.row(t, evs[0].ID)
		if row.DeadLetteredAt == nil || row.Attempts != 3 || row.LastError != "gateway says no" {
			t.Fatalf("dead row: %+v", row)
		}

		// Filters that match nothing revive nothing.
		for _, f := range []Filter{{Topics: []string{"payments.notify"}}, {IDs: []uuid.UUID{evs[1].ID}}, {Topics: []string{}},
			{Sequences: []int64{evs[1].Sequence}}, {Sequences: []int64{}}, {IDs: []uuid.UUID{evs[0].ID}, Sequences: []int64{evs[1].Sequence}}} {
			if n, err := r.RetryDeadLettered(ctx, f); err != nil || n != 0 {
				t.Fatalf("RetryDeadLettered(%+v) = %d, %v", f, n, err)
			}
		}
		if _, err := r.RetryDeadLettered(ctx, Filter{Topics: []string{"pay*ments"}}); !errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("bad pattern: %v", err)
		}
		broken.Store(false)
		// Every field at once: each binds its own parameter.
		if n, err := r.RetryDeadLettered(ctx, Filter{Topics: []string{"payments.*"}, IDs: []uuid.UUID{evs[0].ID, uuid.New()},
			Sequences: []int64{evs[0].Sequence, 1 << 40}}); err != nil || n != 1 {
			t.Fatalf("RetryDeadLettered = %d, %v", n, err)
		}
		row = e.row(t, evs[0].ID)
		if row.DeadLetteredAt != nil || row.Attempts != 0 || row.NextAttemptAt != nil {
			t.Fatalf("revived row: %+v", row)
		}
		start(t, r)
		testkit.Eventually(t, 20*time.Second, func() bool { return rec.count() == 5 }, "all delivered after the retry")
		var order []string
		for _, ev := range rec.events() {
			if ev.OrderingKey == "order:1" {
				order = append(order, ev.Topic)
			}
		}
		if !slices.Equal(order, []string{"payments.charge", "payments.notify", "payments.receipt"}) {
			t.Fatalf("order:1 delivered as %v", order)
		}
	})
}

func TestCleanupDeletesInBatches(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		var ms []envelope.Message
		for i := range 25 {
			ms = append(ms, msg("t", "", i))
		}
		ms = append(ms, msg("dead", "", 0), msg("dead", "", 1))
		e.enqueue(t, ms...)
		rec := &recorder{fail: func(ev *envelope.Event) error {
			if ev.Topic == "dead" {
				return errors.New("no")
			}
			return nil
		}}
		clk := &clock{t: time.Now()}
		r := e.newRelay(t, rec, Config{MaxAttempts: 1, CleanupBatchSize: 10})
		r.dbClock = clk.now
		ctx := context.Background()
		for {
			if res, err := r.poll(ctx); err != nil {
				t.Fatal(err)
			} else if res.leased == 0 {
				break
			}
		}
		// A relay with its own topics retries its dead events, one per
		// batch here; they fail again (MaxAttempts 1) and die again.
		rt := e.newRelay(t, rec, Config{Topics: []string{"dead", "t"}, CleanupBatchSize: 1})
		if n, err := rt.RetryDeadLettered(ctx, Filter{Topics: []string{"dead"}}); err != nil || n != 2 {
			t.Fatalf("RetryDeadLettered by a topic-filtered relay = %d, %v; want 2", n, err)
		}
		for {
			if res, err := r.poll(ctx); err != nil {
				t.Fatal(err)
			} else if res.leased == 0 {
				break
			}
		}
		if n, err := r.CleanupPublished(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("nothing is an hour old yet: %d %v", n, err)
		}
		clk.add(2 * time.Hour)
		if n, err := r.CleanupPublished(ctx, time.Hour); err != nil || n != 25 {
			t.Fatalf("CleanupPublished = %d, %v; want 25 in batches of 10", n, err)
		}
		if n, err := r.CleanupDeadLettered(ctx, time.Hour); err != nil || n != 2 {
			t.Fatalf("CleanupDeadLettered = %d, %v", n, err)
		}
		if left := e.count(t, "1 = 1"); left != 0 {
			t.Fatalf("%d rows left", left)
		}
		if _, err := r.CleanupPublished(ctx, -time.Second); !errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("negative age: %v", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := r.CleanupPublished(cctx, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled cleanup: %v", err)
		}
	})
}

// batchRec is a BatchDelivery that records the batches it gets.
type batchRec struct {
	recorder
	mu      sync.Mutex
	batches [][]*envelope.Event
}

func (b *batchRec) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	b.mu.Lock()
	b.batches = append(b.batches, es)
	b.mu.Unlock()
	errs := make([]error, len(es))
	for i, e := range es {
		if e.Topic == "bad" {
			errs[i] = errors.New("rejected")
		} else {
			_ = b.Deliver(ctx, e)
		}
	}
	return errs
}

func TestBatchDeliveryGetsTheWholeBatch(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		var ms []envelope.Message
		for i := range 12 {
			ms = append(ms, msg("good", "", i))
		}
		ms = append(ms, msg("bad", "", 0))
		bad := e.enqueue(t, ms...)[12]
		b := &batchRec{}
		r := e.newRelay(t, b, Config{BatchSize: 5, RetryBase: time.Hour, RetryMax: time.Hour})
		ctx := context.Background()
		for range 3 {
			if _, err := r.poll(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if len(b.batches) != 3 || len(b.batches[0]) != 5 || len(b.batches[2]) != 3 {
			t.Fatalf("batches: %d", len(b.batches))
		}
		if b.count() != 12 {
			t.Fatalf("%d delivered", b.count())
		}
		if row := e.row(t, bad.ID); row.Attempts != 1 || row.LastError != "rejected" || row.PublishedAt != nil {
			t.Fatalf("rejected event: %+v", row)
		}
	})
}

func TestExtraColumnsAreLoaded(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		tbl, _ := envelope.ParseTable(e.d, e.table)
		if _, err := e.db.Exec(`ALTER TABLE ` + tbl.Quoted + ` ADD COLUMN region VARCHAR(64)`); err != nil {
			t.Fatal(err)
		}
		e.enqueue(t, envelope.Message{Topic: "t", Payload: 1, Extra: map[string]any{"region": "acme"}}, msg("t", "", 2))
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{ExtraColumns: []string{"region"}})
		pollOnce(t, r, rec)
		got := rec.events()
		slices.SortFunc(got, func(a, b *envelope.Event) int { return int(a.Sequence - b.Sequence) })
		if len(got) != 2 {
			t.Fatalf("%d delivered", len(got))
		}
		region := func(ev *envelope.Event) string {
			switch v := ev.Extra["region"].(type) {
			case string:
				return v
			case []byte:
				return string(v)
			case nil:
				return "<nil>"
			}
			return "?"
		}
		if region(got[0]) != "acme" || region(got[1]) != "<nil>" {
			t.Fatalf("Extra: %v, %v", got[0].Extra, got[1].Extra)
		}
	})
}

func TestRolledBackEventsAreNeverDelivered(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.w.Write(ctx, tx, []envelope.Message{msg("rolled.back", "k", 1), msg("rolled.back", "", 2)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		tx, err = e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.w.Write(ctx, tx, []envelope.Message{msg("committed", "k", 3)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{})
		for {
			res, err := r.poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.leased == 0 {
				break
			}
		}
		if got := topics(rec.events()); !slices.Equal(got, []string{"committed"}) {
			t.Fatalf("delivered %v", got)
		}
	})
}
