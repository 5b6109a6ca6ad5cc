package gormcapture

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strconv"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/wakeup"
)

// A captured write must commit or roll back together with its events:
//
//   - outside a transaction (SkipDefaultTransaction, in the config or a
//     session) the write's statement runs in a transaction the plugin
//     opens around that statement and its events only (inOwnTx), inside
//     gorm:create / gorm:update / gorm:delete: the model's hooks and
//     association saves run outside it, as they run outside any
//     transaction in plain GORM, so a hook that panics or fails cannot
//     leave the plugin's transaction open (holding its connection, row
//     locks, SQLite's write lock) and the write commits as plain GORM's
//     does;
//   - in GORM's own default transaction nothing is needed: GORM rolls it
//     back when a callback added an error;
//   - in the caller's transaction the first captured write of the chain
//     takes a savepoint (issued on the statement's ConnPool, errors
//     checked) and herald:end releases it, or rolls back to it when the
//     chain failed, so an event that fails after its row was written
//     undoes that row even if the caller catches the error and goes on,
//     and a PostgreSQL transaction stays usable.
//
// Nested statements (association saves, the deletes of
// Select(clause.Associations)) inherit the outer statement's
// Statement.Context, which carries the writeCtx: they share its scope and
// take no savepoint of their own.

type writeKey struct{}

// writeCtx is the scope of one top-level write and the statements nested
// in it.
type writeCtx struct {
	owner   *gorm.Statement
	prevCtx context.Context
	raw     gorm.ConnPool // the transaction the write runs in, unprepared

	needSavepoint bool   // in the caller's transaction: a savepoint before the first write
	savepoint     string // taken
	failed        bool   // a nested capture failed: fail the whole write
	writeLocked   bool   // SQLite: the transaction already holds the write lock

	needTx bool // outside a transaction: the statement runs in one of the plugin's (inOwnTx)
}

func writeCtxOf(st *gorm.Statement) *writeCtx {
	if st.Context == nil {
		return nil
	}
	wc, _ := st.Context.Value(writeKey{}).(*writeCtx)
	return wc
}

// begin is herald:begin, before the chain's hooks and SQL.
func (p *Plugin) begin(op envelope.Operation) func(*gorm.DB) {
	return func(db *gorm.DB) {
		if db.Error != nil || db.DryRun {
			return
		}
		st := db.Statement
		sch := st.Schema
		if sch == nil {
			if sch = p.tableModel(st); sch == nil {
				return
			}
		}
		st.ConnPool = p.wrap(st.ConnPool)
		if !p.relevant(db, sch, op) {
			return
		}
		raw := rawTx(st.ConnPool)
		if parent := writeCtxOf(st); parent != nil && raw != nil && parent.raw == raw {
			return // nested in a captured write: its scope covers this one
		}
		wc := &writeCtx{owner: st, prevCtx: st.Context}
		if raw != nil {
			wc.raw = raw
			if _, started := db.InstanceGet("gorm:started_transaction"); !started {
				wc.needSavepoint = !inBatches(raw)
			}
		} else {
			wc.needTx = true
		}
		st.Context = context.WithValue(st.Context, writeKey{}, wc)
	}
}

func inBatches(raw gorm.ConnPool) bool {
	t, ok := raw.(*txConn)
	return ok && t.inBatches()
}

// beginOn begins a transaction on a (wrapped) pool.
func beginOn(ctx context.Context, cp gorm.ConnPool) (gorm.ConnPool, error) {
	switch b := cp.(type) {
	case gorm.ConnPoolBeginner:
		return b.BeginTx(ctx, nil)
	case gorm.TxBeginner:
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return tx, nil
	}
	return nil, gorm.ErrInvalidTransaction
}

// relevant reports whether a write of op on the statement's model needs a
// capture scope; a bad declaration fails the write.
func (p *Plugin) relevant(db *gorm.DB, sch *schema.Schema, op envelope.Operation) bool {
	m := p.modelFor(sch)
	if m.err != nil {
		_ = db.AddError(m.err)
		return false
	}
	if s := m.spec; s != nil {
		switch op {
		case envelope.Inserted:
			if s.Captures(envelope.Inserted) || s.Captures(envelope.Updated) {
				return true
			}
		case envelope.Updated:
			if s.Captures(envelope.Updated) {
				return true
			}
		case envelope.Deleted:
			if s.Captures(envelope.Deleted) || s.Captures(envelope.Updated) {
				return true
			}
		}
	}
	switch op {
	case envelope.Deleted:
		return len(p.cascadesFor(db, sch, db.Statement.Table)) > 0
	case envelope.Updated:
		return len(p.updateCascadesFor(db, sch, db.Statement.Table)) > 0
	}
	return false
}

