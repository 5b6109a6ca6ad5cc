// Package testkit gives herald's tests real servers: a fresh PostgreSQL
// schema per test, SQLite files in t.TempDir(), Redis, RabbitMQ and NATS
// URLs, and a goroutine-leak check for TestMain (a Kafka is in
// internal/kafkatest, apart, so that core packages' tests need no Kafka client).
//
// A test that needs a server that is unreachable fails with a message that
// says how to start it; `go test -short` skips such tests instead.
package testkit

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
)

// Environment variables that point tests at servers.
const (
	EnvPostgres = "HERALD_POSTGRES_DSN"
	EnvRedis    = "HERALD_REDIS_URL"
	EnvAMQP     = "HERALD_AMQP_URL"
	EnvKafka    = "HERALD_KAFKA_BROKERS"
	EnvNATS     = "HERALD_NATS_URL"
)

// Defaults, the servers' local addresses on the project's machines.
const (
	DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
)

// Main runs the tests and then fails the binary if goroutines leaked (the
// check in leak.go, goleak's rules on the standard library alone).
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := LeakError(Leaks(
			// database/sql closes its opener goroutine asynchronously after Close.
			IgnoreTop("database/sql.(*DB).connectionOpener"),
			// pgx's background reader of a connection being closed.
			IgnoreAny("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"),
			// gorm's prepared-statement cache (PrepareStmt) starts a TTL sweeper
			// per cache that it never stops (gorm/internal/lru: "done channel is
			// never closed").
			IgnoreAny("gorm.io/gorm/internal/lru.NewLRU[...].func1"),
			// go-redis retries a failed dial in the background, sleeping 1 s
			// between tries, and sees that its pool was closed only when it
			// wakes: up to a second after Close (a test that took Redis down).
			IgnoreAny("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		)); err != nil {
			fmt.Fprintf(os.Stderr, "testkit: leaked goroutines after a successful run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func needServer(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s; skipped with -short", what)
	}
}

// PostgresDSN returns the DSN of the test server (HERALD_POSTGRES_DSN).
func PostgresDSN() string { return env(EnvPostgres, DefaultPostgresDSN) }

// Postgres creates a schema of the test's own and returns a DSN whose
// search_path is that schema, and a *sql.DB (pgx) open on it. The schema is
// dropped and the DB closed when the test ends.
func Postgres(t testing.TB) (*sql.DB, string) {
	t.Helper()
	needServer(t, "PostgreSQL")
	base := PostgresDSN()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("testkit: %s=%q: %v", EnvPostgres, base, err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		t.Fatalf("testkit: PostgreSQL at %s is unreachable: %v\n"+
			"start it with `pg_ctlcluster --skip-systemctl-redirect 15 main start` (or run .ci/run), "+
			"point %s at another server, or skip server tests with `go test -short`", redact(base), err, EnvPostgres)
	}
	schema := "herald_t_" + randomHex(6)
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("testkit: create schema: %v", err)
	}
	t.Cleanup(func() {
		a, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = a.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
	})
	dsn := withParam(base, "search_path", schema)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("testkit: open %s: %v", redact(dsn), err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, dsn
}

func withParam(dsn, k, v string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn + " " + k + "=" + v // key=value form
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

// SQLitePath returns the path of a new SQLite database file in t.TempDir().
func SQLitePath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "herald.db")
}

// MattnDSN is the DSN for github.com/mattn/go-sqlite3 (gorm.io/driver/sqlite):
// WAL, synchronous=NORMAL, foreign keys on, a busy timeout, and
// transactions that begin IMMEDIATE — the setting herald recommends: a
// deferred transaction that reads, then writes after another connection
// committed, fails at once with "database is locked" instead of waiting.
func MattnDSN(path string) string {
	return "file:" + path + "?_foreign_keys=1&_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate"
}

// ModerncDSN is the same DSN for modernc.org/sqlite and glebarez/go-sqlite.
func ModerncDSN(path string) string {
	return "file:" + path + "?_pragma=foreign_keys(1)&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

// RedisURL returns HERALD_REDIS_URL after checking the server answers.
func RedisURL(t testing.TB) string {
	t.Helper()
	needServer(t, "Redis")
	u := env(EnvRedis, DefaultRedisURL)
	reachable(t, "Redis", u, "6379", EnvRedis,
		`redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no`)
	return u
}

// AMQPURL returns HERALD_AMQP_URL after checking the server answers.
func AMQPURL(t testing.TB) string {
	t.Helper()
	needServer(t, "RabbitMQ")
	u := env(EnvAMQP, DefaultAMQPURL)
	reachable(t, "RabbitMQ", u, "5672", EnvAMQP, "rabbitmq-server -detached")
	return u
}

// NATSURL returns HERALD_NATS_URL after checking the server answers (a
// nats-server with JetStream, -js).
func NATSURL(t testing.TB) string {
	t.Helper()
	needServer(t, "NATS")
	u := env(EnvNATS, DefaultNATSURL)
	reachable(t, "NATS", u, "4222", EnvNATS, "nats-server -a 127.0.0.1 -p 4222 -js")
	return u
}

func reachable(t testing.TB, what, rawURL, port, envName, start string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("testkit: %s=%q: %v", envName, rawURL, err)
	}
	host := u.Host
	if !strings.Contains(host, ":") {
		host += ":" + port
	}
	c, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		t.Fatalf("testkit: %s at %s is unreachable: %v\nstart it with `%s` (or run .ci/run), point %s at another server, or skip server tests with `go test -short`",
			what, host, err, start, envName)
	}
	_ = c.Close()
}

// Name returns a random name with the prefix, for topics, streams, queues.
func Name(prefix string) string { return prefix + randomHex(6) }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("testkit: %v", err))
	}
	return hex.EncodeToString(b)
}

// Eventually calls cond until it returns true or the deadline passes, then
// fails the test with msg. It polls; it never sleeps a fixed time to wait.
func Eventually(t testing.TB, within time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	if !WaitFor(within, cond) {
		t.Fatalf("testkit: not within %s: "+msg, append([]any{within}, args...)...)
	}
}

// WaitFor polls cond until it holds (true) or within has passed (false),
// for a test that has more to report than Eventually's message when the
// condition never holds.
func WaitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // the poll step of a wait with a deadline
	}
	return true
}

// QueryText runs q on db and returns its rows as text, a header line of
// the column names and one line per row, columns joined by " | " and NULL
// as empty: how tests read and print an EXPLAIN whatever its columns.
func QueryText(t testing.TB, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(strings.Join(cols, " | ") + "\n")
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(v.String)
		}
		b.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
