package entcapture

import (
	"context"
	stdsql "database/sql"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"entgo.io/ent/dialect"

	"github.com/heraldgo/herald/entcapture/internal/rtstate"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/wakeup"
)

// Config configures capture for the clients opened on a CaptureDriver.
// The zero value is usable.
type Config struct {
	// Table is the outbox table; "" = envelope.DefaultTable.
	Table string
	// Namespace is the {namespace} (and the model label's prefix) of
	// captured schemas whose Options set none; "" = no namespace.
	Namespace string
	// Wakeup, when set, is signalled with the topics of the events a
	// transaction wrote, once it commits (never after a rollback); a
	// wakeup.TxSignaler is signalled inside the transaction instead.
	// nil = no signals; relays poll.
	Wakeup wakeup.Wakeup
	// Logger receives warnings (a failed wakeup signal). nil = none.
	Logger *slog.Logger
	// Options, by schema name ("Loan"), replace the Options of that
	// schema's Mixin for clients on this driver: capture declared without
	// touching the schema. nil = every schema as its Mixin declares.
	Options map[string]envelope.Options
}

// CaptureDriver is the dialect.Driver that Driver returns.
type CaptureDriver struct {
	dialect.Driver
	cfg Config

	once    sync.Once
	writer  *envelope.Writer
	dialect envelope.Dialect
	arrays  bool  // PostgreSQL through pgx: binds Go slices as arrays
	stmts   stmts // SQLite: the capture's INSERTs, prepared (prepared.go)
	err     error
	cfgErr  error // a bad Config, found by Driver: every statement fails with it
}

// Driver wraps an ent driver so that a captured write made without a
// caller transaction runs, with its events, in one transaction that the
// capture hook opens: the wrapper routes the statements of a context that
// carries that transaction into it. Install it once, where the client is
// opened:
//
//	client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.Postgres, db))))
//
// The wrapper also runs a captured UPDATE or DELETE with a RETURNING of
// the rows its events hold (in the hook's transaction and in one begun
// with client.Tx), so the capture reads nothing after the write.
//
// cfg (at most one) sets the outbox table, the default namespace, the
// wakeup and per-schema Options. Two Configs, or an Options key that is
// no captured schema's name, are found by Driver itself: Err returns
// the envelope.ErrConfiguration naming it, and every statement on the
// driver (the migration first, reads too) and every Enqueue fails with
// it, so a bad Config cannot go unnoticed. Without the wrapper a captured write outside client.Tx fails
// with envelope.ErrConfiguration; inside client.Tx capture works either
// way, but only the wrapper knows cfg.
func Driver(drv dialect.Driver, cfg ...Config) *CaptureDriver {
	d := &CaptureDriver{Driver: drv}
	if len(cfg) > 0 {
		d.cfg = cfg[0]
	}
	if len(cfg) > 1 {
		d.cfgErr = outbox.Configurationf("entcapture.Driver", "at most one Config, got %d (merge them into one)", len(cfg))
	} else {
		d.cfgErr = checkOptions(d.cfg.Options)
	}
	return d
}

// Err returns the envelope.ErrConfiguration of a bad Config given to
// Driver (two Configs; an Options key that is no captured schema's
// name), or nil. Every statement on the driver fails with it.
func (d *CaptureDriver) Err() error { return d.cfgErr }

