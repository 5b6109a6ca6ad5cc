// Package outboxsql is the SQL of the outbox table that envelope and
// herald's other packages share, written against plain values (a dialect's
// name, a table's quoted name) so that envelope can import it: bind
// placeholders and time arguments per dialect, the ordering-key lock SQL,
// the paused-topics table, LIKE patterns of topic patterns, the message of
// a write to an unmigrated table, the outbox row scanner, and the mark of
// a write that may bind arrays. envelope's unexported methods call it;
// internal/outbox gives it envelope's types for the other packages.
package outboxsql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/sqltime"
)

// MySQLIDType is the type of the id column of herald's MySQL outbox table
// (envelope's mysqlV1), for a JSON_TABLE column of ids compared with it.
// It must be the column's own type: declared otherwise (utf8mb4), MariaDB
// 10.11 cannot look the table's rows up in the materialized ids and joins
// them by a block nested loop over the JSON document, quadratic in the
// number of ids (envelope's TestMySQLReadBackScales).
const MySQLIDType = "CHAR(36) CHARACTER SET ascii"

// The dialect names (envelope.Postgres, SQLite, MySQL).
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
	MySQL    = "mysql"
)

// Placeholder returns the n-th (1-based) bind placeholder of the dialect.
func Placeholder(dialect string, n int) string {
	if dialect == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// MaxBindParams is the most bind parameters one statement may carry.
func MaxBindParams(dialect string) int {
	if dialect == Postgres || dialect == MySQL {
		return 65535
	}
	return 32766
}

// TimeArg returns t as a bind argument for the dialect: fixed-width UTC
// text on SQLite (so that times compare correctly as text), UTC to the
// microsecond on MySQL, t itself on PostgreSQL.
func TimeArg(dialect string, t time.Time) any {
	switch dialect {
	case SQLite:
		return t.UTC().Format(sqltime.SQLiteFormat)
	case MySQL:
		// DATETIME(6) holds no zone: herald's are UTC, to the microsecond
		// (go-sql-driver/mysql formats a time in its loc, UTC by default).
		return t.UTC().Truncate(time.Microsecond)
	}
	return t
}

// LikePattern returns a topic pattern (its text, and whether it is a
// prefix) as a pattern for SQL `LIKE ? ESCAPE '\'`: the text with '\',
// '%' and '_' escaped, then '%' for a prefix.
func LikePattern(text string, prefix bool) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	s := r.Replace(text)
	if prefix {
		s += "%"
	}
	return s
}

// PausedTable is the table of paused topics that goes with the outbox
// table quoted ("events"."outbox"), whose base name is base
// ({base}_paused, in the outbox's schema), quoted.
func PausedTable(quoted, base string) string {
	schema := ""
	if i := strings.LastIndex(quoted, `"."`); i >= 0 {
		schema = quoted[:i+2]
	}
	return schema + base + "_paused"
}

// The ordering-key locks on PostgreSQL: a key locks bucket
// hashtextextended(key, KeyLockSeed) & (KeyLockBuckets-1) of its table's
// lock class (envelope's package doc, "Ordering", has the reasons).
const (
	KeyLockBuckets = 1024
	KeyLockSeed    = 7281
)

// LockClassSQL is the advisory lock classid of the outbox table quoted, as
// SQL: its OID (resolved once, when the statement is parsed), as int4.
// Advisory locks are per database, and a table's OID is unique in its
// database, so every outbox table — one per schema of a multi-tenant
// database, a test's own — has a lock space of its own, while every writer
// of one table, whatever name or search_path it reaches it by, shares it.
func LockClassSQL(quoted string) string {
	return "('" + quoted + "'::regclass::oid::int4)"
}

// KeyLockSQL returns a boolean SQL condition, always true, that takes the
// advisory lock of the ordering key keyExpr (a SQL text expression) in
// lockClass (LockClassSQL): shared when rowKeyed, exclusive otherwise.
func KeyLockSQL(lockClass, keyExpr string, rowKeyed bool) string {
	f := "pg_advisory_xact_lock("
	if rowKeyed {
		f = "pg_advisory_xact_lock_shared("
	}
	return f + lockClass + `, (hashtextextended(` + keyExpr + `, ` + strconv.Itoa(KeyLockSeed) + `) & ` +
		strconv.Itoa(KeyLockBuckets-1) + `)::int)::text = ''`
}

// KeyLocksSQL returns a boolean SQL condition, always true, that takes the
// advisory locks of the ordering keys keysQuery returns (a SQL query of
// one text column, NULLs ignored) in lockClass: each key's bucket once, in
// ascending bucket order, shared when rowKeyed, exclusive otherwise. As a
// WHERE clause it is a one-time filter, evaluated before the first row is
// read.
func KeyLocksSQL(lockClass, keysQuery string, rowKeyed bool) string {
	f := "pg_advisory_xact_lock("
	if rowKeyed {
		f = "pg_advisory_xact_lock_shared("
	}
	return `(SELECT count(` + f + lockClass + `, l.b)::text) FROM (SELECT DISTINCT (hashtextextended(k.k, ` + strconv.Itoa(KeyLockSeed) + `) & ` +
		strconv.Itoa(KeyLockBuckets-1) + `)::int AS b FROM (` + keysQuery + `) AS k(k) WHERE k.k IS NOT NULL ORDER BY 1) AS l) >= 0`
}

