// End-to-end tests of the whole path a service takes: GORM models captured
// by gormcapture (db.Use) on PostgreSQL and SQLite, the outbox table from
// envelope.Migrate, relays delivering to a delivery.Func, and one
// wakeup.InProcess shared by the plugin and the relays. See README.md for
// the commands.
package integration_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	heraldoutbox "github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// dialects are the databases every test runs on, each as a parallel
// subtest; the PostgreSQL one is skipped by -short (testkit).
var dialects = []envelope.Dialect{envelope.Postgres, envelope.SQLite}

func eachDialect(t *testing.T, fn func(t *testing.T, d envelope.Dialect)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// quiet is the logger of relays whose failures are injected on purpose.
var quiet = slog.New(slog.DiscardHandler)

// stack is one service: a database of its own, GORM with the capture
// plugin, the outbox table, and the wakeup the plugin signals.
type stack struct {
	dialect envelope.Dialect
	dsn     string
	db      *gorm.DB // with the plugin installed
	gormSQL *sql.DB  // GORM's own pool
	plugin  *gormcapture.Plugin
	wake    *wakeup.InProcess // shared by the plugin and the relays
	signals *signalSpy        // what the plugin signalled (wraps wake)
}

// stackOptions tune newStack.
type stackOptions struct {
	namespace string
	models    []any                    // AutoMigrated and given to Config.Models
	capture   map[any]envelope.Options // registered with Plugin.Capture
	gormCfg   func(*gorm.Config)       // optional
}

// newStack opens a fresh database of dialect d the way a service would.
func newStack(t *testing.T, d envelope.Dialect, o stackOptions) *stack {
	t.Helper()
	s := &stack{dialect: d}
	cfg := &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
	if o.gormCfg != nil {
		o.gormCfg(cfg)
	}
	var (
		dial gorm.Dialector
		err  error
	)
	switch d {
	case envelope.Postgres:
		_, s.dsn = testkit.Postgres(t)
		dial = postgres.Open(s.dsn)
	default:
		// MattnDSN sets _txlock=immediate, as examples/quickstart does:
		// the capture reads rows before it writes them (BeforeAndAfter,
		// upserts, cascades), and a deferred SQLite transaction whose
		// read is overtaken by another connection's write (a relay's
		// lease or mark) fails at once with "database is locked" instead
		// of waiting out the busy timeout.
		s.dsn = testkit.MattnDSN(testkit.SQLitePath(t))
		dial = sqlite.Open(s.dsn)
	}
	if s.db, err = gorm.Open(dial, cfg); err != nil {
		t.Fatalf("gorm.Open %s: %v", d, err)
	}
	if s.gormSQL, err = s.db.DB(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.gormSQL.Close() })
	if err := envelope.Migrate(context.Background(), s.gormSQL, d, ""); err != nil {
		t.Fatalf("envelope.Migrate: %v", err)
	}
	if len(o.models) > 0 {
		if err := s.db.AutoMigrate(o.models...); err != nil {
			t.Fatalf("AutoMigrate: %v", err)
		}
	}
	s.wake = wakeup.NewInProcess()
	t.Cleanup(func() { _ = s.wake.Close() })
	s.signals = &signalSpy{Wakeup: s.wake}
	s.plugin = gormcapture.New(gormcapture.Config{Namespace: o.namespace, Models: o.models, Wakeup: s.signals})
	for m, opts := range o.capture {
		if err := s.plugin.Capture(m, opts); err != nil {
			t.Fatalf("Capture(%T): %v", m, err)
		}
	}
	if err := s.db.Use(s.plugin); err != nil {
		t.Fatalf("db.Use(gormcapture.New(...)): %v", err)
	}
	return s
}