// captureOf finds the CaptureDriver under drv: drv itself, or under the
// drivers that wrap it (client.Debug()'s dialect.DebugDriver, or any
// driver with an Unwrap() dialect.Driver method); nil if there is none.
func captureOf(drv dialect.Driver) *CaptureDriver {
	for range 16 {
		switch d := drv.(type) {
		case *CaptureDriver:
			return d
		case *dialect.DebugDriver:
			drv = d.Driver
		case interface{ Unwrap() dialect.Driver }:
			drv = d.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// Unwrap returns the wrapped driver.
func (d *CaptureDriver) Unwrap() dialect.Driver { return d.Driver }

// Config returns the driver's configuration.
func (d *CaptureDriver) Config() Config { return d.cfg }

// checkOptions fails for a name in Options that is no captured schema's
// (a misspelling would otherwise silently leave the schema's Mixin
// Options in force). Without registered schemas (glue generated before
// entcapturert.Register) it cannot know, and lets every name pass.
func checkOptions(opts map[string]envelope.Options) error {
	registered := &rtstate.Registered
	registered.Lock()
	defer registered.Unlock()
	if len(registered.Names) == 0 {
		return nil
	}
	var bad []string
	for name := range opts {
		if !registered.Names[name] {
			bad = append(bad, name)
		}
	}
	if len(bad) == 0 {
		for _, name := range slices.Sorted(maps.Keys(opts)) {
			o := opts[name]
			if cols := registered.Cols[name]; o.Tenant != "" && !slices.Contains(cols, o.Tenant) {
				return outbox.Configurationf("entcapture.Config.Options["+strconv.Quote(name)+"].Tenant", "no column %q in schema %s (columns: %v)", o.Tenant, name, cols)
			}
		}
		return nil
	}
	slices.Sort(bad)
	known := slices.Sorted(maps.Keys(registered.Names))
	return outbox.Configurationf("entcapture.Config.Options", "no captured schema named %q (Options is keyed by the Go name of a schema that uses entcapture.Mixin; captured schemas: %s)",
		bad[0], strings.Join(known, ", "))
}

// init resolves the dialect and the writer once; it fails for a bad
// Config (two of them, or Options naming no captured schema).
func (d *CaptureDriver) init() error {
	d.once.Do(func() {
		if d.err = d.cfgErr; d.err != nil {
			return
		}
		d.dialect, d.err = dialectOf(d.Dialect())
		if d.err != nil {
			return
		}
		d.writer, d.err = envelope.NewWriter(d.dialect, d.cfg.Table)
		if db, ok := d.Driver.(interface{ DB() *stdsql.DB }); ok && d.dialect == envelope.Postgres {
			d.arrays = reflect.TypeOf(db.DB().Driver()).String() == "*stdlib.Driver" // github.com/jackc/pgx/v5/stdlib
		}
	})
	return d.err
}

func dialectOf(name string) (envelope.Dialect, error) {
	switch name {
	case dialect.Postgres:
		return envelope.Postgres, nil
	case dialect.SQLite:
		return envelope.SQLite, nil
	case dialect.MySQL:
		return envelope.MySQL, nil // MySQL 8.0 and MariaDB 10.6+ (capture_mysql.go)
	}
	return "", &envelope.Error{Kind: envelope.ErrUnsupported, Where: "entcapture", Msg: fmt.Sprintf("dialect %q is not supported (want postgres, sqlite3 or mysql)", name)}
}

type txKey struct{}

// hookTx is a transaction the capture hook opened, carried in the
// context of the write's statements.
type hookTx struct {
	d      *CaptureDriver
	tx     dialect.Tx
	topics []string // of nested writes, signalled after the commit
}

// hookTxOf returns the capture transaction of ctx: the hook's, or the one
// a fused create fell back to.
func (d *CaptureDriver) hookTxOf(ctx context.Context) *hookTx {
	if t, ok := ctx.Value(txKey{}).(*hookTx); ok && t.d == d {
		return t
	}
	if f, ok := ctx.Value(fuseKey{}).(*fusion); ok && f != nil && f.tx != nil && f.cd == d {
		return f.tx
	}
	return nil
}

func (d *CaptureDriver) route(ctx context.Context) dialect.ExecQuerier {
	if t := d.hookTxOf(ctx); t != nil {
		return t.tx
	}
	return d.Driver
}

// Exec implements dialect.Driver, in the context's capture transaction
// when there is one (and, for a fused create's INSERT, with its event:
// see fuse.go).
func (d *CaptureDriver) Exec(ctx context.Context, query string, args, v any) error {
	if d.cfgErr != nil {
		return d.cfgErr
	}
	query, args, err := d.rewrite(ctx, query, args, true)
	if err != nil {
		return err
	}
	// A pinned write on MySQL (capture_mysql.go).
	query, args = pinJoin(query, args)
	ex := d.route(ctx)
	if ok, err := d.execUpsert(ctx, ex, query, args, v); ok { // upsert.go
		return err
	}
	if ok, err := d.execReturning(ctx, ex, query, args, v); ok { // returning.go
		return err
	}
	if done, err := d.execPrepared(ctx, query, args, v); done {
		return err
	}
	return ex.Exec(ctx, query, args, v)
}

// Query implements dialect.Driver, in the context's capture transaction
// when there is one (and, for a fused create's INSERT, with its event).
func (d *CaptureDriver) Query(ctx context.Context, query string, args, v any) error {
	if d.cfgErr != nil {
		return d.cfgErr
	}
	query, args, err := d.rewrite(ctx, query, args, false)
	if err != nil {
		return err
	}
	if ok, err := d.queryUpsert(ctx, d.route(ctx), query, args, v); ok { // upsert.go
		return err
	}
	if done, err := d.queryPrepared(ctx, query, args, v); done {
		return err
	}
	return d.route(ctx).Query(ctx, query, args, v)
}

// Tx implements dialect.Driver. In a capture transaction it returns that
// transaction with no-op Commit and Rollback (as ent's own transactional
// driver does): ent's internal transactions become part of the write's.
// Otherwise it begins a transaction on the wrapped driver, whose
// statements entcapture sees (client.Tx: a captured create in it is
// written with its event by one statement).
func (d *CaptureDriver) Tx(ctx context.Context) (dialect.Tx, error) {
	if d.cfgErr != nil {
		return nil, d.cfgErr
	}
	if t := d.hookTxOf(ctx); t != nil {
		return captureTx{nopTx{t.tx}, d}, nil
	}
	tx, err := d.Driver.Tx(ctx)
	if err != nil {
		return nil, err
	}
	return captureTx{tx, d}, nil
}

// BeginTx starts a transaction with options, when the wrapped driver can
// (ent's client.BeginTx uses it).
func (d *CaptureDriver) BeginTx(ctx context.Context, opts *stdsql.TxOptions) (dialect.Tx, error) {
	if d.cfgErr != nil {
		return nil, d.cfgErr
	}
	if t := d.hookTxOf(ctx); t != nil {
		return captureTx{nopTx{t.tx}, d}, nil
	}
	b, ok := d.Driver.(interface {
		BeginTx(context.Context, *stdsql.TxOptions) (dialect.Tx, error)
	})
	if !ok {
		return nil, fmt.Errorf("herald/entcapture: driver %T does not support BeginTx", d.Driver)
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return captureTx{tx, d}, nil
}

type stdExecQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (stdsql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*stdsql.Rows, error)
}

func (d *CaptureDriver) std(ctx context.Context) (stdExecQuerier, error) {
	if d.cfgErr != nil {
		return nil, d.cfgErr
	}
	if err := d.other(ctx); err != nil {
		return nil, err
	}
	var x any = d.Driver
	if t := d.hookTxOf(ctx); t != nil {
		x = t.tx
	}
	q, ok := x.(stdExecQuerier)
	if !ok {
		return nil, fmt.Errorf("herald/entcapture: %T has no ExecContext/QueryContext (use an entgo.io/ent/dialect/sql driver)", x)
	}
	return q, nil
}

// ExecContext runs a statement, in the context's capture transaction when
// there is one (the sql/execquery feature's generated methods call it).
func (d *CaptureDriver) ExecContext(ctx context.Context, query string, args ...any) (stdsql.Result, error) {
	q, err := d.std(ctx)
	if err != nil {
		return nil, err
	}
	return q.ExecContext(ctx, query, args...)
}

// QueryContext runs a query, in the context's capture transaction when
// there is one.
func (d *CaptureDriver) QueryContext(ctx context.Context, query string, args ...any) (*stdsql.Rows, error) {
	q, err := d.std(ctx)
	if err != nil {
		return nil, err
	}
	return q.QueryContext(ctx, query, args...)
}

// nopTx is a transaction whose Commit and Rollback are left to its owner.
type nopTx struct{ dialect.Tx }

func (nopTx) Commit() error   { return nil }
func (nopTx) Rollback() error { return nil }

func (t nopTx) ExecContext(ctx context.Context, query string, args ...any) (stdsql.Result, error) {
	q, ok := t.Tx.(stdExecQuerier)
	if !ok {
		return nil, fmt.Errorf("herald/entcapture: %T has no ExecContext", t.Tx)
	}
	return q.ExecContext(ctx, query, args...)
}

func (t nopTx) QueryContext(ctx context.Context, query string, args ...any) (*stdsql.Rows, error) {
	q, ok := t.Tx.(stdExecQuerier)
	if !ok {
		return nil, fmt.Errorf("herald/entcapture: %T has no QueryContext", t.Tx)
	}
	return q.QueryContext(ctx, query, args...)
}

// captureTx is a transaction begun on the CaptureDriver: its statements
// are the driver's, for a fused create (see fuse.go) and for the
// RETURNING of a captured update or delete (returning.go).
type captureTx struct {
	dialect.Tx
	d *CaptureDriver
}

func (t captureTx) Exec(ctx context.Context, query string, args, v any) error {
	query, args, err := t.d.rewrite(ctx, query, args, true)
	if err != nil {
		return err
	}
	// A pinned write on MySQL (capture_mysql.go).
	query, args = pinJoin(query, args)
	if ok, err := t.d.execUpsert(ctx, t.Tx, query, args, v); ok { // upsert.go
		return err
	}
	if ok, err := t.d.execReturning(ctx, t.Tx, query, args, v); ok { // returning.go
		return err
	}
	return t.Tx.Exec(ctx, query, args, v)
}

func (t captureTx) Query(ctx context.Context, query string, args, v any) error {
	query, args, err := t.d.rewrite(ctx, query, args, false)
	if err != nil {
		return err
	}
	if ok, err := t.d.queryUpsert(ctx, t.Tx, query, args, v); ok { // upsert.go
		return err
	}
	return t.Tx.Query(ctx, query, args, v)
}

func (t captureTx) ExecContext(ctx context.Context, query string, args ...any) (stdsql.Result, error) {
	q, ok := t.Tx.(stdExecQuerier)
	if !ok {
		return nil, fmt.Errorf("herald/entcapture: %T has no ExecContext", t.Tx)
	}
	if err := t.d.other(ctx); err != nil {
		return nil, err
	}
	return q.ExecContext(ctx, query, args...)
}

func (t captureTx) QueryContext(ctx context.Context, query string, args ...any) (*stdsql.Rows, error) {
	q, ok := t.Tx.(stdExecQuerier)
	if !ok {
		return nil, fmt.Errorf("herald/entcapture: %T has no QueryContext", t.Tx)
	}
	if err := t.d.other(ctx); err != nil {
		return nil, err
	}
	return q.QueryContext(ctx, query, args...)
}

// bindsArrays reports whether many events can be written with one unnest
// INSERT (envelope.Writer.WriteCapturedArrays).
func (d *CaptureDriver) bindsArrays() bool { return d.arrays }
