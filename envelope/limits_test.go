package envelope_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestWriteManyOrderingKeys: a PostgreSQL Write with 65,536 distinct
// ordering keys (more than the bind-parameter limit, and more advisory
// locks than the server's lock table holds) succeeds, and holds at most
// one lock per bucket.
func TestWriteManyOrderingKeys(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("writes 65,536 events")
	}
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")
	ms := make([]envelope.Message, 65536)
	for i := range ms {
		ms[i] = envelope.Message{Topic: "t", Payload: i, OrderingKey: fmt.Sprint("key-", i)}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := w.Write(ctx, tx, ms)
	if err != nil {
		t.Fatalf("Write of 65,536 keys: %v", err)
	}
	if len(res.Events) != len(ms) {
		t.Fatalf("%d events", len(res.Events))
	}
	var locks int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks == 0 || locks > 1024 {
		t.Errorf("%d advisory locks held, want 1 to 1024 (one per bucket)", locks)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestResendManyIdempotencyKeys: re-sending a Write whose idempotency keys
// are all stored, more of them than one statement may bind, returns the
// stored events on both dialects.
func TestResendManyIdempotencyKeys(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("writes up to 65,545 events")
	}
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		ms := make([]envelope.Message, outbox.MaxBindParams(d)+10)
		for i := range ms {
			ms[i] = envelope.Message{Topic: "t", Payload: i, IdempotencyKey: fmt.Sprint("idem-", i)}
		}
		first, err := w.Write(ctx, db, ms)
		if err != nil {
			t.Fatal(err)
		}
		again, err := w.Write(ctx, db, ms)
		if err != nil {
			t.Fatalf("re-send of %d stored keys: %v", len(ms), err)
		}
		for i := range ms {
			if again.Events[i] == nil || again.Events[i].ID != first.Events[i].ID {
				t.Fatalf("event %d: re-send returned %+v, want the stored %s", i, again.Events[i], first.Events[i].ID)
			}
		}
		if len(again.Topics) != 0 {
			t.Errorf("re-send inserted topics %v", again.Topics)
		}
		if n := count(t, db, ""); n != len(ms) {
			t.Errorf("%d events, want %d", n, len(ms))
		}
	})
}

// TestWriteCapturedArraysAtomic: WriteCapturedArrays given a *sql.DB or a
// *sql.Conn writes all its chunks or none: a chunk that fails leaves none
// of the call's events committed.
func TestWriteCapturedArraysAtomic(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE herald_outbox ADD CONSTRAINT no_boom CHECK (topic <> 'boom')`); err != nil {
		t.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")
	envelope.SetMaxArrayRows(w, 10)
	ms := make([]envelope.Message, 25)
	for i := range ms {
		ms[i] = envelope.Message{Topic: "t", Payload: i, OrderingKey: fmt.Sprint("k", i%4)}
	}
	ms[15].Topic = "boom" // the second chunk fails
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []struct {
		name string
		q    envelope.Querier
	}{{"*sql.DB", db}, {"*sql.Conn", conn}} {
		if _, err := outbox.WriteArrays(w)(ctx, q.q, ms); err == nil {
			t.Fatalf("%s: the failing chunk returned no error", q.name)
		}
		if n := count(t, db, ""); n != 0 {
			t.Errorf("%s: %d of %d events committed by a failed call", q.name, n, len(ms))
		}
	}
	ms[15].Topic = "t"
	res, err := outbox.WriteArrays(w)(ctx, db, ms)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(res.Events); i++ {
		if res.Events[i].Sequence <= res.Events[i-1].Sequence {
			t.Fatalf("events out of message order: %d after %d", res.Events[i].Sequence, res.Events[i-1].Sequence)
		}
	}
	if n := count(t, db, ""); n != len(ms) {
		t.Errorf("%d events, want %d", n, len(ms))
	}
}
