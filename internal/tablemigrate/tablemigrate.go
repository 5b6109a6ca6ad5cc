// Package tablemigrate is the machinery that migrates herald's tables —
// the outbox (envelope.Migrate, MigrateTo, Version, MigrationSQL) and the
// inbox (inbox.Migrate, through internal/outbox) — written against plain
// values so that envelope and internal/outbox both call it: versions
// applied in one transaction under a lock (PostgreSQL's advisory lock,
// SQLite's BEGIN IMMEDIATE, MySQL's GET_LOCK), each recorded in
// RecordTable, and the SQL scripts of one version for migration tools.
package tablemigrate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/outboxsql"
)

// RecordTable is envelope.MigrationTable.
const RecordTable = "herald_migration"

// The dialects, as envelope.Dialect spells them.
const (
	Postgres = outboxsql.Postgres
	SQLite   = outboxsql.SQLite
	MySQL    = outboxsql.MySQL
)

// Table is envelope.Table, field for field (a conversion the compiler
// checks).
type Table struct {
	Name   string // as given ("herald_outbox", "events.outbox")
	Quoted string // quoted for SQL: "events"."outbox"
	Base   string // the part used to name indexes: events_outbox
}

// Migration is envelope.Migration, field for field.
type Migration struct {
	Version int
	Name    string   // what the version changes, in a few words
	Up      []string // the statements from Version-1 to Version
	Down    []string // the statements from Version back to Version-1
}

// Unrecorded tells the version of a table that RecordTable has no record
// of (0 when it does not exist).
type Unrecorded func(ctx context.Context, conn *sql.Conn, d string, t Table) (int, error)

// DialectError is the answer of a database that is not of the dialect a
// migration was given: Msg names both. envelope and internal/outbox make
// it an envelope.ErrConfiguration about "Dialect".
type DialectError struct {
	Msg string
	Err error // the failed probe's error
}

func (e *DialectError) Error() string { return "herald: Dialect: " + e.Msg }

// Unwrap returns the probe's error.
func (e *DialectError) Unwrap() error { return e.Err }

// recordTable is RecordTable in the outbox table's schema, and the
// name the record keeps for the outbox table (unqualified: one record
// table per schema).
func recordTable(t Table) (quoted, name string) {
	if i := strings.LastIndexByte(t.Name, '.'); i >= 0 {
		return names.Quote(t.Name[:i]) + "." + names.Quote(RecordTable), t.Name[i+1:]
	}
	if strings.HasPrefix(t.Quoted, "`") {
		return "`" + RecordTable + "`", t.Name
	}
	return names.Quote(RecordTable), t.Name
}

func createMigrationTableSQL(d string, t Table) string {
	q, _ := recordTable(t)
	if d == MySQL {
		return createMigrationTableMySQL(q)
	}
	if d == Postgres {
		return `CREATE TABLE IF NOT EXISTS ` + q + ` (
    table_name VARCHAR(255) NOT NULL,
    version    INTEGER NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, version)
)`
	}
	return `CREATE TABLE IF NOT EXISTS ` + q + ` (
    table_name TEXT NOT NULL,
    version    INTEGER NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (table_name, version)
)`
}

// The table name is a validated identifier, so it can be a literal: the
// scripts carry no bind parameters.
func recordVersionSQL(d string, t Table, version int) string {
	q, name := recordTable(t)
	if d == MySQL {
		return fmt.Sprintf(`INSERT INTO %s (table_name, version) VALUES ('%s', %d) ON DUPLICATE KEY UPDATE version = version`, q, name, version)
	}
	return fmt.Sprintf(`INSERT INTO %s (table_name, version) VALUES ('%s', %d) ON CONFLICT DO NOTHING`, q, name, version)
}

func deleteVersionSQL(t Table, version int) string {
	q, name := recordTable(t)
	return fmt.Sprintf(`DELETE FROM %s WHERE table_name = '%s' AND version = %d`, q, name, version)
}