// ensureSavepoint takes the write's savepoint if it needs one and has
// none yet; called right before the first statement of a capture.
func (p *Plugin) ensureSavepoint(ctx context.Context, wc *writeCtx) error {
	if wc == nil || !wc.needSavepoint || wc.savepoint != "" {
		return nil
	}
	name := "herald_sp" + strconv.FormatUint(p.spSeq.Add(1), 10)
	if _, err := wc.raw.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("herald/gormcapture: savepoint: %w", err)
	}
	wc.savepoint = name
	return nil
}

// writeLock makes a SQLite transaction a writer before a capture reads
// the rows it is about to write (an upsert's conflicting keys, before
// images, cascaded rows), as BEGIN IMMEDIATE would: a no-op UPDATE takes
// the database's write lock, waiting for it under the busy timeout, so no
// other writer can change those rows between the read and the write. In a
// deferred transaction that write would instead fail with SQLITE_BUSY
// when another writer committed after the read. Once per write.
func (p *Plugin) writeLock(ctx context.Context, st *gorm.Statement, cp gorm.ConnPool) error {
	if p.dialect != envelope.SQLite || st.Schema == nil || len(keyColumns(st.Schema)) == 0 {
		return nil
	}
	wc := writeCtxOf(st)
	if wc != nil && wc.writeLocked {
		return nil
	}
	col := quotedColumns(st, keyColumns(st.Schema)[:1], false)
	table, vars := tableSQL(st)
	q := "UPDATE " + table + " SET " + col + "=" + col + " WHERE 0"
	if _, err := own(cp).ExecContext(ctx, q, vars...); err != nil {
		return fmt.Errorf("herald/gormcapture: take the write lock: %w", err)
	}
	if wc != nil {
		wc.writeLocked = true
	}
	return nil
}

// tableSQL renders the statement's table — db.Table's expression when
// there is one, with its arguments — without touching the statement:
// st.Quote of the current table would build a TableExpr into the
// statement's own SQL and return "".
func tableSQL(st *gorm.Statement) (string, []any) {
	t := &gorm.Statement{DB: st.DB, Table: st.Table, TableExpr: st.TableExpr, Schema: st.Schema, Clauses: map[string]clause.Clause{}}
	t.WriteQuoted(clause.Table{Name: clause.CurrentTable})
	return t.SQL.String(), t.Vars
}

// end is herald:end, the chain's last callback: it closes the scope the
// write opened and restores the statement.
func (p *Plugin) end(db *gorm.DB) {
	st := db.Statement
	wc := writeCtxOf(st)
	if wc == nil || wc.owner != st {
		return
	}
	st.Context = wc.prevCtx
	ctx := context.WithoutCancel(wc.prevCtx)
	if wc.failed && db.Error == nil {
		_ = db.AddError(fmt.Errorf("herald/gormcapture: a nested write's capture failed; the write was undone"))
	}
	switch {
	case wc.savepoint != "":
		if db.Error != nil {
			if _, err := wc.raw.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+wc.savepoint); err != nil {
				_ = db.AddError(fmt.Errorf("herald/gormcapture: rollback to savepoint: %w", err))
				return
			}
		}
		if _, err := wc.raw.ExecContext(ctx, "RELEASE SAVEPOINT "+wc.savepoint); err != nil {
			_ = db.AddError(fmt.Errorf("herald/gormcapture: release savepoint: %w", err))
		}
	}
}

// inOwnTx runs a captured statement (run: the INSERT, UPDATE or DELETE,
// its snapshot reads and its events) in a transaction of the plugin's when
// the write began outside any transaction, committing it when run left no
// error and rolling it back otherwise — also when run panics (a Valuer, an
// Extend), before the panic goes on. In GORM's default transaction a panic
// in run rolls that transaction back. Elsewhere it just calls run (a
// caller's transaction is the caller's to roll back).
func (p *Plugin) inOwnTx(db *gorm.DB, run func()) {
	st := db.Statement
	wc := writeCtxOf(st)
	if wc == nil || wc.owner != st || !wc.needTx {
		if _, started := db.InstanceGet("gorm:started_transaction"); started {
			// GORM's default transaction: GORM does not roll it back on a
			// panic, so a panic in the capture (a user's Extend, TopicFunc)
			// would leave it open with its connection; roll it back here.
			finished := false
			defer func() {
				if !finished {
					if tc, ok := st.ConnPool.(gorm.TxCommitter); ok {
						_ = tc.Rollback()
					}
				}
			}()
			run()
			finished = true
			return
		}
		run()
		return
	}
	wc.needTx = false
	prev := st.ConnPool
	tx, err := beginOn(st.Context, prev)
	if err != nil {
		_ = db.AddError(fmt.Errorf("herald/gormcapture: begin: %w", err))
		return
	}
	tc := tx.(gorm.TxCommitter)
	st.ConnPool, wc.raw = tx, rawTx(tx)
	finished := false
	defer func() {
		st.ConnPool, wc.raw = prev, nil
		if !finished { // run panicked
			_ = tc.Rollback()
		}
	}()
	run()
	finished = true
	if db.Error != nil || wc.failed {
		_ = tc.Rollback()
	} else if err := tc.Commit(); err != nil {
		_ = db.AddError(fmt.Errorf("herald/gormcapture: commit: %w", err))
	}
}

