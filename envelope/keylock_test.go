package envelope_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturedjson"
	"github.com/heraldgo/herald/internal/outbox"
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
		{"unnest, one key", outbox.WriteArrays(w), msgs("k", "k", "k")},
		{"unnest, two keys", outbox.WriteArrays(w), msgs("k", "k2", "k")},
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

// TestKeyLockSpacePerTable: the key locks of an outbox table are its own.
// Two tables of one name in two schemas (a multi-tenant database, two
// tests) never wait on each other's keys — before the lock space was the
// table's OID it was a hash of its name, and two parallel tests writing
// many keys deadlocked (SQLSTATE 40P01) on each other's buckets — while
// one table reached by two names ("herald_outbox" on the search_path and
// "schema.herald_outbox") is one lock space.
func TestKeyLockSpacePerTable(t *testing.T) {
	t.Parallel()
	dbA, _ := testkit.Postgres(t)
	dbB, _ := testkit.Postgres(t)
	ctx := context.Background()
	var schemaA string
	if err := dbA.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schemaA); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*sql.DB{dbA, dbB} {
		if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")
	qualified, err := envelope.NewWriter(envelope.Postgres, schemaA+".herald_outbox")
	if err != nil {
		t.Fatal(err)
	}
	msg := []envelope.Message{{Topic: "t", Payload: 1, OrderingKey: "k"}}

	tx1, err := dbA.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx1.Rollback() }()
	if _, err := w.Write(ctx, tx1, msg); err != nil {
		t.Fatal(err)
	}

	// Another schema's table of the same name: no wait. lock_timeout turns
	// a wait into an error instead of a hang.
	tx2, err := dbB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback() }()
	if _, err := tx2.ExecContext(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, tx2, msg); err != nil {
		t.Fatalf("a write of key k to another schema's herald_outbox waited on this one's lock: %v", err)
	}
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}

	// The same table by its qualified name, from a connection whose
	// search_path is elsewhere: waits on tx1's lock.
	tx3, err := dbB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx3.Rollback() }()
	if _, err := tx3.ExecContext(ctx, `SET LOCAL lock_timeout = '200ms'`); err != nil {
		t.Fatal(err)
	}
	_, err = qualified.Write(ctx, tx3, msg)
	var pgErr interface{ SQLState() string }
	if err == nil || !errors.As(err, &pgErr) || pgErr.SQLState() != "55P03" {
		t.Fatalf("a write of key k to the same table by its qualified name did not wait for the open writer's lock (want lock_timeout, SQLSTATE 55P03): %v", err)
	}
}

// TestCapturedPayloadLockModes: the Writer takes the key lock of a
// message whose payload capture code marked capturedjson.RowKeyed (the
// row's own key, the row locked by the write) shared, and of any other
// keyed message (a capturedjson.JSON payload, a user's payload)
// exclusive: pg_locks shows the transaction's advisory locks so.
func TestCapturedPayloadLockModes(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")
	for _, c := range []struct {
		name    string
		payload any
		mode    string
	}{
		{"RowKeyed", capturedjson.RowKeyed(`{"id":1}`), "ShareLock"},
		{"JSON", capturedjson.JSON(`{"id":1}`), "ExclusiveLock"},
		{"user payload", map[string]any{"id": 1}, "ExclusiveLock"},
	} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(ctx, tx, []envelope.Message{{Topic: "t", Payload: c.payload, OrderingKey: "Loan:1"}}); err != nil {
			t.Fatal(err)
		}
		var modes []string
		rows, err := tx.QueryContext(ctx, `SELECT mode FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' ORDER BY mode`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var m string
			if err := rows.Scan(&m); err != nil {
				t.Fatal(err)
			}
			modes = append(modes, m)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback()
		if len(modes) != 1 || modes[0] != c.mode {
			t.Errorf("%s: advisory locks %v, want one %s", c.name, modes, c.mode)
		}
	}
}
