package admin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/envelope"
)

// TestBatchesCountProgressAndContinue retries and discards dead letters in
// batches: Progress sees each committed batch, a context ended after the
// first batch stops with that batch kept and the rest untouched, and the
// same call again finishes the job.
func TestBatchesCountProgressAndContinue(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var ms []envelope.Message
		for i := range 15 {
			ms = append(ms, msg("a.x", fmt.Sprintf("k%d", i), map[string]any{"fail": "a"}))
		}
		for range 10 {
			ms = append(ms, msg("b.y", "", map[string]any{"fail": "b"}))
		}
		evs := e.enqueue(t, ms...)
		e.waitDead(t, evs...)
		count := func(q admin.Query) int64 {
			t.Helper()
			n, err := e.adm.Count(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(admin.Query{Topics: []string{"a.*"}}); n != 15 {
			t.Fatalf("Count a.*: %d, want 15", n)
		}
		if n := count(admin.Query{State: admin.StateAll}); n != 25 {
			t.Fatalf("Count all: %d, want 25", n)
		}

		e.recv.heal()
		var progress []int64
		n, err := e.adm.RetryBatches(ctx, admin.Query{Topics: []string{"a.*"}}, admin.BatchOptions{Size: 4,
			Progress: func(done int64) { progress = append(progress, done) }})
		if err != nil || n != 15 {
			t.Fatalf("RetryBatches: %d, %v; want 15", n, err)
		}
		if !slices.Equal(progress, []int64{4, 8, 12, 15}) {
			t.Fatalf("RetryBatches progress %v, want [4 8 12 15]", progress)
		}
		for _, ev := range evs[:15] {
			waitFor(t, "retried event delivered", func() bool { return e.recv.delivered(ev.ID) })
		}

		// Interrupted after the first batch: 4 gone, 6 left, all dead.
		cctx, cancel := context.WithCancel(ctx)
		n, err = e.adm.DiscardBatches(cctx, admin.Query{Topics: []string{"b.y"}}, admin.BatchOptions{Size: 4,
			Progress: func(int64) { cancel() }})
		if n != 4 || !errors.Is(err, context.Canceled) {
			t.Fatalf("DiscardBatches cancelled after a batch: %d, %v; want 4 and context.Canceled", n, err)
		}
		if left := count(admin.Query{Topics: []string{"b.y"}}); left != 6 {
			t.Fatalf("dead b.y after the interrupted discard: %d, want 6", left)
		}
		if n, err := e.adm.DiscardBatches(ctx, admin.Query{Topics: []string{"b.y"}}, admin.BatchOptions{Size: 4}); n != 6 || err != nil {
			t.Fatalf("DiscardBatches again: %d, %v; want 6", n, err)
		}
		if all := count(admin.Query{State: admin.StateAll}); all != 15 {
			t.Fatalf("events left: %d, want the 15 retried", all)
		}
		if _, err := e.adm.RetryBatches(ctx, admin.Query{}, admin.BatchOptions{Size: admin.MaxBatchSize + 1}); !errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("Size too large: %v, want ErrValidation", err)
		}
	})
}

// TestFollowShowsNewEvents follows the table from its LastSequence: only
// the events written after it, in order, each once.
func TestFollowShowsNewEvents(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e.enqueue(t, msg("old.one", "", map[string]any{"ok": true}))
		last, err := e.adm.LastSequence(ctx)
		if err != nil || last == 0 {
			t.Fatalf("LastSequence: %d, %v", last, err)
		}
		news := e.enqueue(t, msg("new.one", "", map[string]any{"ok": 1}), msg("new.two", "", map[string]any{"ok": 2}))
		var got []string
		err = e.adm.Follow(ctx, admin.Query{State: admin.StateAll, After: last}, 0, func(ev admin.Event) error {
			got = append(got, ev.Topic)
			if len(got) == 2 {
				// A third one, written while following: seen at a later read.
				if len(news) == 2 {
					news = append(news, e.enqueue(t, msg("new.three", "", map[string]any{"ok": 3}))...)
				}
			}
			if len(got) == 3 {
				cancel()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"new.one", "new.two", "new.three"}) {
			t.Fatalf("Follow showed %v", got)
		}
	})
}