// Script is the SQL script of migration m of table t for migration tools:
// its Up statements (or, with down, its Down statements) and the
// statements that keep RecordTable's record; what names the kind of table
// in its first line ("outbox", "inbox").
func Script(d string, t Table, what string, m Migration, down bool) string {
	var stmts []string
	if down {
		stmts = append(stmts, m.Down...)
		stmts = append(stmts, deleteVersionSQL(t, m.Version))
	} else {
		stmts = append(stmts, createMigrationTableSQL(d, t))
		stmts = append(stmts, m.Up...)
		stmts = append(stmts, recordVersionSQL(d, t, m.Version))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- herald %s %s, version %d: %s\n", what, t.Name, m.Version, m.Name)
	if down {
		fmt.Fprintf(&b, "-- down: back to version %d\n", m.Version-1)
	}
	b.WriteString(strings.Join(stmts, ";\n\n"))
	b.WriteString(";\n")
	return b.String()
}

// ExistsAsVersion1 is the Unrecorded of a table whose version 1 is all
// IF NOT EXISTS statements (the inbox's): 1 when it exists, else 0.
func ExistsAsVersion1(ctx context.Context, conn *sql.Conn, d string, t Table) (int, error) {
	exists, err := TableExists(ctx, conn, d, t.Quoted, t.Name)
	if err != nil || !exists {
		return 0, err
	}
	return 1, nil
}

// Migrate brings table t to version through ms, its versions oldest
// first, in one transaction under the migration lock (on MySQL, under
// GET_LOCK), recording each version in RecordTable under t's name. A
// table with no record has the version unrecorded tells. A dialect that
// is not the database's is a *DialectError.
func Migrate(ctx context.Context, db *sql.DB, d string, t Table, ms []Migration, version int, unrecorded Unrecorded) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("herald/envelope: migrate %s: %w", t.Name, err)
	}
	defer conn.Close()
	if err := checkDialect(ctx, conn, d); err != nil {
		return err
	}
	return inMigrationTx(ctx, conn, d, func() error {
		if _, err := conn.ExecContext(ctx, createMigrationTableSQL(d, t)); err != nil {
			return err
		}
		have, err := appliedVersion(ctx, conn, d, t, unrecorded)
		if err != nil {
			return err
		}
		for v := have + 1; v <= version; v++ {
			if err := execAll(ctx, conn, ms[v-1].Up); err != nil {
				return fmt.Errorf("up to version %d: %w", v, err)
			}
			if _, err := conn.ExecContext(ctx, recordVersionSQL(d, t, v)); err != nil {
				return err
			}
		}
		for v := have; v > version; v-- {
			if err := execAll(ctx, conn, ms[v-1].Down); err != nil {
				return fmt.Errorf("down from version %d: %w", v, err)
			}
			if _, err := conn.ExecContext(ctx, deleteVersionSQL(t, v)); err != nil {
				return err
			}
		}
		return nil
	}, t)
}

// Version is the version of table t: the highest recorded (0 when the
// table is gone whatever the record says), else what unrecorded tells.
func Version(ctx context.Context, db *sql.DB, d string, t Table, unrecorded Unrecorded) (int, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("herald/envelope: version of %s: %w", t.Name, err)
	}
	defer conn.Close()
	if err := checkDialect(ctx, conn, d); err != nil {
		return 0, err
	}
	v, err := recordedVersion(ctx, conn, d, t)
	if err == nil && v > 0 {
		// A record outlives a table dropped without MigrateTo(0).
		var exists bool
		if exists, err = TableExists(ctx, conn, d, t.Quoted, t.Name); err == nil && !exists {
			v = 0
		}
	}
	if err == nil && v < 0 {
		v, err = unrecorded(ctx, conn, d, t)
	}
	if err != nil {
		return 0, fmt.Errorf("herald/envelope: version of %s: %w", t.Name, err)
	}
	return v, nil
}

func execAll(ctx context.Context, conn *sql.Conn, stmts []string) error {
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%w\n%s", err, s)
		}
	}
	return nil
}

