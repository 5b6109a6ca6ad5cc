package main

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/integration/relaybench"
	"github.com/heraldgo/herald/internal/testkit"
)

// The bare loop (the latency floor) takes a backlog of two and a half
// batches, records every event as received and marks every one published.
func TestBareLoopReceivesAndMarksEveryEvent(t *testing.T) {
	db, _ := testkit.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 250
	if err := relaybench.Reset(ctx, db, "herald_outbox"); err != nil {
		t.Fatal(err)
	}
	if err := relaybench.Fill(ctx, db, "herald_outbox", n, 0); err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	for _, id := range outboxIDs(ctx, t, db) {
		tr.committed(id, time.Now(), 0)
	}
	lease, mark, err := relaybench.BareStatements("herald_outbox")
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	done := make(chan error, 1)
	go func() { done <- bareLoop(lctx, db, lease, mark, tr, wake) }()
	if err := waitFor(ctx, tr, n, 30*time.Second); err != nil {
		stop()
		t.Fatalf("%v (bare loop: %v)", err, <-done)
	}
	var pending int
	var qerr error
	testkit.WaitFor(30*time.Second, func() bool {
		qerr = db.QueryRowContext(ctx, `SELECT count(*) FROM herald_outbox WHERE published_at IS NULL`).Scan(&pending)
		return qerr != nil || pending == 0
	})
	stop()
	if qerr != nil {
		t.Fatal(qerr)
	}
	if err := <-done; err != nil {
		t.Fatalf("bare loop: %v", err)
	}
	if pending != 0 {
		t.Errorf("%d events still pending after the loop received all %d", pending, n)
	}
	if got := len(tr.lat); got != n {
		t.Errorf("%d latencies recorded, want %d", got, n)
	}
}

// outboxIDs returns the ids of herald_outbox's events.
func outboxIDs(ctx context.Context, t *testing.T, db *sql.DB) []uuid.UUID {
	t.Helper()
	rows, err := db.QueryContext(ctx, `SELECT id FROM herald_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}