// fail marks the write's scope failed, so the outer write fails too even
// if a hook swallowed the nested error. An error GORM already added (the
// statement's own error, returned by the capturePool to gorm:update or
// gorm:delete) is not added a second time.
func fail(db *gorm.DB, err error) {
	if !holds(db.Error, err) {
		_ = db.AddError(err)
	}
	if wc := writeCtxOf(db.Statement); wc != nil {
		wc.failed = true
	}
}

// signal records the topics of events just written: a TxSignaler is
// signalled inside the transaction (once per topic per transaction);
// otherwise the topics wait for the commit of the plugin's transaction,
// or are signalled at once after an autocommit write. A transaction begun
// on a pool the plugin does not own cannot be seen to commit: its topics
// are left to the relays' polling, with a warning logged once.
func (p *Plugin) signal(ctx context.Context, cp gorm.ConnPool, topics []string) error {
	w := p.cfg.Wakeup
	if w == nil || len(topics) == 0 {
		return nil
	}
	t, inTx := scopeOf(cp)
	if ts, ok := w.(wakeup.TxSignaler); ok && inTx {
		fresh := topics
		if t != nil {
			fresh = t.fresh(topics)
		}
		if len(fresh) == 0 {
			return nil
		}
		if err := ts.SignalTx(ctx, own(cp), fresh); err != nil {
			return fmt.Errorf("herald/gormcapture: wakeup in transaction: %w", err)
		}
		return nil
	}
	switch {
	case t != nil:
		t.add(topics)
	case !inTx:
		p.signalNow(topics)
	default:
		if p.foreignWarned.CompareAndSwap(false, true) {
			p.logger().Warn("herald/gormcapture: events written in a transaction begun on a pool the plugin does not wrap; "+
				"their wakeup is left to the relays' polling (install the plugin with db.Use before dbresolver and before deriving sessions, "+
				"and do not begin transactions inside db.Connection)", "topics", topics)
		}
	}
	return nil
}

// querier adapts a gorm.ConnPool to envelope.Querier for herald's own
// statements (the event INSERTs): they run on own(ConnPool), small
// INSERTs prepared on SQLite (see Plugin.query).
type querier struct {
	gorm.ConnPool
	p *Plugin
}

func (q querier) ExecContext(ctx context.Context, s string, args ...any) (sql.Result, error) {
	return own(q.ConnPool).ExecContext(ctx, s, args...)
}

func (q querier) QueryContext(ctx context.Context, s string, args ...any) (*sql.Rows, error) {
	return q.p.query(ctx, own(q.ConnPool), s, args)
}

// own returns the connection herald runs its own statements on (event
// INSERTs, locks, before-reads, NOTIFY): cp without GORM's
// prepared-statement wrappers, so that with PrepareStmt they neither
// enter the caller's statement cache nor evict the caller's statements
// from it. The caller's own statement keeps going through cp.
func own(cp gorm.ConnPool) gorm.ConnPool {
	for {
		switch c := cp.(type) {
		case *gorm.PreparedStmtTX:
			cp = c.Tx
		case *gorm.PreparedStmtDB:
			cp = c.ConnPool
		case *capturePool:
			cp = c.ConnPool
		default:
			return cp
		}
	}
}

// holds reports whether err is target itself or wraps it: identity, not
// errors.Is, whose Is methods (envelope.Error matches by kind) would take
// another error of the same kind for this one.
func holds(err, target error) bool {
	if err == nil || target == nil || !reflect.TypeOf(target).Comparable() {
		return false
	}
	for {
		if reflect.TypeOf(err).Comparable() && err == target { //nolint:errorlint // identity on purpose: this walks the chain itself
			return true
		}
		switch u := err.(type) { //nolint:errorlint // unwraps one level at a time, by hand
		case interface{ Unwrap() error }:
			if err = u.Unwrap(); err == nil {
				return false
			}
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if e != nil && holds(e, target) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
}
