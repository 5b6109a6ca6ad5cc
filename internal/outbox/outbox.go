// Package outbox is the plumbing herald's own packages share around
// envelope: error constructors, the outbox row scanner, a dialect's bind
// placeholders and time arguments, the key-lock SQL of statements that
// write events themselves, the pgx array bulk write, the migrations of the
// inbox's tables. It is internal so that envelope's godoc shows what users
// call. Most of it is internal/outboxsql's and internal/tablemigrate's
// (plain values, which envelope imports too), given envelope's types here.
package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outboxsql"
	"github.com/heraldgo/herald/internal/tablemigrate"
)

// Validationf returns an envelope.ErrValidation error about where.
func Validationf(where, format string, args ...any) error {
	return &envelope.Error{Kind: envelope.ErrValidation, Where: where, Msg: fmt.Sprintf(format, args...)}
}

// Configurationf returns an envelope.ErrConfiguration error about where.
func Configurationf(where, format string, args ...any) error {
	return &envelope.Error{Kind: envelope.ErrConfiguration, Where: where, Msg: fmt.Sprintf(format, args...)}
}

// IsOwnColumn reports whether c is one of the outbox table's own columns
// (envelope.OwnColumns).
func IsOwnColumn(c string) bool { return slices.Contains(envelope.OwnColumns, c) }

// MatchAny reports whether topic matches one of ps.
func MatchAny(ps []envelope.TopicPattern, topic string) bool {
	for _, p := range ps {
		if p.Match(topic) {
			return true
		}
	}
	return false
}

// Scanner is *sql.Rows or *sql.Row.
type Scanner = outboxsql.Scanner

// ScanEvent scans one row selected as envelope.EventColumns followed by the
// extra columns named in extra (loaded into Event.Extra).
func ScanEvent(s Scanner, extra []string) (*envelope.Event, error) {
	e, err := outboxsql.ScanEvent(s, extra)
	return (*envelope.Event)(e), err
}

// Placeholder returns the n-th (1-based) bind placeholder of dialect d.
func Placeholder(d envelope.Dialect, n int) string { return outboxsql.Placeholder(string(d), n) }

// MaxBindParams is the most bind parameters one statement may carry on d.
func MaxBindParams(d envelope.Dialect) int { return outboxsql.MaxBindParams(string(d)) }

// TimeArg returns t as a bind argument for dialect d: fixed-width UTC text
// on SQLite (so that times compare correctly as text), UTC to the
// microsecond on MySQL, t itself on PostgreSQL.
func TimeArg(d envelope.Dialect, t time.Time) any { return outboxsql.TimeArg(string(d), t) }

// KeyLockSQL returns a boolean SQL condition, always true, that takes the
// advisory lock of the ordering key keyExpr (a SQL text expression) on
// PostgreSQL, in w's lock class: shared for an event whose key is its
// row's own key and whose row the statement locks (Spec.RowKeyed),
// exclusive otherwise. A statement that writes an event itself, without
// the Writer, puts it where it is evaluated before the event's sequence
// value is drawn: the WHERE clause of
// "INSERT INTO outbox … SELECT … FROM … WHERE <cond>". Writer.Write takes
// the same locks (envelope's doc, "Ordering").
func KeyLockSQL(w *envelope.Writer, keyExpr string, rowKeyed bool) string {
	return outboxsql.KeyLockSQL(outboxsql.LockClassSQL(w.Table().Quoted), keyExpr, rowKeyed)
}

// KeyLocksSQL returns a boolean SQL condition, always true, that takes the
// advisory locks of the ordering keys keysQuery returns (a SQL query of
// one text column, NULLs ignored) on PostgreSQL: each key's bucket once,
// in ascending bucket order (as Writer.Write takes them), shared when
// rowKeyed, exclusive otherwise. Written as the WHERE clause of
// "INSERT INTO outbox … SELECT … FROM rows WHERE <cond>", it is a one-time
// filter: the locks are taken before the first row is read, so before any
// sequence value is drawn. A statement that writes the events of many rows
// itself (gormcapture's fused bulk update) uses it instead of one
// KeyLockSQL per row, which would lock the buckets in row order.
func KeyLocksSQL(w *envelope.Writer, keysQuery string, rowKeyed bool) string {
	return outboxsql.KeyLocksSQL(outboxsql.LockClassSQL(w.Table().Quoted), keysQuery, rowKeyed)
}

// WriteFunc is the signature of Writer.Write.
type WriteFunc = func(ctx context.Context, q envelope.Querier, ms []envelope.Message) (*envelope.WriteResult, error)

