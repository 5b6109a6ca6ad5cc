package admin_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/google/uuid"
	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// env is one database with a migrated outbox table, a relay delivering it
// to a receiver, and an Admin of it.
type env struct {
	d    envelope.Dialect
	db   *sql.DB
	w    *envelope.Writer
	recv *receiver
	r    *relay.Relay
	adm  *admin.Admin
	logs *logRecords
}

func newEnv(t testing.TB, d envelope.Dialect) *env {
	t.Helper()
	e := &env{d: d, recv: &receiver{}, logs: &logRecords{}}
	switch d {
	case envelope.Postgres:
		e.db, _ = testkit.Postgres(t)
	case envelope.MySQL:
		e.db, _ = testkit.MySQL(t)
	default:
		db, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		e.db = db
	}
	ctx := context.Background()
	if err := envelope.Migrate(ctx, e.db, d, ""); err != nil {
		t.Fatal(err)
	}
	w, err := envelope.NewWriter(d, "")
	if err != nil {
		t.Fatal(err)
	}
	e.w = w
	// One attempt: a failed delivery dead-letters the event at once.
	e.r, err = relay.New(e.db, e.recv, relay.Config{
		MaxAttempts: 1, MinPollInterval: time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.r.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	e.adm, err = admin.New(admin.Config{DB: e.db, Relay: e.r, Logger: slog.New(e.logs)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// eachDialect runs fn as a parallel subtest on PostgreSQL, SQLite and
// MySQL (the machine's MariaDB).
func eachDialect(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	eachDialectOf(t, []envelope.Dialect{envelope.Postgres, envelope.SQLite, envelope.MySQL}, fn)
}

// eachDialectOf runs fn as a parallel subtest on each of ds.
func eachDialectOf(t *testing.T, ds []envelope.Dialect, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, d := range ds {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, d))
		})
	}
}

func (e *env) enqueue(t testing.TB, ms ...envelope.Message) []*envelope.Event {
	t.Helper()
	res, err := e.w.Write(context.Background(), e.db, ms)
	if err != nil {
		t.Fatal(err)
	}
	return res.Events
}

func msg(topic, key string, payload any) envelope.Message {
	return envelope.Message{Topic: topic, OrderingKey: key, Payload: payload}
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// state reads an event's state through the Admin.
func (e *env) state(t testing.TB, id uuid.UUID) admin.Detail {
	t.Helper()
	d, err := e.adm.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitDead waits until the events are dead letters.
func (e *env) waitDead(t testing.TB, evs ...*envelope.Event) {
	t.Helper()
	for _, ev := range evs {
		waitFor(t, "event "+ev.ID.String()+" dead-lettered", func() bool { return e.state(t, ev.ID).State == admin.StateDead })
	}
}

// receiver is the relay's delivery: it fails the events whose payload
// holds "fail" while failing is on, with the error text the payload holds.
type receiver struct {
	mu      sync.Mutex
	got     map[uuid.UUID]int
	order   []uuid.UUID
	healthy bool
}

func (c *receiver) Deliver(_ context.Context, ev *envelope.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.healthy && strings.Contains(string(ev.Payload), "fail") {
		return errors.New("receiver refused: " + string(ev.Payload))
	}
	if c.got == nil {
		c.got = map[uuid.UUID]int{}
	}
	c.got[ev.ID]++
	c.order = append(c.order, ev.ID)
	return nil
}

func (c *receiver) Close() error { return nil }

func (c *receiver) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.healthy = true
}

func (c *receiver) delivered(id uuid.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got[id] > 0
}

func (c *receiver) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.order)
}

func (c *receiver) position(id uuid.UUID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.order {
		if x == id {
			return i
		}
	}
	return -1
}

// logRecords is a slog handler that keeps records.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// find returns the first record with message msg.
func (h *logRecords) find(msg string) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message == msg {
			return r, true
		}
	}
	return slog.Record{}, false
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}
