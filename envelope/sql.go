package envelope

import (
	"context"
	"database/sql"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/outboxsql"
)

// Querier runs statements: *sql.DB, *sql.Tx and *sql.Conn all are one.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Table is a validated outbox table name.
type Table struct {
	Name   string // as given ("herald_outbox", "events.outbox")
	Quoted string // quoted for SQL: "events"."outbox"
	Base   string // the part used to name indexes: events_outbox
}

// ParseTable validates name: an identifier, or on PostgreSQL
// schema.identifier; "" means DefaultTable. Errors match ErrConfiguration.
// On MySQL the name is quoted with backticks (Table.Quoted), which need no
// ANSI_QUOTES in the session's sql_mode.
func ParseTable(d Dialect, name string) (Table, error) {
	if name == "" {
		name = DefaultTable
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 || (len(parts) == 2 && d != Postgres) {
		return Table{}, configurationf("Table", "%q: want an identifier (letters, digits, _), or schema.table on PostgreSQL", name)
	}
	q := make([]string, len(parts))
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return Table{}, configurationf("Table", "%q: %q is not an identifier (letters, digits and _, not starting with a digit, at most 63)", name, p)
		}
		q[i] = d.QuoteIdent(p)
	}
	return Table{Name: name, Quoted: strings.Join(q, "."), Base: strings.Join(parts, "_")}, nil
}

// pausedTable is the table of paused topics that goes with the outbox
// table (schema version 5), written for SQL: {base}_paused in the outbox
// table's schema. The relay leases no event of a topic it lists; the
// admin package writes it.
func (t Table) pausedTable() string { return outboxsql.PausedTable(t.Quoted, t.Base) }

// QuoteIdent quotes a validated identifier for the dialect: backticks on
// MySQL, double quotes elsewhere.
func (d Dialect) QuoteIdent(s string) string {
	if d == MySQL {
		return "`" + s + "`"
	}
	return `"` + s + `"`
}

// keyLockTable is the MySQL table of ordering-key lock rows that goes with
// the outbox table ({base}_keylock; see the comment at mysqlKeyLockBuckets).
func (t Table) keyLockTable() string { return t.Base + "_keylock" }

// placeholder returns the n-th (1-based) bind placeholder of the dialect.
func (d Dialect) placeholder(n int) string { return outboxsql.Placeholder(string(d), n) }

// maxBindParams is the most bind parameters one statement may carry.
func (d Dialect) maxBindParams() int { return outboxsql.MaxBindParams(string(d)) }

// timeArg returns t as a bind argument for the dialect. On SQLite times are
// stored as fixed-width UTC text so that they compare correctly as text.
func (d Dialect) timeArg(t time.Time) any { return outboxsql.TimeArg(string(d), t) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func quote(s string) string { return strconv.Quote(s) }
