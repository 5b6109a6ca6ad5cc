package entcapture

import (
	"context"
	stdsql "database/sql"
	"strings"
	"sync"
	"sync/atomic"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
)

// On SQLite preparing a statement costs about as much as running it (the
// event INSERT's program covers the outbox table's six partial indexes),
// so the small INSERTs of a captured write — its events, and the row
// INSERTs ent sends in the transaction the capture opened (a write
// without a caller transaction) — run as statements prepared once per
// connection and bound to the write's transaction with Tx.StmtContext, as
// gormcapture's do. Only on SQLite; PostgreSQL statements go as before.

// maxPrepared bounds the statements a CaptureDriver keeps prepared (they
// are few: one event INSERT per shape of message).
const maxPrepared = 64

// stmts is a CaptureDriver's cache of prepared statements.
type stmts struct {
	m sync.Map // query -> *stdsql.Stmt
	n atomic.Int32
}

// prepared returns q prepared for tx, or nil when it should run
// unprepared: not SQLite, not an INSERT, too many arguments, the driver
// is not ent's SQL driver, or preparing it on the pool could wait for
// the connection the transaction holds (a pool with MaxOpenConns set).
func (d *CaptureDriver) prepared(ctx context.Context, tx *stdsql.Tx, q string, nargs int) *stdsql.Stmt {
	if d.dialect != envelope.SQLite || nargs > 64 || !strings.HasPrefix(q, "INSERT INTO ") {
		return nil
	}
	v, ok := d.stmts.m.Load(q)
	if !ok {
		drv, ok := d.Driver.(*entsql.Driver)
		if !ok {
			return nil
		}
		db := drv.DB()
		// Preparing on the pool takes another connection than the
		// transaction's: never where that could wait for ours.
		if db.Stats().MaxOpenConnections != 0 || d.stmts.n.Load() >= maxPrepared {
			return nil
		}
		s, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil
		}
		var loaded bool
		if v, loaded = d.stmts.m.LoadOrStore(q, s); loaded {
			closeStmt(s) // another goroutine prepared it first
		} else {
			d.stmts.n.Add(1)
		}
	}
	return tx.StmtContext(ctx, v.(*stdsql.Stmt))
}

func closeStmt(s *stdsql.Stmt) { _ = s.Close() }

// sqlTx returns the database/sql transaction under an ent transaction
// of ent's SQL driver, or nil.
func sqlTx(t dialect.Tx) *stdsql.Tx {
	for { // the wrappers CaptureDriver hands out
		switch w := t.(type) {
		case nopTx:
			t = w.Tx
			continue
		case captureTx:
			t = w.Tx
			continue
		}
		break
	}
	if et, ok := t.(*entsql.Tx); ok {
		if tx, ok := et.ExecQuerier.(*stdsql.Tx); ok {
			return tx
		}
	}
	return nil
}

// preparedQuerier runs the capture's statements in the write's
// transaction, its INSERTs prepared (CaptureDriver.prepared).
type preparedQuerier struct {
	envelope.Querier // the write's own route to its transaction
	d                *CaptureDriver
	tx               *stdsql.Tx
}

func (q preparedQuerier) ExecContext(ctx context.Context, query string, args ...any) (stdsql.Result, error) {
	if s := q.d.prepared(ctx, q.tx, query, len(args)); s != nil {
		defer s.Close() // the transaction's copy; the prepared statement stays
		return s.ExecContext(ctx, args...)
	}
	return q.Querier.ExecContext(ctx, query, args...)
}

func (q preparedQuerier) QueryContext(ctx context.Context, query string, args ...any) (*stdsql.Rows, error) {
	if s := q.d.prepared(ctx, q.tx, query, len(args)); s != nil {
		defer s.Close()                     // the rows keep what they need; the prepared statement stays
		return s.QueryContext(ctx, args...) //nolint:sqlclosecheck // the caller closes the rows
	}
	return q.Querier.QueryContext(ctx, query, args...) //nolint:sqlclosecheck // the caller closes the rows
}

// querier is what the scope's events are written with: on SQLite with a
// CaptureDriver over ent's SQL driver, a preparedQuerier on the write's
// transaction; otherwise the mutation itself.
func (s *scope) querier() envelope.Querier {
	if s.cd == nil || s.d != envelope.SQLite {
		return s.g
	}
	var tx *stdsql.Tx
	switch {
	case s.own != nil:
		tx = sqlTx(s.own)
	case s.g.HeraldTx() != nil:
		tx = sqlTx(s.g.HeraldTx())
	default:
		if t, ok := s.ctx.Value(txKey{}).(*hookTx); ok && t.d == s.cd {
			tx = sqlTx(t.tx)
		}
	}
	if tx == nil {
		return s.g
	}
	return preparedQuerier{Querier: s.g, d: s.cd, tx: tx}
}

// hookSQLTx returns the database/sql transaction of the capture
// transaction ctx carries, on SQLite; nil otherwise.
func (d *CaptureDriver) hookSQLTx(ctx context.Context) *stdsql.Tx {
	t, ok := ctx.Value(txKey{}).(*hookTx)
	if !ok || t.d != d || d.dialect != envelope.SQLite {
		return nil
	}
	return sqlTx(t.tx)
}

// hookPrepared returns query prepared in the capture transaction ctx
// carries, when CaptureDriver.prepared allows; nil otherwise.
func (d *CaptureDriver) hookPrepared(ctx context.Context, query string, nargs int) *stdsql.Stmt {
	tx := d.hookSQLTx(ctx)
	if tx == nil {
		return nil
	}
	return d.prepared(ctx, tx, query, nargs)
}

// queryPrepared runs a query of ent's in the capture transaction ctx
// carries, prepared, when CaptureDriver.prepared allows; done is false
// when the caller should run it as usual.
func (d *CaptureDriver) queryPrepared(ctx context.Context, query string, args, v any) (done bool, err error) {
	argv, ok := args.([]any)
	vr, ok2 := v.(*entsql.Rows)
	if !ok || !ok2 {
		return false, nil
	}
	s := d.hookPrepared(ctx, query, len(argv))
	if s == nil {
		return false, nil
	}
	defer s.Close()                           // the rows keep what they need; the prepared statement stays
	rows, err := s.QueryContext(ctx, argv...) //nolint:rowserrcheck // ent reads the rows, checks Err and closes them
	if err != nil {
		return true, err
	}
	*vr = entsql.Rows{ColumnScanner: rows}
	return true, nil
}

// execPrepared is queryPrepared for Exec.
func (d *CaptureDriver) execPrepared(ctx context.Context, query string, args, v any) (done bool, err error) {
	argv, ok := args.([]any)
	if !ok {
		return false, nil
	}
	vr, isResult := v.(*stdsql.Result)
	if v != nil && !isResult {
		return false, nil
	}
	s := d.hookPrepared(ctx, query, len(argv))
	if s == nil {
		return false, nil
	}
	defer s.Close()
	res, err := s.ExecContext(ctx, argv...)
	if err != nil {
		return true, err
	}
	if vr != nil {
		*vr = res
	}
	return true, nil
}
