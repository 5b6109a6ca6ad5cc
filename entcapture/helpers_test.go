package entcapture_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	_ "github.com/heraldgo/herald/internal/capturecases/entcc/ent/runtime"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type dialectCase struct {
	name    string
	dialect envelope.Dialect
}

var dialects = []dialectCase{{"postgres", envelope.Postgres}, {"sqlite", envelope.SQLite}}

// mysqlDialect is MySQL (the machine's MariaDB), for the tests that run
// on it too (capture_mysql_test.go, TestConformance).
var mysqlDialect = dialectCase{"mysql", envelope.MySQL}

// HERALD_ENTCAPTURE_MYSQL=1 runs every dialect-parameterised test on
// MySQL too (as HERALD_RELAY_MYSQL does the relay's).
func init() {
	if os.Getenv("HERALD_ENTCAPTURE_MYSQL") == "1" {
		dialects = append(dialects, mysqlDialect)
	}
}

// withMySQL is dialects with MySQL, once.
func withMySQL() []dialectCase {
	if slices.Contains(dialects, mysqlDialect) {
		return dialects
	}
	return append(slices.Clip(dialects), mysqlDialect)
}

// env is one test database with an ent client on entcapture.Driver.
type env struct {
	dialect envelope.Dialect
	db      *sql.DB
	drv     *entcapture.CaptureDriver
	client  *ent.Client
	plain   *ent.Client // the same database, without the wrapper
}

// schemaMu serializes ent's migrations: Schema.Create writes the
// generated package's table descriptions (ent's Atlas.setupTables), so two
// at once race.
var schemaMu sync.Mutex

func createSchema(t testing.TB, create func(context.Context) error) {
	t.Helper()
	schemaMu.Lock()
	defer schemaMu.Unlock()
	must(t, create(context.Background()))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// openDB opens a fresh database of the dialect and migrates the outbox.
func openDB(t testing.TB, d envelope.Dialect) *sql.DB {
	t.Helper()
	var db *sql.DB
	switch d {
	case envelope.Postgres:
		db, _ = testkit.Postgres(t)
	case envelope.MySQL:
		db, _ = testkit.MySQL(t)
	default:
		var err error
		db, err = sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(t)))
		must(t, err)
		t.Cleanup(func() { _ = db.Close() })
	}
	must(t, envelope.Migrate(context.Background(), db, d, ""))
	return db
}

func entDialect(d envelope.Dialect) string {
	switch d {
	case envelope.Postgres:
		return dialect.Postgres
	case envelope.MySQL:
		return dialect.MySQL
	}
	return dialect.SQLite
}

// newEnv opens a database, an ent client of the conformance schemas on
// entcapture.Driver(cfg), and creates their tables.
func newEnv(t testing.TB, d envelope.Dialect, cfg entcapture.Config) *env {
	t.Helper()
	db := openDB(t, d)
	raw := entsql.OpenDB(entDialect(d), db)
	e := &env{dialect: d, db: db, drv: entcapture.Driver(raw, cfg)}
	e.client = ent.NewClient(ent.Driver(e.drv))
	e.plain = ent.NewClient(ent.Driver(raw))
	createSchema(t, func(ctx context.Context) error { return e.client.Schema.Create(ctx) })
	return e
}

type event struct {
	Topic, OrderingKey string
	Payload            []byte
}

// events returns the committed events in sequence order.
func (e *env) events(t testing.TB) []event {
	t.Helper()
	rows, err := e.db.Query(`SELECT topic, COALESCE(ordering_key, ''), payload FROM herald_outbox ORDER BY sequence`)
	must(t, err)
	defer rows.Close()
	var out []event
	for rows.Next() {
		var ev event
		must(t, rows.Scan(&ev.Topic, &ev.OrderingKey, &ev.Payload))
		out = append(out, ev)
	}
	must(t, rows.Err())
	return out
}

func (e *env) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	must(t, e.db.QueryRow(`SELECT COUNT(*) FROM `+table).Scan(&n))
	return n
}

// textOf is SQL reading expr as text on dialect d: CAST(… AS TEXT), which
// MySQL lacks (it casts to CHAR).
func textOf(d envelope.Dialect, expr string) string {
	if d == envelope.MySQL {
		return "CAST(" + expr + " AS CHAR)"
	}
	return "CAST(" + expr + " AS TEXT)"
}

// payloadText is SQL reading the outbox's payload as compact JSON text,
// for LIKE patterns: MySQL 8 prints a JSON column with a space after
// each ':' and ',' (MariaDB, whose JSON is text, keeps what was written).
func payloadText(d envelope.Dialect) string {
	if d == envelope.MySQL {
		return "REPLACE(REPLACE(" + textOf(d, "payload") + ", '\": ', '\":'), ', \"', ',\"')"
	}
	return textOf(d, "payload")
}

// seriesInsert is `INSERT INTO <into> SELECT <sel> FROM s` over a series
// s(i) = 1..n on dialect d: generate_series on PostgreSQL, a recursive
// CTE on SQLite, and on MySQL the product of decimal digits (MySQL 8's
// recursion depth stops at 1000 unless raised in the session).
func seriesInsert(d envelope.Dialect, n int, into, sel string) string {
	switch d {
	case envelope.Postgres:
		return fmt.Sprintf("INSERT INTO %s SELECT %s FROM generate_series(1, %d) AS s(i)", into, sel, n)
	case envelope.MySQL:
		digits := "(SELECT 0 AS i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
		var from, sum []string
		for k, p := 0, 1; p < n; k, p = k+1, p*10 {
			from = append(from, digits+" AS d"+fmt.Sprint(k))
			sum = append(sum, fmt.Sprintf("%d * d%d.i", p, k))
		}
		return fmt.Sprintf("INSERT INTO %s SELECT %s FROM (SELECT %s + 1 AS i FROM %s) AS s WHERE s.i <= %d",
			into, sel, strings.Join(sum, " + "), strings.Join(from, " CROSS JOIN "), n)
	}
	return fmt.Sprintf("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) INSERT INTO %s SELECT %s FROM s", n, into, sel)
}
