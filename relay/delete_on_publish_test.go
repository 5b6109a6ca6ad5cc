package relay

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestDeleteOnPublishDeletesDeliveredKeepsFailed: with DeleteOnPublish the
// delivered events are gone from the table, each key's events arrive in
// order, and a dead-lettered event is kept — still holding back the rest
// of its key — for RetryDeadLettered, which then delivers and deletes them.
func TestDeleteOnPublishDeletesDeliveredKeepsFailed(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		var ms []envelope.Message
		for i := range 30 {
			key := []string{"", "a", "b", "c"}[i%4]
			ms = append(ms, msg("t", key, map[string]any{"n": i}))
		}
		evs := e.enqueue(t, ms...)
		poison := evs[6] // key "b", its second event
		if poison.OrderingKey != "b" {
			t.Fatalf("event 6 has key %q", poison.OrderingKey)
		}
		var healed atomic.Bool
		rec := &recorder{fail: func(ev *envelope.Event) error {
			if ev.ID == poison.ID && !healed.Load() {
				return errors.New("poison")
			}
			return nil
		}}
		r := e.newRelay(t, rec, Config{BatchSize: 7, MaxAttempts: 2, DeleteOnPublish: true})
		start(t, r)
		// Key b: evs[2] delivered, evs[6] dead, evs[10], 14, … 26 held back (5).
		// The last delivery is recorded before its delete commits: wait for
		// both.
		testkit.Eventually(t, 30*time.Second, func() bool {
			return e.count(t, "dead_lettered_at IS NOT NULL") == 1 && rec.count() == 30-1-5 && e.count(t, "1 = 1") == 6
		}, "all but key b's dead event and the 5 behind it delivered and deleted (6 rows left)")
		if n := e.count(t, "published_at IS NOT NULL"); n != 0 {
			t.Fatalf("%d rows marked published with DeleteOnPublish", n)
		}
		last := map[string]int64{}
		for _, ev := range rec.events() {
			if ev.OrderingKey == "" {
				continue
			}
			if ev.Sequence <= last[ev.OrderingKey] {
				t.Fatalf("key %q: event %d delivered after %d", ev.OrderingKey, ev.Sequence, last[ev.OrderingKey])
			}
			last[ev.OrderingKey] = ev.Sequence
		}
		healed.Store(true)
		if _, err := r.RetryDeadLettered(context.Background(), Filter{}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 30*time.Second, func() bool { return e.count(t, "1 = 1") == 0 },
			"the retried event and its key's later events delivered and deleted")
		if rec.count() != 30 {
			t.Fatalf("%d deliveries, want 30", rec.count())
		}
	})
}

// TestDeleteOnPublishLeavesATakenOverEventAlone: a relay whose lease was
// taken over deletes nothing of the new holder's.
func TestDeleteOnPublishLeavesATakenOverEventAlone(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		e.enqueue(t, msg("t", "", 1), msg("t", "", 2))
		r := e.newRelay(t, &recorder{}, Config{Name: "first", DeleteOnPublish: true})
		batch, errs, err := r.lease(context.Background())
		if err != nil || len(batch) != 2 {
			t.Fatalf("lease: %d events, %v", len(batch), err)
		}
		tbl, _ := envelope.ParseTable(e.d, e.table)
		q := `UPDATE ` + tbl.Quoted + ` SET leased_by = 'second' WHERE sequence = ` + itoa(int(batch[1].Sequence))
		if _, err := e.db.Exec(q); err != nil {
			t.Fatal(err)
		}
		if _, err := r.mark(context.Background(), batch, errs); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, "1 = 1"); n != 1 {
			t.Fatalf("%d rows left, want 1: the event the second relay holds", n)
		}
		if n := e.count(t, "leased_by = 'second' AND published_at IS NULL"); n != 1 {
			t.Fatal("the taken-over event was touched")
		}
	})
}

func TestDeleteOnPublishRejectsRetainPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	_, err := New(e.db, &recorder{}, Config{DeleteOnPublish: true, RetainPublished: time.Hour})
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "RetainPublished") {
		t.Fatalf("DeleteOnPublish with RetainPublished: %v; want ErrConfiguration naming RetainPublished", err)
	}
}