// openPool opens another *sql.DB on the stack's database, as a relay in
// another process would.
func (s *stack) openPool(t *testing.T) *sql.DB {
	t.Helper()
	driver := "pgx"
	if s.dialect == envelope.SQLite {
		driver = "sqlite3"
	}
	db, err := sql.Open(driver, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// startRelay builds a relay on db and starts it; it is stopped (and the
// stop checked) when the test ends.
func startRelay(t *testing.T, db *sql.DB, d delivery.Delivery, cfg relay.Config) *relay.Relay {
	t.Helper()
	r := newRelay(t, db, d, cfg)
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("relay %s: Start: %v", r.Name(), err)
	}
	return r
}

// newRelay builds a relay that is stopped when the test ends.
func newRelay(t *testing.T, db *sql.DB, d delivery.Delivery, cfg relay.Config) *relay.Relay {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	r, err := relay.New(db, d, cfg)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("relay %s: Stop at cleanup: %v", r.Name(), err)
		}
		<-r.Stopped()
	})
	return r
}

// waitDrained waits until the relay has nothing left to deliver, then
// checks that nothing was dead-lettered.
func waitDrained(t *testing.T, r *relay.Relay, within time.Duration) {
	t.Helper()
	var (
		b    relay.Backlog
		berr error
	)
	testkit.Eventually(t, within, func() bool {
		b, berr = r.Backlog(context.Background())
		return berr == nil && b.Pending == 0
	}, "relay %s did not drain the outbox: backlog %+v, error %v", r.Name(), &b, &berr)
	if b.DeadLettered != 0 {
		t.Fatalf("relay %s: %d events dead-lettered; none should be", r.Name(), b.DeadLettered)
	}
}

// logCounter is a slog.Handler that counts a relay's WARN and ERROR
// records by level and message, for the soak's summary.
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func newLogCounter() *logCounter { return &logCounter{counts: map[string]int{}} }

func (h *logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Level.String()+" "+r.Message]++
	h.mu.Unlock()
	return nil
}

func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

// snapshot returns the counts, leaving out messages that contain any of
// skip.
func (h *logCounter) snapshot(skip ...string) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
next:
	for m, n := range h.counts {
		for _, s := range skip {
			if strings.Contains(m, s) {
				continue next
			}
		}
		out[m] = n
	}
	return out
}

// checkNoRegression fails if, per ordering key, any delivery (duplicates
// included) came after a delivery of a later event of the key: a receiver
// would see the key's events go back in time.
func checkNoRegression(t *testing.T, all []got) {
	t.Helper()
	high := map[string]got{}
	bad := 0
	for _, g := range all {
		if g.OrderingKey == "" {
			continue
		}
		if h, ok := high[g.OrderingKey]; ok && g.Sequence < h.Sequence {
			if bad++; bad <= 10 {
				t.Errorf("ordering key %q: event seq %d delivered again by %s after seq %d was delivered (by %s)",
					g.OrderingKey, g.Sequence, g.Relay, h.Sequence, h.Relay)
			}
			continue
		}
		high[g.OrderingKey] = g
	}
	if bad > 10 {
		t.Errorf("... %d redeliveries behind a later event of their key in all", bad)
	}
}

// got is one delivery as the sink recorded it (a copy: a delivery must not
// keep the event).
type got struct {
	Relay       string
	ID          uuid.UUID
	Sequence    int64
	Topic       string
	OrderingKey string
	Headers     map[string]string
	Payload     json.RawMessage
}

// sink records what deliveries accepted, in the order they accepted it.
type sink struct {
	mu      sync.Mutex
	all     []got
	arrived chan struct{} // capacity 1: something new was recorded
}

func newSink() *sink { return &sink{arrived: make(chan struct{}, 1)} }

// delivery returns a delivery.Func for the relay named relayName that
// calls fail first (nil = never fails) and records what it accepts.
func (s *sink) delivery(relayName string, fail func(ctx context.Context, e *envelope.Event) error) delivery.Delivery {
	return delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		if fail != nil {
			if err := fail(ctx, e); err != nil {
				return err
			}
		}
		s.record(relayName, e)
		return nil
	})
}

