package gormcapture_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/mattn/go-sqlite3"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// A database/sql driver wrapper that records every statement a
// connection runs: the only way to see the plugin's own statements, which
// do not pass GORM's logger.

type stmtLog struct {
	mu   sync.Mutex
	on   bool
	stmt []string
	args []int // each statement's number of bound parameters
}

func (l *stmtLog) add(q string, args int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.stmt = append(l.stmt, q)
		l.args = append(l.args, args)
	}
}

// recordArgs runs f and returns the statements it ran and the number of
// parameters each bound.
func (l *stmtLog) recordArgs(f func()) ([]string, []int) {
	stmts := l.record(f)
	l.mu.Lock()
	defer l.mu.Unlock()
	return stmts, l.args
}

// record runs f and returns the statements it ran.
func (l *stmtLog) record(f func()) []string {
	l.mu.Lock()
	l.on, l.stmt, l.args = true, nil, nil
	l.mu.Unlock()
	f()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	return l.stmt
}

type countingConnector struct {
	driver.Connector
	log *stmtLog
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: cn, log: c.log}, nil
}

type countingConn struct {
	driver.Conn
	log *stmtLog
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.log.add(q, len(args))
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.log.add(q, len(args))
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: s, q: q, log: c.log}, nil
}

// countingStmt logs each execution of a prepared statement.
type countingStmt struct {
	driver.Stmt
	q   string
	log *stmtLog
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.log.add(s.q, len(args))
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.log.add(s.q, len(args))
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (s *countingStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type dsnConnector struct {
	dsn string
	d   driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// countingDB opens a GORM DB of the dialect whose statements are logged.
func countingDB(t testing.TB, d envelope.Dialect) (*gorm.DB, *stmtLog) {
	t.Helper()
	log := &stmtLog{}
	var (
		sqlDB *sql.DB
		dial  gorm.Dialector
	)
	if d == envelope.Postgres {
		_, dsn := testkit.Postgres(t)
		cfg, err := pgx.ParseConfig(dsn)
		must(t, err)
		sqlDB = sql.OpenDB(countingConnector{stdlib.GetConnector(*cfg), log})
		dial = postgres.New(postgres.Config{Conn: sqlDB})
	} else {
		dsn := testkit.MattnDSN(testkit.SQLitePath(t))
		sqlDB = sql.OpenDB(countingConnector{dsnConnector{dsn, &sqlite3.SQLiteDriver{}}, log})
		dial = sqlite.New(sqlite.Config{Conn: sqlDB})
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	must(t, err)
	must(t, envelope.Migrate(context.Background(), sqlDB, d, ""))
	return db, log
}

// kinds summarises statements by their first word(s).
func kinds(stmts []string) []string {
	out := make([]string, len(stmts))
	for i, s := range stmts {
		f := strings.Fields(s)
		switch {
		case len(f) >= 3 && strings.EqualFold(f[0], "INSERT"):
			out[i] = "INSERT " + strings.Trim(f[2], "\"`")
		case len(f) >= 2 && strings.EqualFold(f[0], "UPDATE"):
			out[i] = "UPDATE " + strings.Trim(f[1], "\"`")
		case len(f) >= 3 && strings.EqualFold(f[0], "DELETE"):
			out[i] = "DELETE " + strings.Trim(f[2], "\"`")
		case strings.Contains(strings.ToUpper(s), "FOR UPDATE"):
			out[i] = "SELECT FOR UPDATE"
		case len(f) > 0:
			out[i] = strings.ToUpper(f[0])
		}
	}
	return out
}

// short joins statements for a failure message, each cut to 100 bytes.
func short(stmts []string) string {
	out := make([]string, len(stmts))
	for i, s := range stmts {
		if len(s) > 100 {
			s = s[:100] + "…"
		}
		out[i] = s
	}
	return strings.Join(out, "\n")
}
