package envelope_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestKeyLockFormsBeforeSequence: every form of the key locks a write can
// take on PostgreSQL — one key (one pg_advisory_xact_lock call) or several
// (the array subquery), in a single-row INSERT … SELECT, a multi-row
// VALUES and an unnest INSERT — locks the same bucket for a key as the
// others, and takes it before the statement draws any sequence value. T1
// writes key k in one form and stays open; T2 writes k in another and must
// wait (seen in pg_locks); meanwhile T3 commits an unordered event
// (sequence s3); T1 commits. Every event of T2 must have a sequence above
// s3: drawn after the wait, not before it.
func TestKeyLockFormsBeforeSequence(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")
	msgs := func(keys ...string) []envelope.Message {
		out := make([]envelope.Message, len(keys))
		for i, k := range keys {
			out[i] = envelope.Message{Topic: "t", Payload: map[string]any{"i": i}, OrderingKey: k}
		}
		return out
	}
	type write func(ctx context.Context, q envelope.Querier, ms []envelope.Message) (*envelope.WriteResult, error)
	forms := []struct {
		name  string
		write write
		ms    []envelope.Message
	}{
		{"one row, one key", w.Write, msgs("k")},
		{"VALUES, one key", w.Write, msgs("k", "k", "k")},
		{"VALUES, two keys", w.Write, msgs("k2", "k", "k2")},
		{"unnest, one key", w.WriteCapturedArrays, msgs("k", "k", "k")},
		{"unnest, two keys", w.WriteCapturedArrays, msgs("k", "k2", "k")},
	}
	for _, first := range forms {
		for _, second := range forms {
			t.Run(first.name+" then "+second.name, func(t *testing.T) {
				tx1, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx1.Rollback() }()
				r1, err := first.write(ctx, tx1, first.ms)
				if err != nil {
					t.Fatal(err)
				}
				tx2, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx2.Rollback() }()
				var pid int
				if err := tx2.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					t.Fatal(err)
				}
				type result struct {
					r   *envelope.WriteResult
					err error
				}
				done := make(chan result, 1)
				go func() {
					r, err := second.write(ctx, tx2, second.ms)
					done <- result{r, err}
				}()
				finished := false
				testkit.Eventually(t, 20*time.Second, func() bool {
					if len(done) > 0 {
						finished = true
						return true
					}
					var n int
					_ = db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted`, pid).Scan(&n)
					return n > 0
				}, "the second writer never waited on the key lock")
				if finished {
					r := <-done
					t.Fatalf("the second writer finished while the first held key k (err %v)", r.err)
				}
				r3, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: "unordered"}})
				if err != nil {
					t.Fatal(err)
				}
				s3 := r3.Events[0].Sequence
				if err := tx1.Commit(); err != nil {
					t.Fatal(err)
				}
				r := <-done
				if r.err != nil {
					t.Fatal(r.err)
				}
				if err := tx2.Commit(); err != nil {
					t.Fatal(err)
				}
				for _, e1 := range r1.Events {
					if e1.Sequence >= s3 {
						t.Fatalf("first writer's sequence %d not below the unordered event's %d", e1.Sequence, s3)
					}
				}
				for _, e := range r.r.Events {
					if e.Sequence <= s3 {
						t.Fatalf("second writer's event (key %q) has sequence %d, below the event committed while it waited (%d): drawn before the lock", e.OrderingKey, e.Sequence, s3)
					}
				}
			})
		}
	}
}
