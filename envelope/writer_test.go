package envelope_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// dbCase is one database a writer test runs against.
type dbCase struct {
	name    string
	dialect envelope.Dialect
	open    func(t *testing.T) *sql.DB
}

var dbCases = []dbCase{
	{"sqlite", envelope.SQLite, func(t *testing.T) *sql.DB {
		db, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}},
	{"postgres", envelope.Postgres, func(t *testing.T) *sql.DB {
		db, _ := testkit.Postgres(t)
		return db
	}},
	{"mysql", envelope.MySQL, func(t *testing.T) *sql.DB {
		db, _ := testkit.MySQL(t)
		return db
	}},
}

// eachDB runs f against a migrated outbox table on every database.
func eachDB(t *testing.T, f func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer)) {
	t.Helper()
	for _, c := range dbCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := c.open(t)
			ctx := context.Background()
			if err := envelope.Migrate(ctx, db, c.dialect, ""); err != nil {
				t.Fatal(err)
			}
			w, err := envelope.NewWriter(c.dialect, "")
			if err != nil {
				t.Fatal(err)
			}
			f(t, db, c.dialect, w)
		})
	}
}

func count(t *testing.T, db *sql.DB, where string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM herald_outbox `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, _ *envelope.Writer) {
		for range 2 {
			if err := envelope.Migrate(context.Background(), db, d, ""); err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
		}
		if err := envelope.Migrate(context.Background(), db, d, "other_outbox"); err != nil {
			t.Fatal(err)
		}
		var cols []string
		q := `SELECT column_name FROM information_schema.columns WHERE table_name = 'herald_outbox' AND table_schema = current_schema() ORDER BY ordinal_position`
		switch d {
		case envelope.SQLite:
			q = `SELECT name FROM pragma_table_info('herald_outbox') ORDER BY cid`
		case envelope.MySQL:
			q = strings.ReplaceAll(q, "current_schema()", "DATABASE()")
		}
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			cols = append(cols, c)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(cols, ",") != strings.Join(envelope.OwnColumns, ",") {
			t.Fatalf("columns %v, want %v", cols, envelope.OwnColumns)
		}
	})
}

func TestDDLErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d     envelope.Dialect
		table string
		kind  error
	}{
		{envelope.SQLite, "bad-name", envelope.ErrConfiguration},
		{envelope.SQLite, `x"; DROP TABLE y; --`, envelope.ErrConfiguration},
		{envelope.SQLite, "s.t", envelope.ErrConfiguration},
		{envelope.Postgres, "a.b.c", envelope.ErrConfiguration},
		{"oracle", "t", envelope.ErrUnsupported},
		{envelope.MySQL, "s.t", envelope.ErrConfiguration},
	} {
		if _, err := envelope.DDL(c.d, c.table); !errors.Is(err, c.kind) {
			t.Errorf("DDL(%s, %q) = %v, want %v", c.d, c.table, err, c.kind)
		}
	}
	s, err := envelope.DDLText(envelope.Postgres, "events.outbox")
	if err != nil || !strings.Contains(s, `CREATE TABLE IF NOT EXISTS "events"."outbox"`) || !strings.Contains(s, "events_outbox_pending_idx") {
		t.Fatalf("DDLText: %v\n%s", err, s)
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		later := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
		res, err := w.Write(ctx, db, []envelope.Message{
			{Topic: "library.loan.created", Payload: map[string]any{"loan_id": 1, "fee": 1.5}, OrderingKey: "loan:1", Headers: map[string]string{"librarian": "7"}},
			{Topic: "library.loan.created", Payload: []int{1, 2}},
			{Topic: "mail.send", Payload: "hi", DeliverAt: later},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Events) != 3 || strings.Join(res.Topics, ",") != "library.loan.created,mail.send" {
			t.Fatalf("result %+v", res)
		}
		for i := 1; i < 3; i++ {
			if res.Events[i].Sequence <= res.Events[i-1].Sequence {
				t.Fatalf("sequences not in message order: %d then %d", res.Events[i-1].Sequence, res.Events[i].Sequence)
			}
		}
		e := res.Events[0]
		if e.ID.Version() != 7 || e.OrderingKey != "loan:1" || e.Headers["librarian"] != "7" || e.CreatedAt.IsZero() {
			t.Fatalf("event %+v", e)
		}
		stored, err := outbox.ScanEvent(db.QueryRow(`SELECT `+envelope.EventColumns+` FROM herald_outbox WHERE sequence = `+outbox.Placeholder(d, 1), e.Sequence), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		_ = json.Unmarshal(stored.Payload, &got)
		_ = json.Unmarshal([]byte(`{"loan_id":1,"fee":1.5}`), &want)
		if stored.ID != e.ID || stored.Topic != e.Topic || stored.Headers["librarian"] != "7" || !jsonEqual(got, want) ||
			!stored.CreatedAt.Equal(e.CreatedAt) || stored.NextAttemptAt != nil || stored.PublishedAt != nil {
			t.Fatalf("stored %+v\nwritten %+v", stored, e)
		}
		deferred, err := outbox.ScanEvent(db.QueryRow(`SELECT `+envelope.EventColumns+` FROM herald_outbox WHERE sequence = `+outbox.Placeholder(d, 1), res.Events[2].Sequence), nil)
		if err != nil {
			t.Fatal(err)
		}
		if deferred.NextAttemptAt == nil || !deferred.NextAttemptAt.Equal(later) {
			t.Fatalf("DeliverAt stored as %v, want %v", deferred.NextAttemptAt, later)
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestWriteRejects(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		ok := envelope.Message{Topic: "ok", Payload: 1}
		cases := []struct {
			m     envelope.Message
			where string
		}{
			{envelope.Message{Payload: 1}, "Message[1].Topic"},
			{envelope.Message{Topic: strings.Repeat("t", 256)}, "Message[1].Topic"},
			{envelope.Message{Topic: "t", Payload: math.NaN()}, "Message[1].Payload"},
			{envelope.Message{Topic: "t", Payload: map[string]any{"items": []any{0, 1, 2, map[string]any{"price": complex(1, 2)}}}}, "payload.items[3].price"},
			{envelope.Message{Topic: "t", Payload: make(chan int)}, "Message[1].Payload"},
			{envelope.Message{Topic: "t", Headers: map[string]string{"": "x"}}, "Message[1].Headers"},
			{envelope.Message{Topic: "t", Extra: map[string]any{"attempts": 3}}, "Message[1].Extra"},
			{envelope.Message{Topic: "t", Extra: map[string]any{"bad col": 3}}, "Message[1].Extra"},
			{envelope.Message{Topic: "t", IdempotencyKey: strings.Repeat("k", 256)}, "Message[1].IdempotencyKey"},
			{envelope.Message{Topic: "t", OrderingKey: strings.Repeat("k", 256)}, "Message[1].OrderingKey"},
		}
		for _, c := range cases {
			_, err := w.Write(ctx, db, []envelope.Message{ok, c.m})
			if !errors.Is(err, envelope.ErrValidation) {
				t.Errorf("%s: %v, want ErrValidation", c.where, err)
				continue
			}
			if !strings.Contains(err.Error(), c.where) {
				t.Errorf("error %q does not name %s", err, c.where)
			}
		}
		if n := count(t, db, ""); n != 0 {
			t.Fatalf("%d events written by rejected calls", n)
		}
	})
}

func TestWriteIdempotent(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		first, err := w.Write(ctx, db, []envelope.Message{{Topic: "a", Payload: "first", IdempotencyKey: "k1"}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.Write(ctx, db, []envelope.Message{
			{Topic: "b", Payload: "again", IdempotencyKey: "k1"}, // stored: comes back unchanged
			{Topic: "c", Payload: "new", IdempotencyKey: "k2"},
			{Topic: "d", Payload: "repeat", IdempotencyKey: "k2"}, // repeats within the call
			{Topic: "e", Payload: "plain"},
		})
		if err != nil {
			t.Fatal(err)
		}
		ev := res.Events
		if ev[0].ID != first.Events[0].ID || ev[0].Topic != "a" || string(ev[0].Payload) != `"first"` {
			t.Fatalf("stored event not returned unchanged: %+v", ev[0])
		}
		if ev[1].ID != ev[2].ID || ev[2].Topic != "c" {
			t.Fatalf("repeat within the call: %+v %+v", ev[1], ev[2])
		}
		if strings.Join(res.Topics, ",") != "c,e" {
			t.Fatalf("Topics %v: a stored key must not signal", res.Topics)
		}
		if n := count(t, db, ""); n != 3 {
			t.Fatalf("%d events, want 3", n)
		}

		// A key freed by a rollback is usable again.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(ctx, tx, []envelope.Message{{Topic: "f", Payload: 1, IdempotencyKey: "k3"}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		again, err := w.Write(ctx, db, []envelope.Message{{Topic: "g", Payload: 2, IdempotencyKey: "k3"}})
		if err != nil || again.Events[0].Topic != "g" || len(again.Topics) != 1 {
			t.Fatalf("key after rollback: %v %+v", err, again)
		}
	})
}

func TestWriteOtherUniqueConflict(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		if _, err := db.Exec(`ALTER TABLE herald_outbox ADD COLUMN webhook TEXT`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE UNIQUE INDEX herald_outbox_webhook ON herald_outbox (webhook)`); err != nil {
			t.Fatal(err)
		}
		m := envelope.Message{Topic: "t", Payload: 1, IdempotencyKey: "a", Extra: map[string]any{"webhook": "w1"}}
		if _, err := w.Write(ctx, db, []envelope.Message{m}); err != nil {
			t.Fatal(err)
		}
		m.IdempotencyKey = "b"
		if _, err := w.Write(ctx, db, []envelope.Message{m}); err == nil || errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("conflict on another unique index: %v, want a database error", err)
		}
		var webhook string
		if err := db.QueryRow(`SELECT webhook FROM herald_outbox`).Scan(&webhook); err != nil || webhook != "w1" {
			t.Fatalf("extra column: %v %q", err, webhook)
		}
	})
}

func TestWriteChunks(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		if _, err := db.Exec(`ALTER TABLE herald_outbox ADD COLUMN tenant_id INTEGER`); err != nil {
			t.Fatal(err)
		}
		// 9 columns a row: SQLite takes 3640 rows a statement, PostgreSQL 7281.
		n := 9000
		ms := make([]envelope.Message, n)
		for i := range ms {
			ms[i] = envelope.Message{Topic: "bulk", Payload: i, OrderingKey: "k", Extra: map[string]any{"tenant_id": i % 3}}
			if i%1000 == 999 {
				ms[i].Extra = nil // a run of another shape
			}
		}
		res, err := w.Write(context.Background(), db, ms)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range res.Events {
			if string(e.Payload) != itoa(i) {
				t.Fatalf("event %d has payload %s", i, e.Payload)
			}
			if i > 0 && e.Sequence <= res.Events[i-1].Sequence {
				t.Fatalf("sequence order broken at %d", i)
			}
		}
		if c := count(t, db, "WHERE tenant_id IS NULL"); c != 9 {
			t.Fatalf("%d rows without tenant, want 9", c)
		}
	})
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestIdempotentConcurrent: a second transaction with the same key waits for
// the first, then gets its event, or writes its own if the first rolled back.
func TestIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")
	for _, commit := range []bool{true, false} {
		key := "concurrent-" + map[bool]string{true: "commit", false: "rollback"}[commit]
		tx1, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		first, err := w.Write(ctx, tx1, []envelope.Message{{Topic: "one", Payload: 1, IdempotencyKey: key}})
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			res *envelope.WriteResult
			err error
		}
		done := make(chan result, 1)
		started := make(chan struct{})
		go func() {
			tx2, err := db.BeginTx(ctx, nil)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer func() { _ = tx2.Rollback() }()
			close(started)
			res, err := w.Write(ctx, tx2, []envelope.Message{{Topic: "two", Payload: 2, IdempotencyKey: key}})
			if err == nil {
				err = tx2.Commit()
			}
			done <- result{res, err}
		}()
		<-started
		// The second writer must be blocked on the first's uncommitted key.
		testkit.Eventually(t, 10*time.Second, func() bool {
			var waiting int
			_ = db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting)
			return waiting > 0
		}, "second writer never waited for the first")
		select {
		case r := <-done:
			t.Fatalf("second writer finished before the first ended: %+v", r)
		default:
		}
		if commit {
			err = tx1.Commit()
		} else {
			err = tx1.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		got := r.res.Events[0]
		if commit && (got.ID != first.Events[0].ID || got.Topic != "one" || len(r.res.Topics) != 0) {
			t.Fatalf("after commit: got %+v, want the first event", got)
		}
		if !commit && (got.ID == first.Events[0].ID || got.Topic != "two" || len(r.res.Topics) != 1) {
			t.Fatalf("after rollback: got %+v, want a new event", got)
		}
	}
}

// TestOrderingKeyLock: on PostgreSQL writers of one ordering key are
// serialized, so the transaction that commits first holds the lower sequence.
func TestOrderingKeyLock(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")

	// tx1 writes key "k" and stays open. tx2 writes "k" too: without the
	// lock it would insert at once and could commit before tx1 with a
	// higher sequence (sequence order != commit order). With it, tx2 waits
	// until tx1 commits, so commit order is sequence order. A writer of
	// another key never waits.
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := w.Write(ctx, tx1, []envelope.Message{{Topic: "t", Payload: 1, OrderingKey: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	// Another key does not wait on tx1.
	if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 0, OrderingKey: "other"}}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var order []string
	done := make(chan *envelope.WriteResult, 1)
	pids := make(chan int, 1)
	go func() {
		tx2, err := db.BeginTx(ctx, nil)
		if err != nil {
			pids <- 0
			done <- nil
			return
		}
		var pid int
		_ = tx2.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
		pids <- pid
		r2, err := w.Write(ctx, tx2, []envelope.Message{{Topic: "t", Payload: 2, OrderingKey: "k"}})
		if err != nil {
			_ = tx2.Rollback()
			done <- nil
			return
		}
		if err := tx2.Commit(); err != nil {
			done <- nil
			return
		}
		mu.Lock()
		order = append(order, "tx2")
		mu.Unlock()
		done <- r2
	}()
	pid := <-pids
	testkit.Eventually(t, 10*time.Second, func() bool {
		var waiting int
		_ = db.QueryRow(`SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted`, pid).Scan(&waiting)
		return waiting > 0 || len(done) > 0
	}, "second writer of key k never waited on the advisory lock")
	select {
	case <-done:
		t.Fatal("second writer of key k finished while the first was open")
	default:
	}
	mu.Lock()
	order = append(order, "tx1")
	mu.Unlock()
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	r2 := <-done
	if r2 == nil {
		t.Fatal("second writer failed")
	}
	if order[0] != "tx1" || r1.Events[0].Sequence >= r2.Events[0].Sequence {
		t.Fatalf("commit order %v, sequences %d then %d", order, r1.Events[0].Sequence, r2.Events[0].Sequence)
	}
}
