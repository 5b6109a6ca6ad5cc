package deliverytest

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// Env is an outbox table in a PostgreSQL schema of the test's own, and a
// writer for it: what a relay in front of a delivery needs.
type Env struct {
	DB *sql.DB
	W  *envelope.Writer
}

// NewEnv creates the schema and migrates the outbox table.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	db, _ := testkit.Postgres(t)
	if err := envelope.Migrate(context.Background(), db, envelope.Postgres, ""); err != nil {
		t.Fatalf("deliverytest: migrate: %v", err)
	}
	w, err := envelope.NewWriter(envelope.Postgres, "")
	if err != nil {
		t.Fatal(err)
	}
	return &Env{DB: db, W: w}
}

// Write enqueues ms in one transaction and returns their events.
func (e *Env) Write(t testing.TB, ms ...envelope.Message) []*envelope.Event {
	t.Helper()
	res, err := e.W.Write(context.Background(), e.DB, ms)
	if err != nil {
		t.Fatalf("deliverytest: write: %v", err)
	}
	return res.Events
}

// RelayConfig is the relay the suite runs: quick polls and retries, and
// attempts enough that nothing is dead-lettered while a receiver is down.
func RelayConfig() relay.Config {
	return relay.Config{
		MinPollInterval: 5 * time.Millisecond,
		MaxPollInterval: 100 * time.Millisecond,
		RetryBase:       20 * time.Millisecond,
		RetryMax:        300 * time.Millisecond,
		MaxAttempts:     1_000_000,
		Lease:           20 * time.Second,
		DeliveryTimeout: 3 * time.Second,
		Logger:          slog.New(slog.DiscardHandler),
	}
}

// StartRelay starts a relay with cfg in front of d; it is stopped when the
// test ends, before d is closed (cleanups run last-in first-out, so
// register d's Close before calling StartRelay).
func (e *Env) StartRelay(t testing.TB, d delivery.Delivery, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(e.DB, d, cfg)
	if err != nil {
		t.Fatalf("deliverytest: relay.New: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("deliverytest: relay.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("deliverytest: relay.Stop: %v", err)
		}
	})
	return r
}

// Row is the delivery state of one stored event.
type Row struct {
	Attempts  int
	LastError string
	Published bool
	Dead      bool
	Payload   string // the payload as stored (PostgreSQL's text of the jsonb)
}

// Row reads the state of the event with id.
func (e *Env) Row(t testing.TB, id string) Row {
	t.Helper()
	var r Row
	var last sql.NullString
	err := e.DB.QueryRowContext(context.Background(),
		`SELECT attempts, last_error, published_at IS NOT NULL, dead_lettered_at IS NOT NULL, payload::text
		 FROM herald_outbox WHERE id = $1`, id).Scan(&r.Attempts, &last, &r.Published, &r.Dead, &r.Payload)
	if err != nil {
		t.Fatalf("deliverytest: read event %s: %v", id, err)
	}
	r.LastError = last.String
	return r
}

// Unpublished counts the events not yet published.
func (e *Env) Unpublished(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.DB.QueryRowContext(context.Background(),
		`SELECT count(*) FROM herald_outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
		t.Fatalf("deliverytest: count unpublished: %v", err)
	}
	return n
}

// WaitPublished waits until every event is published.
func (e *Env) WaitPublished(t testing.TB, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, within, func() bool { return e.Unpublished(t) == 0 }, "every event published")
}