// WriteArrays returns w's bulk write for large batches on PostgreSQL
// through a driver that binds Go slices as arrays (pgx's database/sql
// driver; lib/pq does not): each chunk of up to 100,000 messages is one
// INSERT … SELECT FROM unnest($1::text::uuid[], $3::json[], …) binding at
// most nine parameters whatever the number of events. Events, order, key locks, atomicity and
// result are Write's; on SQLite, and for messages with an idempotency key
// or Extra columns, it is Write. The capture packages choose it for a
// batch of several rows when their connection binds arrays.
func WriteArrays(w *envelope.Writer) WriteFunc {
	return func(ctx context.Context, q envelope.Querier, ms []envelope.Message) (*envelope.WriteResult, error) {
		return w.Write(outboxsql.WithArrays(ctx), q, ms)
	}
}

// MigrateTable migrates a table of herald's own (the inbox's) to version
// through ms, its versions oldest first, with the outbox's machinery: one
// transaction under the migration lock, each version recorded in
// envelope.MigrationTable under t's name. A table that exists with no
// record counts as version 1 (its version 1 must be IF NOT EXISTS
// statements).
func MigrateTable(ctx context.Context, db *sql.DB, d envelope.Dialect, t envelope.Table, ms []envelope.Migration, version int) error {
	if version < 0 || version > len(ms) {
		return Configurationf("version", "%d: %s's versions are 0 (no table) to %d", version, t.Name, len(ms))
	}
	return migrateErr(tablemigrate.Migrate(ctx, db, string(d), tablemigrate.Table(t), toMigrations(ms), version, tablemigrate.ExistsAsVersion1))
}

// TableVersion is envelope.Version for a table MigrateTable migrates.
func TableVersion(ctx context.Context, db *sql.DB, d envelope.Dialect, t envelope.Table) (int, error) {
	v, err := tablemigrate.Version(ctx, db, string(d), tablemigrate.Table(t), tablemigrate.ExistsAsVersion1)
	return v, migrateErr(err)
}

// TableMigrationSQL is envelope.MigrationSQL for a table MigrateTable
// migrates; what names the kind of table in the script's first line
// ("inbox").
func TableMigrationSQL(d envelope.Dialect, t envelope.Table, what string, ms []envelope.Migration, version int, down bool) (string, error) {
	if version < 1 || version > len(ms) {
		return "", Configurationf("version", "%d: herald's %s versions are 1 to %d", version, what, len(ms))
	}
	return tablemigrate.Script(string(d), tablemigrate.Table(t), what, tablemigrate.Migration(ms[version-1]), down), nil
}

func toMigrations(ms []envelope.Migration) []tablemigrate.Migration {
	out := make([]tablemigrate.Migration, len(ms))
	for i, m := range ms {
		out[i] = tablemigrate.Migration(m)
	}
	return out
}

// migrateErr makes a migration's wrong-dialect answer an
// envelope.ErrConfiguration about "Dialect", as envelope.Migrate does.
func migrateErr(err error) error {
	var de *tablemigrate.DialectError
	if errors.As(err, &de) {
		return &envelope.Error{Kind: envelope.ErrConfiguration, Where: "Dialect", Msg: de.Msg, Err: de.Err}
	}
	return err
}

// Unmigrated returns err as an envelope.ErrConfiguration naming
// envelope.Migrate when it is the database's answer that w's outbox table
// does not exist (PostgreSQL's undefined_table, 42P01, about it; SQLite's
// "no such table"): a write before the outbox was migrated. Any other
// error, and nil, is returned as it is. Capture paths that insert events
// in a statement of their own pass its error through it.
func Unmigrated(w *envelope.Writer, err error) error {
	if err == nil {
		return nil
	}
	var e *envelope.Error
	if errors.As(err, &e) {
		return err
	}
	t := w.Table().Name
	if msg := outboxsql.Unmigrated(string(w.Dialect()), t, err); msg != "" {
		return &envelope.Error{Kind: envelope.ErrConfiguration, Where: "outbox table " + t, Msg: msg, Err: err}
	}
	return err
}

// PausedTable is the table of paused topics that goes with the outbox
// table t ({base}_paused, in t's schema), quoted.
func PausedTable(t envelope.Table) string { return outboxsql.PausedTable(t.Quoted, t.Base) }

// LikePattern returns p as a pattern for SQL `LIKE ? ESCAPE '\'`: the
// prefix with '\', '%' and '_' escaped, then '%'; for a name, the escaped
// name.
func LikePattern(p envelope.TopicPattern) string { return outboxsql.LikePattern(p.Text, p.Prefix) }
