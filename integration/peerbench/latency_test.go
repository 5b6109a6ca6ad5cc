package main

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/integration/relaybench"
)

// testPostgres returns a *sql.DB on a schema of the test's own on the
// server of HERALD_POSTGRES_DSN (herald's test DSN by default), dropped
// when the test ends. It skips with -short and fails, naming the DSN,
// when the server does not answer.
func testPostgres(t *testing.T) *sql.DB {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped with -short")
	}
	dsn := os.Getenv("HERALD_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("HERALD_POSTGRES_DSN=%q: %v", dsn, err)
	}
	defer admin.Close()
	schema := "peerbench_test_" + uuid.NewString()[:8]
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("PostgreSQL at HERALD_POSTGRES_DSN=%q is needed (start it, or run with -short): %v", dsn, err)
	}
	t.Cleanup(func() {
		if admin, err := sql.Open("pgx", dsn); err == nil {
			_, _ = admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
			_ = admin.Close()
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// The bare loop (the latency floor) takes a backlog of two and a half
// batches, records every event as received and marks every one published.
func TestBareLoopReceivesAndMarksEveryEvent(t *testing.T) {
	db := testPostgres(t)
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
	deadline := time.Now().Add(30 * time.Second)
	var pending int
	for {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM herald_outbox WHERE published_at IS NULL`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
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
