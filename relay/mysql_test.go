package relay

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// A lock wait timeout (1205) while marking a delivered event is run again,
// not recorded as the event's failure: the event is marked published once
// the lock is gone, with no attempt counted. The mark's row is locked by
// another transaction until the relay's mark has timed out once and begun
// waiting again.
func TestMySQLLockWaitIsRetriedNotAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.MySQL)
	// The relay's pool: lock waits time out after 1 s.
	db, err := sql.Open("mysql", e.dsn+"&innodb_lock_wait_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	ev := e.enqueue(t, msg("t", "k", 1))[0]

	holder, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	var failed atomic.Int32
	rec := &recorder{fail: func(x *envelope.Event) error {
		// Delivered; lock the row before the relay marks it.
		var s int64
		return holder.QueryRowContext(ctx, "SELECT sequence FROM herald_outbox WHERE sequence = ? FOR UPDATE", x.Sequence).Scan(&s)
	}}
	r, err := New(db, rec, Config{Name: "r", MinPollInterval: time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
		Observer: ObserverFuncs{OnFailed: func(context.Context, Failed) { failed.Add(1) }, OnDeadLettered: func(context.Context, DeadLettered) { failed.Add(1) }}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	// Wait for the mark to wait, time out, and wait again: its UPDATE is in
	// the process list, then gone, then back.
	waits, waiting := 0, false
	testkit.Eventually(t, 30*time.Second, func() bool {
		var n int
		if err := e.db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.processlist WHERE info LIKE 'UPDATE %herald_outbox%published_at%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 && !waiting {
			waits++
		}
		waiting = n > 0
		return waits >= 2
	}, "the relay's mark did not wait for the row lock twice")
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return e.row(t, ev.ID).PublishedAt != nil }, "event not marked published after the lock was released")
	got := e.row(t, ev.ID)
	if got.Attempts != 0 || got.LastError != "" || failed.Load() != 0 {
		t.Fatalf("a lock wait counted as a failure: attempts %d, last error %q, %d failures observed", got.Attempts, got.LastError, failed.Load())
	}
	if rec.count() != 1 {
		t.Fatalf("delivered %d times, want 1", rec.count())
	}
}

// mysqlArgs numbers the arguments as the statement uses them.
func TestMySQLArgs(t *testing.T) {
	q, args := mysqlArgs("a = $2 AND b = $1 AND c = $2 AND '$[*]' AND d = $10", []any{"one", "two", 3, 4, 5, 6, 7, 8, 9, "ten"})
	if q != "a = ? AND b = ? AND c = ? AND '$[*]' AND d = ?" {
		t.Fatalf("query %q", q)
	}
	want := []any{"two", "one", "two", "ten"}
	for i := range want {
		if args[i] != want[i] {
			t.Fatalf("args %v, want %v", args, want)
		}
	}
}

// The MySQL lease names its indexes (FORCE INDEX): a table without one
// is a configuration error naming it, at New; a table of MySQL version 2
// (the pending-key index leading with ordering_key) still leases, in
// order.
func TestMySQLLeaseIndexes(t *testing.T) {
	t.Parallel()
	if !mysqlEnabled() {
		t.Skip("MySQL relay tests: HERALD_RELAY_MYSQL=1")
	}
	e := newEnv(t, envelope.MySQL)
	ctx := context.Background()
	if err := envelope.MigrateTo(ctx, e.db, envelope.MySQL, "", 2); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, msg("a1", "a", 1), msg("a2", "a", 2), msg("u", "", 3))
	rec := &recorder{}
	r := e.newRelay(t, rec, Config{Name: "v2"})
	for polls := 0; rec.count() < 3 && polls < 5; polls++ {
		if _, err := r.poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.events()
	at := map[string]int{}
	for i, ev := range got {
		at[ev.Topic] = i
	}
	if len(got) != 3 || at["a1"] > at["a2"] {
		t.Fatalf("on a version 2 table: delivered %s, want a1, a2 in order and u", describe(got))
	}
	if _, err := e.db.Exec("ALTER TABLE herald_outbox DROP INDEX herald_outbox_pending_key_idx"); err != nil {
		t.Fatal(err)
	}
	_, err := New(e.db, &recorder{}, Config{Name: "none"})
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "herald_outbox_pending_key_idx") {
		t.Fatalf("New on a table without the pending-key index: %v", err)
	}
}