func (s *sink) record(relayName string, e *envelope.Event) {
	g := got{Relay: relayName, ID: e.ID, Sequence: e.Sequence, Topic: e.Topic, OrderingKey: e.OrderingKey,
		Headers: maps.Clone(e.Headers), Payload: slices.Clone(e.Payload)}
	s.mu.Lock()
	s.all = append(s.all, g)
	s.mu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	default:
	}
}

// deliveries returns everything recorded, duplicates included.
func (s *sink) deliveries() []got {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.all)
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.all)
}

// unique returns the first delivery of each event id, in delivery order,
// and how many deliveries were duplicates.
func (s *sink) unique() (first []got, dups int) {
	seen := map[uuid.UUID]bool{}
	for _, g := range s.deliveries() {
		if seen[g.ID] {
			dups++
			continue
		}
		seen[g.ID] = true
		first = append(first, g)
	}
	return first, dups
}

// checkKeyOrder fails unless, per ordering key, the first deliveries of
// its events came in strictly increasing sequence order.
func checkKeyOrder(t *testing.T, first []got) {
	t.Helper()
	last := map[string]got{}
	bad := 0
	for _, g := range first {
		if g.OrderingKey == "" {
			continue
		}
		if p, ok := last[g.OrderingKey]; ok && p.Sequence >= g.Sequence {
			if bad++; bad <= 10 {
				t.Errorf("ordering key %q: event seq %d (%s) delivered after seq %d (%s)", g.OrderingKey, g.Sequence, g.Topic, p.Sequence, p.Topic)
			}
		}
		last[g.OrderingKey] = g
	}
	if bad > 10 {
		t.Errorf("... %d out-of-order deliveries in all", bad)
	}
}

// outboxRow is an outbox row as the end-of-test checks read it.
type outboxRow struct {
	ID          uuid.UUID
	Sequence    int64
	Topic       string
	OrderingKey string
	Published   bool
	Dead        bool
	Attempts    int
	LeasedBy    string
	LeaseLive   bool // lease_until set and in the future
}

// outbox reads every committed outbox row, in sequence order, through an
// independent pool.
func outbox(t *testing.T, db *sql.DB) []outboxRow {
	t.Helper()
	rows, err := db.Query(`SELECT ` + envelope.EventColumns + ` FROM herald_outbox ORDER BY sequence`)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	defer rows.Close()
	now := time.Now()
	var out []outboxRow
	for rows.Next() {
		e, err := heraldoutbox.ScanEvent(rows, nil)
		if err != nil {
			t.Fatalf("scan outbox: %v", err)
		}
		out = append(out, outboxRow{ID: e.ID, Sequence: e.Sequence, Topic: e.Topic, OrderingKey: e.OrderingKey,
			Published: e.PublishedAt != nil, Dead: e.DeadLetteredAt != nil, Attempts: e.Attempts, LeasedBy: e.LeasedBy,
			LeaseLive: e.LeaseUntil != nil && e.LeaseUntil.After(now)})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkAllDelivered fails unless every committed outbox row is published
// and was delivered, and nothing was delivered that is not in the outbox.
func checkAllDelivered(t *testing.T, db *sql.DB, first []got) {
	t.Helper()
	rows := outbox(t, db)
	delivered := map[uuid.UUID]bool{}
	for _, g := range first {
		delivered[g.ID] = true
	}
	inOutbox := map[uuid.UUID]bool{}
	bad := 0
	for _, r := range rows {
		inOutbox[r.ID] = true
		if !r.Published || !delivered[r.ID] {
			if bad++; bad <= 10 {
				t.Errorf("outbox event seq %d %s (key %q) published=%v dead=%v attempts=%d: delivered=%v",
					r.Sequence, r.Topic, r.OrderingKey, r.Published, r.Dead, r.Attempts, delivered[r.ID])
			}
		}
	}
	for _, g := range first {
		if !inOutbox[g.ID] {
			t.Errorf("delivered event %s seq %d %s is not a committed outbox row", g.ID, g.Sequence, g.Topic)
		}
	}
	if bad > 10 {
		t.Errorf("... %d of %d outbox events not published and delivered", bad, len(rows))
	}
}

// signalSpy wraps the shared wakeup on the plugin's side and records what
// the plugin signalled.
type signalSpy struct {
	wakeup.Wakeup
	mu      sync.Mutex
	signals [][]string
}

func (s *signalSpy) Signal(ctx context.Context, topics []string) error {
	ts := slices.Clone(topics)
	sort.Strings(ts)
	s.mu.Lock()
	s.signals = append(s.signals, ts)
	s.mu.Unlock()
	return s.Wakeup.Signal(ctx, topics)
}

// take returns the signals so far ("a b" per signal) and forgets them.
func (s *signalSpy) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.signals))
	for i, ts := range s.signals {
		out[i] = strings.Join(ts, " ")
	}
	s.signals = nil
	return out
}

