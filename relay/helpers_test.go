package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverycall"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/relayknob"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// env is one database with a migrated outbox table.
type env struct {
	name  string
	db    *sql.DB
	d     envelope.Dialect
	table string
	w     *envelope.Writer
	dsn   string
}

// openSQLite opens a mattn SQLite file database in t.TempDir().
func openSQLite(t testing.TB) (*sql.DB, string) {
	t.Helper()
	dsn := testkit.MattnDSN(testkit.SQLitePath(t))
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, dsn
}

func newEnv(t testing.TB, d envelope.Dialect) *env {
	t.Helper()
	e := &env{name: string(d), d: d, table: envelope.DefaultTable}
	switch d {
	case envelope.Postgres:
		e.db, e.dsn = testkit.Postgres(t)
	case envelope.MySQL:
		e.db, e.dsn = testkit.MySQL(t)
	default:
		e.db, e.dsn = openSQLite(t)
	}
	ctx := context.Background()
	if err := envelope.Migrate(ctx, e.db, d, e.table); err != nil {
		t.Fatal(err)
	}
	w, err := envelope.NewWriter(d, e.table)
	if err != nil {
		t.Fatal(err)
	}
	e.w = w
	return e
}

// eachDialect runs fn as a parallel subtest on PostgreSQL and on SQLite,
// and on MySQL/MariaDB too with HERALD_RELAY_MYSQL=1 (.ci/run sets it).
func eachDialect(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, d := range testDialects() {
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

// newRelay builds a relay with test-friendly defaults: quick polls, short
// retries, a quiet logger.
func (e *env) newRelay(t testing.TB, d delivery.Delivery, cfg Config) *Relay {
	t.Helper()
	if cfg.MinPollInterval == 0 {
		cfg.MinPollInterval = time.Millisecond
	}
	if cfg.MaxPollInterval == 0 {
		cfg.MaxPollInterval = 20 * time.Millisecond
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 10 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if _, tx := delivery.AsTx(d); leaseByLockAll && e.d == envelope.Postgres && !tx {
		cfg.LeaseByLock = true
	}
	r, err := New(e.db, d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func start(t testing.TB, r *Relay) {
	t.Helper()
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
}

// stop stops r and waits for its last batch's marks.
func stop(t testing.TB, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// failingOnce is a recorder whose first attempt at each event fails with
// msg; the next succeeds.
func failingOnce(msg string) *recorder {
	var mu sync.Mutex
	failed := map[uuid.UUID]bool{}
	return &recorder{fail: func(e *envelope.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if !failed[e.ID] {
			failed[e.ID] = true
			return errors.New(msg)
		}
		return nil
	}}
}

// recorder is a delivery that records what it is given.
type recorder struct {
	mu   sync.Mutex
	got  []*envelope.Event
	fail func(e *envelope.Event) error // nil = succeed
}

func (c *recorder) Deliver(ctx context.Context, e *envelope.Event) error {
	if c.fail != nil {
		if err := c.fail(e); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, e)
	return nil
}

func (c *recorder) Close() error { return nil }

func (c *recorder) events() []*envelope.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func (c *recorder) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *recorder) ids() map[uuid.UUID]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[uuid.UUID]int{}
	for _, e := range c.got {
		m[e.ID]++
	}
	return m
}

// row reads an event back.
func (e *env) row(t testing.TB, id uuid.UUID) *envelope.Event {
	t.Helper()
	ph := "?"
	if e.d == envelope.Postgres {
		ph = "$1"
	}
	tbl, _ := envelope.ParseTable(e.d, e.table)
	ev, err := outbox.ScanEvent(e.db.QueryRow(`SELECT `+envelope.EventColumns+` FROM `+tbl.Quoted+` WHERE id = `+ph, id.String()), nil)
	if err != nil {
		t.Fatalf("read event %s: %v", id, err)
	}
	return ev
}

func (e *env) count(t testing.TB, where string) int {
	t.Helper()
	tbl, _ := envelope.ParseTable(e.d, e.table)
	var n int
	if err := e.db.QueryRow(`SELECT count(*) FROM ` + tbl.Quoted + ` WHERE ` + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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

func (h *logRecords) atLeast(level slog.Level) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.recs {
		if r.Level >= level {
			out = append(out, r)
		}
	}
	return out
}

func attr(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

func describe(es []*envelope.Event) string {
	s := ""
	for _, e := range es {
		s += fmt.Sprintf("%d:%s:%s ", e.Sequence, e.Topic, e.OrderingKey)
	}
	return s
}

func openDB(driver, dsn string) (*sql.DB, error) { return sql.Open(driver, dsn) }

// driverOf is the database/sql driver the tests open a dialect's DSN with.
func driverOf(d envelope.Dialect) string {
	return map[envelope.Dialect]string{envelope.Postgres: "pgx", envelope.SQLite: "sqlite3", envelope.MySQL: "mysql"}[d]
}

// batchFunc is a BatchDelivery made of a function.
type batchFunc struct {
	fn func(es []*envelope.Event) []error
}

func (b *batchFunc) Deliver(ctx context.Context, e *envelope.Event) error {
	return deliverycall.CallBatch(ctx, b, []*envelope.Event{e})[0]
}
func (b *batchFunc) DeliverBatch(_ context.Context, es []*envelope.Event) []error { return b.fn(es) }
func (b *batchFunc) Close() error                                                 { return nil }

// leaseByLockAll (HERALD_RELAY_LEASE_BY_LOCK=1) runs every relay newRelay
// builds on PostgreSQL with Config.LeaseByLock, but those of a
// delivery.TxDelivery: the suite's tests are its judge too.
var leaseByLockAll = os.Getenv("HERALD_RELAY_LEASE_BY_LOCK") == "1"

// HERALD_RELAY_PREPARED=1 runs the lease of unordered events prepared
// (Relay.planned) on every PostgreSQL relay whatever the table's size,
// where the suite's tables are far below planMinBytes: the suite's tests
// are that mode's judge too.
func init() {
	if os.Getenv("HERALD_RELAY_PREPARED") == "1" {
		relayknob.PlanMinBytes.Store(0)
	}
}

// testDialects are the dialects eachDialect runs on.
func testDialects() []envelope.Dialect {
	ds := []envelope.Dialect{envelope.Postgres, envelope.SQLite}
	if os.Getenv("HERALD_RELAY_MYSQL") == "1" {
		ds = append(ds, envelope.MySQL)
	}
	return ds
}
