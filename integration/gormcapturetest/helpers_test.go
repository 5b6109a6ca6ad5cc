package gormcapture_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// env is one test database with the plugin installed.
type env struct {
	name    string
	dialect envelope.Dialect
	db      *gorm.DB
	sql     *sql.DB // an independent pool on the same database
	plugin  *gormcapture.Plugin
	wake    *recorder
}

type dialectCase struct {
	name    string
	dialect envelope.Dialect
}

var dialects = []dialectCase{{"postgres", envelope.Postgres}, {"sqlite", envelope.SQLite}}

// mysqlDialects adds MariaDB/MySQL to dialects, for the tests that run
// on it (TestConformance and the MySQL-specific ones).
var mysqlDialects = append(dialects[:len(dialects):len(dialects)], dialectCase{"mysql", envelope.MySQL})

// openDB opens a fresh database of the dialect with GORM (config cfg),
// migrates the outbox table and the models, and returns it without the
// plugin, plus an independent *sql.DB on the same database.
func openDB(t testing.TB, d envelope.Dialect, cfg *gorm.Config) (*gorm.DB, *sql.DB) {
	t.Helper()
	if cfg == nil {
		cfg = &gorm.Config{}
	}
	c := *cfg // gorm.Open keeps and fills the config it is given
	cfg = &c
	if cfg.Logger == nil {
		cfg.Logger = logger.Default.LogMode(logger.Silent)
	}
	var (
		db    *gorm.DB
		other *sql.DB
		err   error
	)
	switch d {
	case envelope.Postgres:
		var dsn string
		other, dsn = testkit.Postgres(t)
		db, err = gorm.Open(postgres.Open(dsn), cfg)
	case envelope.MySQL:
		var dsn string
		other, dsn = testkit.MySQL(t)
		db, err = gorm.Open(mysql.Open(dsn), cfg)
	default:
		dsn := testkit.MattnDSN(testkit.SQLitePath(t))
		db, err = gorm.Open(sqlite.Open(dsn), cfg)
		if err == nil {
			other, err = sql.Open("sqlite3", dsn)
		}
	}
	if err != nil {
		t.Fatalf("open %s: %v", d, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close(); _ = other.Close() })
	if err := envelope.Migrate(context.Background(), sqlDB, d, ""); err != nil {
		t.Fatal(err)
	}
	return db, other
}

// newEnv opens a database, installs the plugin with cfg (a recorder as
// Wakeup unless cfg has one) and migrates models.
func newEnv(t testing.TB, d envelope.Dialect, gcfg *gorm.Config, cfg gormcapture.Config, models ...any) *env {
	t.Helper()
	db, other := openDB(t, d, gcfg)
	if len(models) > 0 {
		if err := db.AutoMigrate(models...); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	e := &env{name: string(d), dialect: d, db: db, sql: other}
	if cfg.Wakeup == nil {
		e.wake = &recorder{}
		cfg.Wakeup = e.wake
	}
	if cfg.Models == nil {
		cfg.Models = listable(t, db, cfg, models)
	}
	e.plugin = gormcapture.New(cfg)
	if err := db.Use(e.plugin); err != nil {
		t.Fatalf("use: %v", err)
	}
	if e.wake != nil {
		e.wake.count = func() int { return e.count(t) }
	}
	return e
}

// eachDialect runs f on PostgreSQL and SQLite, in parallel.
func eachDialect(t *testing.T, f func(t *testing.T, d envelope.Dialect)) {
	t.Helper()
	for _, c := range dialects {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f(t, c.dialect)
		})
	}
}

// count returns the number of outbox events, read on the independent
// pool (what another connection sees committed).
func (e *env) count(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.sql.QueryRow(`SELECT count(*) FROM herald_outbox`).Scan(&n); err != nil {
		t.Errorf("count events: %v", err)
	}
	return n
}

// event is an outbox row as tests compare it.
type event struct {
	Sequence    int64
	Topic       string
	Payload     map[string]any
	Raw         []byte // the payload's bytes as stored
	Headers     map[string]string
	OrderingKey string
	Extra       map[string]any
}

// events returns the committed outbox rows in sequence order.
func (e *env) events(t testing.TB) []event {
	t.Helper()
	rows, err := e.sql.Query(`SELECT ` + envelope.EventColumns + ` FROM herald_outbox ORDER BY sequence`)
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	defer rows.Close()
	var out []event
	for rows.Next() {
		ev, err := outbox.ScanEvent(rows, nil)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatalf("payload %s: %v", ev.Payload, err)
		}
		out = append(out, event{Sequence: ev.Sequence, Topic: ev.Topic, Payload: p, Raw: ev.Payload, Headers: ev.Headers, OrderingKey: ev.OrderingKey})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// recorder is a Wakeup that records its signals, and how many events an
// independent connection saw committed at each one.
type recorder struct {
	mu    sync.Mutex
	fires [][]string
	seen  []int
	count func() int
}

func (r *recorder) Signal(_ context.Context, topics []string) error {
	ts := slices.Clone(topics)
	sort.Strings(ts)
	n := -1
	if r.count != nil {
		n = r.count()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fires = append(r.fires, ts)
	r.seen = append(r.seen, n)
	return nil
}

func (r *recorder) Listen(ctx context.Context, _ func([]string)) error {
	<-ctx.Done()
	return nil
}

func (r *recorder) Close() error { return nil }

// take returns the fires so far as "a b|c" strings and forgets them.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.fires))
	for i, f := range r.fires {
		out[i] = strings.Join(f, " ")
	}
	r.fires, r.seen = nil, nil
	return out
}

func (r *recorder) seenCounts() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func msg(topic string) envelope.Message {
	return envelope.Message{Topic: topic, Payload: map[string]any{"t": topic}}
}

var fixedTime = time.Date(2026, 10, 6, 12, 0, 0, 0, time.UTC)

// listable returns the models of a test that Config.Models may list: the
// captured ones and those declaring a constraint the plugin follows. The
// others are captured by the test with Capture after db.Use, which a
// listing would refuse (Config.Models names what is known up front).
func listable(t testing.TB, db *gorm.DB, cfg gormcapture.Config, models []any) []any {
	t.Helper()
	if cfg.CaptureAll != nil {
		return models
	}
	var out []any
	for _, m := range models {
		if _, ok := m.(gormcapture.Captured); ok {
			out = append(out, m)
			continue
		}
		st := &gorm.Statement{DB: db}
		if err := st.Parse(m); err != nil {
			t.Fatal(err)
		}
		follows := func(c *schema.Constraint) bool {
			if c == nil {
				return false
			}
			for _, a := range []string{c.OnDelete, c.OnUpdate} {
				switch strings.ToUpper(strings.Join(strings.Fields(a), " ")) {
				case "CASCADE", "SET NULL", "SET DEFAULT":
					return true
				}
			}
			return false
		}
		for _, rel := range st.Schema.Relationships.Relations {
			ok := follows(rel.ParseConstraint())
			if rel.JoinTable != nil {
				for _, r2 := range rel.JoinTable.Relationships.Relations {
					ok = ok || follows(r2.ParseConstraint())
				}
			}
			if ok {
				out = append(out, m)
				break
			}
		}
	}
	return out
}