// probeTopic is signalled by tests to learn that a relay listens; no event
// has it.
const probeTopic = "herald.test.probe"

// listenProbe wraps the shared wakeup on a relay's side so the test can
// tell when the relay's listener is registered: wakeup.InProcess drops
// signals sent before Listen, and a relay that polls once a minute would
// then not hear of an event for a minute.
type listenProbe struct {
	wakeup.Wakeup
	mu    sync.Mutex
	heard bool
}

func (p *listenProbe) Listen(ctx context.Context, fn func([]string)) error {
	return p.Wakeup.Listen(ctx, func(topics []string) {
		if slices.Contains(topics, probeTopic) {
			p.mu.Lock()
			p.heard = true
			p.mu.Unlock()
		}
		fn(topics)
	})
}

// waitListening signals the probe topic until the relay's listener hears
// it.
func (p *listenProbe) waitListening(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		_ = p.Signal(context.Background(), []string{probeTopic})
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.heard
	}, "the relay never listened on the wakeup")
}

// anyTime in an expected payload matches any RFC 3339 time string.
const anyTime = "<any RFC 3339 time>"

// decodePayload parses a delivered payload and removes occurred_at, which
// must be an RFC 3339 time.
func decodePayload(t *testing.T, g got) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(g.Payload, &p); err != nil {
		t.Fatalf("event %s (%s): payload %s is not a JSON object: %v", g.ID, g.Topic, g.Payload, err)
	}
	if at, ok := p["occurred_at"]; ok {
		if s, _ := at.(string); !isTime(s) {
			t.Errorf("event %s (%s): occurred_at = %v, want an RFC 3339 time", g.ID, g.Topic, at)
		}
		delete(p, "occurred_at")
	}
	return p
}

func isTime(s string) bool {
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// normalize round-trips v through JSON so it compares with a decoded
// payload (numbers become float64).
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// sameJSON compares a decoded payload with an expected (normalized) value;
// the string anyTime matches any time.
func sameJSON(want, have any) bool {
	switch w := want.(type) {
	case string:
		if w == anyTime {
			s, ok := have.(string)
			return ok && isTime(s)
		}
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok || !sameJSON(wv, hv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !sameJSON(w[i], h[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(want, have)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// eachGORMConfig runs f on each dialect with GORM's defaults and with the
// two settings services often turn on for speed: SkipDefaultTransaction
// (the plugin then opens the write's transaction itself) and PrepareStmt.
func eachGORMConfig(t *testing.T, f func(t *testing.T, d envelope.Dialect, cfg func(*gorm.Config))) {
	t.Helper()
	for _, gc := range []struct {
		name string
		cfg  func(*gorm.Config)
	}{
		{"gorm-defaults", nil},
		{"skip-default-tx+prepare-stmt", func(c *gorm.Config) { c.SkipDefaultTransaction, c.PrepareStmt = true, true }},
	} {
		t.Run(gc.name, func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, d envelope.Dialect) { f(t, d, gc.cfg) })
		})
	}
}
