package entcapture

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
)

// RETURNING for captured updates and deletes, as gormcapture adds it to
// GORM's statements.
//
// The capture hook marks the context of a captured UPDATE or DELETE
// (withReturning) with the table and the columns its events hold. The
// driver wrapper — CaptureDriver.Exec, and the transactions CaptureDriver
// hands out (captureTx) — turns ent's Exec of that table's statement
// into a query with RETURNING those columns, keeps the rows for the hook,
// and hands ent a result whose RowsAffected is the number of rows
// returned: exactly what the UPDATE or DELETE itself reports (both count
// the rows the statement wrote). The after images of an update, and the
// before images of a delete, thus come with the write, in the same
// statement. Without the wrapper (a caller transaction on a client not
// opened on Driver) the hook reads them as before.

// returning is one captured write's request to the driver wrapper.
type returning struct {
	d     *CaptureDriver
	verb  string // "UPDATE " or "DELETE FROM "
	table string
	cols  []string
	scan  func(*stdsql.Rows, []string) ([]map[string]any, error)

	done bool             // the statement ran with RETURNING
	rows []map[string]any // what it returned
}

type returningKey struct{}

// withReturning returns ctx carrying r, for the statements ent runs for
// one mutation.
func withReturning(ctx context.Context, r *returning) context.Context {
	return context.WithValue(ctx, returningKey{}, r)
}

// matches reports whether query is ent's statement for the request: the
// first UPDATE (DELETE) of the table, without a RETURNING of its own.
func (r *returning) matches(query string) bool {
	if r.done {
		return false
	}
	rest, ok := strings.CutPrefix(query, r.verb)
	if !ok || strings.Contains(rest, " RETURNING ") {
		return false
	}
	ident, _, _ := strings.Cut(rest, " ")
	if i := strings.LastIndexByte(ident, '.'); i >= 0 { // "schema"."table"
		ident = ident[i+1:]
	}
	return unquote(ident) == r.table
}

func (r *returning) list() string {
	q := make([]string, len(r.cols))
	for i, c := range r.cols {
		q[i] = names.Quote(c)
	}
	return strings.Join(q, ", ")
}

// execReturning runs ent's Exec of query on ex as a query with RETURNING
// when ctx carries this driver's request for it; handled reports whether
// it did (otherwise the caller runs the Exec as it is).
func (d *CaptureDriver) execReturning(ctx context.Context, ex dialect.ExecQuerier, query string, args, v any) (handled bool, err error) {
	r, _ := ctx.Value(returningKey{}).(*returning)
	if r == nil || r.d != d || !r.matches(query) {
		return false, nil
	}
	res, ok := v.(*stdsql.Result)
	if v != nil && !ok {
		return false, nil // not ent's Exec of a write: let the driver say what is wrong
	}
	r.done = true
	var rows sql.Rows
	if err := ex.Query(ctx, query+" RETURNING "+r.list(), args, &rows); err != nil {
		return true, err
	}
	std, ok := rows.ColumnScanner.(*stdsql.Rows)
	if !ok {
		_ = rows.Close()
		return true, fmt.Errorf("herald/entcapture: %s: the driver returned rows of type %T, not *sql.Rows", r.table, rows.ColumnScanner)
	}
	got, err := r.scan(std, r.cols)
	if cerr := std.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return true, fmt.Errorf("herald/entcapture: %s: read the rows the write returned: %w", r.table, err)
	}
	r.rows = got
	if res != nil {
		*res = returnedRows(len(got))
	}
	return true, nil
}

// returnedRows is the result ent sees for a statement run with RETURNING:
// the rows it wrote.
type returnedRows int64

func (n returnedRows) RowsAffected() (int64, error) { return int64(n), nil }

func (returnedRows) LastInsertId() (int64, error) {
	return 0, errors.New("herald/entcapture: LastInsertId is not available for an UPDATE or DELETE run with RETURNING")
}

// errNotReturned: a captured write whose statement did not reach the
// driver wrapper, so its rows are unknown. It rolls the write back.
func errNotReturned(w *write) error {
	return fmt.Errorf("herald/entcapture: %s: ent's %s of %s did not run through entcapture.Driver, so its rows are unknown; the write is rolled back",
		w.sch.Name, strings.TrimSpace(strings.TrimSuffix(w.verb(), " FROM ")), w.sch.Table)
}

func (w *write) verb() string {
	if w.op == envelope.Deleted {
		return "DELETE FROM "
	}
	return "UPDATE "
}

// withoutReturning holds the drivers on which the capture reads rows
// instead of asking for RETURNING, as without the wrapper: set only by
// tests and benchmarks (export_test.go), to compare the two paths.
var withoutReturning sync.Map // *CaptureDriver -> struct{}

// returningRequest is the request of write w for the columns cols.
func (w *write) returningRequest(s *scope, cols []string) *returning {
	return &returning{d: s.cd, verb: w.verb(), table: w.sch.Table, cols: cols, scan: scanStored(w.g)}
}

// returns reports whether the write's rows come from a RETURNING the
// driver wrapper adds: the client is on Driver (every statement of the
// write passes through it), the write is captured, and, for an update,
// it sets a column of its own (otherwise ent sends no UPDATE).
func (w *write) returns(s *scope, changed []string, need bool) bool {
	if s.cd == nil || !need || !w.spec.Captures(w.op) || s.d == envelope.MySQL {
		return false // MySQL has no RETURNING: the rows are read around the write
	}
	if _, off := withoutReturning.Load(s.cd); off {
		return false
	}
	return w.op == envelope.Deleted || len(changed) > 0
}