type arraysKey struct{}

// WithArrays marks ctx for envelope's Writer.Write: the caller's
// connection binds Go slices as arrays (pgx's database/sql driver), so a
// batch may take the unnest bulk path (internal/outbox.WriteArrays).
func WithArrays(ctx context.Context) context.Context {
	return context.WithValue(ctx, arraysKey{}, true)
}

// Arrays reports whether ctx was marked by WithArrays.
func Arrays(ctx context.Context) bool {
	v, _ := ctx.Value(arraysKey{}).(bool)
	return v
}

// Scanner is *sql.Rows or *sql.Row.
type Scanner interface{ Scan(dest ...any) error }

// Event is envelope.Event, field for field: a *Event converts to an
// *envelope.Event (a conversion the compiler checks, so the two cannot
// drift apart).
type Event struct {
	Sequence       int64           // assigned by the database: the delivery order
	ID             uuid.UUID       // UUID v7; receivers de-duplicate on it
	Topic          string          // deliveries route on it
	Payload        json.RawMessage // the JSON payload
	Headers        map[string]string
	OrderingKey    string // "" = unordered
	IdempotencyKey string // "" = none
	CreatedAt      time.Time
	Attempts       int    // failed deliveries so far
	LastError      string // the last delivery error
	NextAttemptAt  *time.Time
	LeaseUntil     *time.Time
	PublishedAt    *time.Time
	DeadLetteredAt *time.Time
	LeasedBy       string
	Tenant         string         // the tenant column (schema version 6); "" = none
	Extra          map[string]any // extra columns the relay was told to load
}

// ScanEvent scans one row selected as envelope.EventColumns followed by
// the extra columns named in extra (loaded into Event.Extra).
func ScanEvent(s Scanner, extra []string) (*Event, error) {
	var (
		e                                       Event
		payload, headers                        []byte
		okey, ikey, lastErr, leasedBy           sql.NullString
		created, next, lease, published, killed sqltime.NullTime
	)
	dest := []any{&e.Sequence, &e.ID, &e.Topic, &payload, &headers, &okey, &ikey, &created, &e.Attempts,
		&lastErr, &next, &lease, &leasedBy, &published, &killed}
	var xv []any
	if len(extra) > 0 {
		xv = make([]any, len(extra))
		for i := range xv {
			dest = append(dest, &xv[i])
		}
	}
	if err := s.Scan(dest...); err != nil {
		return nil, fmt.Errorf("herald/envelope: scan event: %w", err)
	}
	e.Payload = json.RawMessage(payload)
	if len(headers) > 0 && string(headers) != "{}" {
		if err := json.Unmarshal(headers, &e.Headers); err != nil {
			return nil, fmt.Errorf("herald/envelope: event %d: headers: %w", e.Sequence, err)
		}
	}
	e.OrderingKey, e.IdempotencyKey, e.LastError, e.LeasedBy = okey.String, ikey.String, lastErr.String, leasedBy.String
	e.CreatedAt = created.Time
	e.NextAttemptAt, e.LeaseUntil, e.PublishedAt, e.DeadLetteredAt = next.Ptr(), lease.Ptr(), published.Ptr(), killed.Ptr()
	if len(extra) > 0 {
		e.Extra = make(map[string]any, len(extra))
		for i, c := range extra {
			if b, ok := xv[i].([]byte); ok { // drivers may reuse the buffer
				xv[i] = slices.Clone(b)
			}
			e.Extra[c] = xv[i]
		}
	}
	return &e, nil
}

// Unmigrated returns what is wrong with the outbox table (as given, name)
// of dialect when err, a write's error, is the database's answer that the
// table does not exist (PostgreSQL's undefined_table, 42P01, about it;
// SQLite's "no such table") or lacks the tenant column of schema version
// 6, and how to fix it; "" for any other error. envelope's Writer and
// internal/outbox.Unmigrated make it an ErrConfiguration.
func Unmigrated(dialect, table string, err error) string {
	msg := err.Error()
	name := table
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	var st interface{ SQLState() string }
	if strings.Contains(msg, `column "tenant"`) || strings.Contains(msg, "no such column: tenant") || strings.Contains(msg, "no column named tenant") || strings.Contains(msg, "Unknown column 'tenant'") ||
		strings.Contains(msg, "no unique or exclusion constraint matching the ON CONFLICT") {
		return fmt.Sprintf("lacks the tenant column and index of schema version 6 (MySQL: 2), which tenants and idempotency keys need: run envelope.Migrate(ctx, db, %q, %q)", dialect, table)
	}
	missing := (errors.As(err, &st) && st.SQLState() == "42P01") || strings.Contains(msg, "SQLSTATE 42P01") ||
		strings.Contains(msg, "no such table")
	if !missing || !strings.Contains(msg, name) {
		return ""
	}
	return fmt.Sprintf("does not exist: create it before the first write with envelope.Migrate(ctx, db, %q, %q) (or the scripts of envelope.MigrationSQL)", dialect, table)
}