// inMigrationTx runs f in a transaction on conn that no other migration
// of any herald table runs beside: on PostgreSQL under a transaction-level
// advisory lock (without it, two CREATE … IF NOT EXISTS race into a unique
// violation in pg_type), on SQLite as BEGIN IMMEDIATE, which takes the
// database's write lock before the first read (database/sql cannot begin
// such a transaction whatever the driver's DSN says, so it is sent as SQL
// on the one connection). f's statements go to conn.
func inMigrationTx(ctx context.Context, conn *sql.Conn, d string, f func() error, t Table) (err error) {
	fail := func(err error) error { return fmt.Errorf("herald/envelope: migrate %s: %w", t.Name, err) }
	if d == MySQL {
		return inMySQLMigrationLock(ctx, conn, f, fail)
	}
	begin := "BEGIN IMMEDIATE"
	if d == Postgres {
		begin = "BEGIN"
	}
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		return fail(err)
	}
	defer func() {
		if err != nil {
			// A cancelled ctx must not leave the connection in a
			// transaction when it goes back to the pool.
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if d == Postgres {
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('herald:migrate', 0))`); err != nil {
			return fail(err)
		}
	}
	if err := f(); err != nil {
		return fail(err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fail(err)
	}
	return nil
}

// appliedVersion is the version the table has: the highest recorded, or,
// with no record, the one its layout shows, then recorded (versions up to
// it) so the record is complete for the next run. A record of a table that
// no longer exists (dropped by hand or by a test, left out of a restore) is
// deleted and the version is 0, so Migrate creates the table again: what
// it held is gone whatever Migrate does, and an outbox every write fails
// on helps no one.
func appliedVersion(ctx context.Context, conn *sql.Conn, d string, t Table, unrecorded Unrecorded) (int, error) {
	v, err := recordedVersion(ctx, conn, d, t)
	if err != nil {
		return v, err
	}
	if v > 0 {
		exists, err := TableExists(ctx, conn, d, t.Quoted, t.Name)
		if err != nil || exists {
			return v, err
		}
		q, name := recordTable(t)
		if _, err := conn.ExecContext(ctx, `DELETE FROM `+q+` WHERE table_name = `+outboxsql.Placeholder(d, 1), name); err != nil {
			return 0, err
		}
		return 0, nil
	}
	if v >= 0 {
		return v, nil
	}
	if v, err = unrecorded(ctx, conn, d, t); err != nil {
		return 0, err
	}
	for i := 1; i <= v; i++ {
		if _, err := conn.ExecContext(ctx, recordVersionSQL(d, t, i)); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// recordedVersion is the highest version recorded for t, or -1 when none
// is (or MigrationTable does not exist).
func recordedVersion(ctx context.Context, conn *sql.Conn, d string, t Table) (int, error) {
	q, name := recordTable(t)
	exists, err := TableExists(ctx, conn, d, q, RecordTable)
	if err != nil || !exists {
		return -1, err
	}
	var v sql.NullInt64
	err = conn.QueryRowContext(ctx, `SELECT max(version) FROM `+q+` WHERE table_name = `+outboxsql.Placeholder(d, 1), name).Scan(&v)
	if err != nil {
		return 0, err
	}
	if !v.Valid {
		return -1, nil
	}
	return int(v.Int64), nil
}

// TableExists reports whether the table (quoted, for PostgreSQL's
// to_regclass; name, elsewhere) exists.
func TableExists(ctx context.Context, conn *sql.Conn, d string, quoted, name string) (bool, error) {
	var n int
	var err error
	switch d {
	case Postgres:
		err = conn.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT to_regclass($1) AS r) x WHERE r IS NOT NULL`, quoted).Scan(&n)
	case MySQL:
		err = conn.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`, name).Scan(&n)
	default:
		err = conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
	}
	return n > 0, err
}

// checkDialect asks the database what it is when the dialect's own probe
// fails, so that the wrong dialect is an ErrConfiguration that says which
// to pass, and an unreachable database is the connection error it is.
func checkDialect(ctx context.Context, conn *sql.Conn, d string) error {
	probe := map[string]string{
		Postgres: `SELECT current_setting('server_version_num')`,
		SQLite:   `SELECT sqlite_version()`,
		MySQL:    `SELECT @@version_comment`,
	}
	var v string
	err := conn.QueryRowContext(ctx, probe[d]).Scan(&v)
	if err == nil {
		return nil
	}
	for _, other := range []string{Postgres, SQLite, MySQL} {
		if other == d || conn.QueryRowContext(ctx, probe[other]).Scan(&v) != nil {
			continue
		}
		return &DialectError{Msg: fmt.Sprintf("envelope.%s given, but the database is %s: pass envelope.%s", dialectName(d), dialectName(other), dialectName(other)),
			Err: err}
	}
	return fmt.Errorf("herald/envelope: migrate: %w", err)
}

func dialectName(d string) string {
	switch d {
	case Postgres:
		return "Postgres"
	case MySQL:
		return "MySQL"
	}
	return "SQLite"
}

func createMigrationTableMySQL(q string) string {
	return `CREATE TABLE IF NOT EXISTS ` + q + ` (
    table_name VARCHAR(255) NOT NULL,
    version    INTEGER NOT NULL,
    applied_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (table_name, version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
}

// mysqlMigrateLock is the name of the GET_LOCK lock every MySQL migration
// runs under. GET_LOCK names are server-wide, so migrations of every
// database of the server take turns: they are rare and short.
const mysqlMigrateLock = "herald:migrate"

// mysqlMigrateWait is how long a migration waits for another's lock
// (shorter when ctx ends first).
const mysqlMigrateWait = time.Hour

// inMySQLMigrationLock runs f on conn under GET_LOCK(mysqlMigrateLock).
//
// MySQL commits DDL implicitly, so a migration cannot run in one
// transaction as on PostgreSQL and SQLite; the lock serializes
// migrations instead (every statement of a version is IF NOT EXISTS or IF
// EXISTS, so a migration cut short is finished by the next run). A
// GET_LOCK lock belongs to the session, not to a transaction: it outlives
// anything f does, and on a pooled connection it would outlive the
// migration. It is released on every path — f's error, a panic, ctx's end
// (released with a context of its own) — and when the release itself fails
// the connection is discarded, not returned to the pool holding it: a
// session that ends releases its locks.
func inMySQLMigrationLock(ctx context.Context, conn *sql.Conn, f func() error, fail func(error) error) (err error) {
	wait := mysqlMigrateWait
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Until(dl), 0)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, mysqlMigrateLock, int64(wait/time.Second)).Scan(&got); err != nil {
		return fail(err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fail(fmt.Errorf("GET_LOCK(%q) not granted within %s: another migration holds it", mysqlMigrateLock, wait))
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var released sql.NullInt64
		rerr := conn.QueryRowContext(rctx, `SELECT RELEASE_LOCK(?)`, mysqlMigrateLock).Scan(&released)
		if rerr == nil && released.Int64 == 1 {
			return
		}
		// Not released: close the session rather than pool it with the lock.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			if rerr == nil {
				rerr = errors.New("RELEASE_LOCK did not release the lock")
			}
			err = fail(rerr)
		}
	}()
	if err := f(); err != nil {
		return fail(err)
	}
	return nil
}
