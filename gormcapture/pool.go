package gormcapture

import (
	"context"
	"database/sql"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/wakeup"
)

// The after-commit machinery: GORM runs no callback around db.Begin,
// Commit, Rollback or db.Transaction, so the plugin learns of them by
// owning the connection pool. Initialize wraps GORM's ConnPool (inside
// GORM's own PreparedStmtDB, never around it) in a pool whose BeginTx
// returns a txConn: a full gorm.Tx that keeps a stack of pending wakeup
// topics, one level for the transaction and one per open savepoint, and
// fires them only when the real Commit returned nil. The design and every
// trap it avoids are in the project's notes/gorm-aftercommit.md.

// pool wraps the *sql.DB (or *sql.Conn, or a pool of another plugin) that
// GORM runs statements on. It is a gorm.ConnPoolBeginner and deliberately
// not a TxCommitter, so GORM never mistakes it for a transaction.
type pool struct {
	gorm.ConnPool
	p *Plugin
}

var (
	_ gorm.ConnPoolBeginner = (*pool)(nil)
	_ gorm.GetDBConnector   = (*pool)(nil)
	_ gorm.Tx               = (*txConn)(nil)
	_ gorm.GetDBConnector   = (*txConn)(nil)
)

// BeginTx begins a transaction on the wrapped pool and returns it wrapped.
// On error it returns a nil interface, as GORM expects.
func (c *pool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	var tx gorm.Tx
	switch b := c.ConnPool.(type) {
	case gorm.TxBeginner:
		t, err := b.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		tx = t
	case gorm.ConnPoolBeginner:
		t, err := b.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		gt, ok := t.(gorm.Tx)
		if !ok {
			if tc, ok := t.(gorm.TxCommitter); ok {
				_ = tc.Rollback()
			}
			return nil, gorm.ErrInvalidTransaction
		}
		tx = gt
	default:
		return nil, gorm.ErrInvalidTransaction
	}
	t := &txConn{Tx: tx, parent: c, p: c.p, levels: []*level{{}}}
	// CreateInBatches wraps its batches in db.Transaction and rolls it back
	// on the first failing batch, so its batches need no savepoint each.
	t.levels[0].batches = calledFromCreateInBatches()
	return t, nil
}

// GetDBConn returns the *sql.DB underneath, for db.DB().
func (c *pool) GetDBConn() (*sql.DB, error) {
	switch in := c.ConnPool.(type) {
	case *sql.DB:
		return in, nil
	case gorm.GetDBConnector:
		return in.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
}

// Ping forwards to the wrapped pool (gorm.Open and dbresolver ping).
func (c *pool) Ping() error {
	if p, ok := c.ConnPool.(interface{ Ping() error }); ok {
		return p.Ping()
	}
	return nil
}

// The pool settings dbresolver forwards to each of its sources.

func (c *pool) SetMaxOpenConns(n int) {
	if d, ok := c.ConnPool.(interface{ SetMaxOpenConns(int) }); ok {
		d.SetMaxOpenConns(n)
	}
}

func (c *pool) SetMaxIdleConns(n int) {
	if d, ok := c.ConnPool.(interface{ SetMaxIdleConns(int) }); ok {
		d.SetMaxIdleConns(n)
	}
}

func (c *pool) SetConnMaxLifetime(d time.Duration) {
	if s, ok := c.ConnPool.(interface{ SetConnMaxLifetime(time.Duration) }); ok {
		s.SetConnMaxLifetime(d)
	}
}

func (c *pool) SetConnMaxIdleTime(d time.Duration) {
	if s, ok := c.ConnPool.(interface{ SetConnMaxIdleTime(time.Duration) }); ok {
		s.SetConnMaxIdleTime(d)
	}
}

// level is one commit scope: the transaction itself, or a savepoint in it.
type level struct {
	name    string        // savepoint name; "" for the transaction
	topics  wakeup.Topics // topics of events written at this level
	batches bool          // opened by CreateInBatches (see BeginTx)
}

// txConn is a transaction begun on a pool: a full gorm.Tx (StmtContext
// included, or Session{PrepareStmt: true} would run outside it), which
// fires its topics after a successful Commit.
type txConn struct {
	gorm.Tx
	parent *pool
	p      *Plugin

	mu     sync.Mutex
	done   bool
	levels []*level // [0] = the transaction, then one per open savepoint
}

// GetDBConn returns the pool's *sql.DB, for db.DB() inside a transaction.
func (t *txConn) GetDBConn() (*sql.DB, error) { return t.parent.GetDBConn() }

// Commit commits and, only when the commit succeeded, signals the
// coalesced topics of every level still open. A second Commit fires
// nothing.
func (t *txConn) Commit() error {
	err := t.Tx.Commit()
	topics := t.finish()
	if err == nil && len(topics) > 0 {
		t.p.fire(topics)
	}
	return err
}

// Rollback rolls back and forgets the pending topics.
func (t *txConn) Rollback() error {
	err := t.Tx.Rollback()
	t.finish()
	return err
}

func (t *txConn) finish() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil
	}
	t.done = true
	var all wakeup.Topics
	for _, l := range t.levels {
		all.Add(l.topics.List()...)
	}
	t.levels = nil
	return all.List()
}

// ExecContext runs a statement in the transaction and tracks the
// savepoints it opens, rolls back to or releases. GORM's SavePoint and
// RollbackTo unwrap *gorm.PreparedStmtTX, so they arrive here unprepared.
func (t *txConn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := t.Tx.ExecContext(ctx, q, args...)
	if err == nil && isSavepointSQL(q) {
		t.savepointSQL(q)
	}
	return res, err
}

// add records topics at the innermost level.
func (t *txConn) add(topics []string) {
	if len(topics) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || len(t.levels) == 0 {
		return
	}
	t.levels[len(t.levels)-1].topics.Add(topics...)
}

// fresh returns the topics not yet recorded at any level, and records
// them at the innermost one: what a TxSignaler still has to NOTIFY.
func (t *txConn) fresh(topics []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || len(t.levels) == 0 {
		return topics
	}
	var out []string
next:
	for _, s := range topics {
		for _, l := range t.levels {
			for _, have := range l.topics.List() {
				if have == s {
					continue next
				}
			}
		}
		out = append(out, s)
	}
	t.levels[len(t.levels)-1].topics.Add(out...)
	return out
}

// inBatches reports whether the innermost level was opened by a
// CreateInBatches that is still running. GORM never releases the
// savepoint CreateInBatches takes in a caller's transaction, so its level
// stays on the stack after it returned: the stack walk tells a write of
// its batches from a later write, which needs a savepoint of its own. It
// runs only while such a level is innermost.
func (t *txConn) inBatches() bool {
	t.mu.Lock()
	batches := len(t.levels) > 0 && t.levels[len(t.levels)-1].batches
	t.mu.Unlock()
	return batches && calledFromCreateInBatches()
}

// savepointPrefixes are the savepoint statements, as both databases
// spell them (ROLLBACK [TRANSACTION|WORK] TO [SAVEPOINT] n, RELEASE
// [SAVEPOINT] n).
var savepointPrefixes = [...]string{"SAVEPOINT ", "ROLLBACK TO ", "ROLLBACK TRANSACTION TO ", "ROLLBACK WORK TO ", "RELEASE "}

func isSavepointSQL(q string) bool {
	q = strings.TrimLeft(q, " \t\r\n")
	for _, p := range savepointPrefixes {
		if len(q) >= len(p) && strings.EqualFold(q[:len(p)], p) {
			return true
		}
	}
	return false
}

// savepointSQL updates the level stack for a savepoint statement that
// succeeded:
//
//	SAVEPOINT n                      push a level named n
//	ROLLBACK [TRANSACTION] TO [SAVEPOINT] n  drop the levels above n and n's topics (n stays open)
//	RELEASE [SAVEPOINT] n            merge n and the levels above it into the level below
//
// Names are compared as the database compares them (see savepointName).
// A name not on the stack is ignored: the database would have refused it.
func (t *txConn) savepointSQL(q string) {
	f := strings.Fields(strings.TrimRight(strings.TrimSpace(q), ";"))
	if len(f) < 2 {
		return
	}
	var kind string
	switch {
	case strings.EqualFold(f[0], "SAVEPOINT") && len(f) == 2:
		kind = "push"
	case strings.EqualFold(f[0], "ROLLBACK") && len(f) >= 3 && slices.ContainsFunc(f[1:3], func(w string) bool { return strings.EqualFold(w, "TO") }):
		kind = "rollback"
	case strings.EqualFold(f[0], "RELEASE"):
		kind = "release"
	default:
		return
	}
	name := t.p.savepointName(f[len(f)-1])
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	if kind == "push" {
		t.levels = append(t.levels, &level{name: name, batches: calledFromCreateInBatches()})
		return
	}
	i := len(t.levels) - 1
	for ; i > 0 && t.levels[i].name != name; i-- {
	}
	if i == 0 {
		return
	}
	switch kind {
	case "rollback":
		t.levels = t.levels[:i+1]
		t.levels[i].topics = wakeup.Topics{}
	case "release":
		below := t.levels[i-1]
		for _, l := range t.levels[i:] {
			below.topics.Add(l.topics.List()...)
		}
		t.levels = t.levels[:i]
	}
}

// savepointName is a savepoint's identity as the database sees it:
// SQLite ignores the case of every name; PostgreSQL folds an unquoted
// name to lower case and keeps a quoted one ("Sp2") as written.
func (p *Plugin) savepointName(n string) string {
	quoted := len(n) >= 2 && (n[0] == '"' && n[len(n)-1] == '"' || n[0] == '`' && n[len(n)-1] == '`')
	if quoted {
		n = strings.ReplaceAll(n[1:len(n)-1], `""`, `"`)
	}
	if p.dialect != envelope.Postgres || !quoted { // SQLite and MySQL: names are case-insensitive
		n = strings.ToLower(n)
	}
	return n
}

// calledFromCreateInBatches reports whether gorm's CreateInBatches is on
// the stack: it is the only caller of db.Transaction inside GORM itself,
// and the transaction (or savepoint) it opens is rolled back as soon as a
// batch fails, so statements directly in it need no savepoint of their
// own. Called once per transaction or savepoint, never per row.
//
// A return address always stands for the same functions, so each is
// symbolized once (inBatchesPC): walking the frames of every begin was a
// tenth of the plugin's Go time on a captured Create, and it was paid by
// every transaction through the plugin's pool, captured or not
// (BenchmarkCreate).
func calledFromCreateInBatches() bool {
	var pcs [24]uintptr
	n := runtime.Callers(3, pcs[:])
	for _, pc := range pcs[:n] {
		v, ok := inBatchesPC.Load(pc)
		if !ok {
			v = pcInCreateInBatches(pc)
			inBatchesPC.Store(pc, v)
		}
		if v.(bool) {
			return true
		}
	}
	return false
}

// inBatchesPC holds, per return address seen by calledFromCreateInBatches,
// whether it is in gorm's CreateInBatches. Its size is bounded by the
// program's call sites.
var inBatchesPC sync.Map // uintptr → bool

// pcInCreateInBatches reports whether the frames of return address pc —
// the function it returns into and any inlined into it there — include
// gorm's CreateInBatches.
func pcInCreateInBatches(pc uintptr) bool {
	frames := runtime.CallersFrames([]uintptr{pc})
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "gorm.io/gorm.(*DB).CreateInBatches") {
			return true
		}
		if !more {
			return false
		}
	}
}

// rawSavepoint (Raw().After("gorm:raw")) tracks savepoints that ran as
// prepared statements: Session{PrepareStmt: true} on a PrepareStmt DB
// stacks two *gorm.PreparedStmtTX and GORM unwraps only one, so SAVEPOINT
// and ROLLBACK TO reach the transaction through StmtContext, not
// txConn.ExecContext.
func (p *Plugin) rawSavepoint(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	if _, prepared := db.Statement.ConnPool.(*gorm.PreparedStmtTX); !prepared {
		return // a *txConn on top: its ExecContext already saw it
	}
	q := db.Statement.SQL.String()
	if !isSavepointSQL(q) {
		return
	}
	if t, _ := scopeOf(db.Statement.ConnPool); t != nil {
		t.savepointSQL(q)
	}
}

// scopeOf says which commit scope statements on cp belong to: t != nil is
// a transaction the plugin owns; t == nil && inTx is a transaction begun
// on a pool the plugin does not own (its commit is invisible); !inTx is
// autocommit.
func scopeOf(cp gorm.ConnPool) (t *txConn, inTx bool) {
	for {
		switch c := cp.(type) {
		case *txConn:
			return c, true
		case *gorm.PreparedStmtTX:
			cp = c.Tx
		case *capturePool:
			cp = c.ConnPool
		default:
			_, isTx := cp.(gorm.TxCommitter)
			return nil, isTx
		}
	}
}

// rawTx returns the transaction underneath GORM's prepared-statement
// wrappers, where savepoints must run unprepared; nil when cp is not a
// transaction.
func rawTx(cp gorm.ConnPool) gorm.ConnPool {
	for {
		switch c := cp.(type) {
		case *gorm.PreparedStmtTX:
			cp = c.Tx
		case *capturePool:
			cp = c.ConnPool
		default:
			if _, ok := cp.(gorm.TxCommitter); ok {
				return cp
			}
			return nil
		}
	}
}

// wrap returns cp wrapped in the plugin's pool, unless it already is, or
// is a transaction (too late to wrap).
func (p *Plugin) wrap(cp gorm.ConnPool) gorm.ConnPool {
	switch c := cp.(type) {
	case nil, *pool, *txConn, *gorm.PreparedStmtTX, *capturePool:
		return cp
	case *gorm.PreparedStmtDB: // dbresolver hands out a fresh one per statement
		if _, ok := c.ConnPool.(*pool); ok {
			return c
		}
		return &gorm.PreparedStmtDB{ConnPool: p.wrapPlain(c.ConnPool), Mux: c.Mux, Stmts: c.Stmts}
	case gorm.TxCommitter:
		return cp
	}
	return p.wrapPlain(cp)
}

// wrapPlain wraps a pool that is not GORM's prepared-statement wrapper.
// Wrappers of *sql.DB are cached so a pool keeps one wrapper; a *sql.Conn
// (db.Connection) gets a fresh one, so nothing is held after it closes.
func (p *Plugin) wrapPlain(cp gorm.ConnPool) gorm.ConnPool {
	switch cp.(type) {
	case *pool, *txConn, nil:
		return cp
	}
	if d, ok := cp.(*sql.DB); ok {
		if w, ok := p.pools.Load(d); ok {
			return w.(*pool)
		}
		w, _ := p.pools.LoadOrStore(d, &pool{ConnPool: cp, p: p})
		return w.(*pool)
	}
	return &pool{ConnPool: cp, p: p}
}

// fire signals topics after the plugin's transaction committed. A
// TxSignaler was signalled inside the transaction already.
func (p *Plugin) fire(topics []string) {
	if _, ok := p.cfg.Wakeup.(wakeup.TxSignaler); ok {
		return
	}
	p.signalNow(topics)
}

// signalNow signals topics of committed events. It runs synchronously
// inside the caller's Commit, so it must never fail the caller: a
// panicking or failing Wakeup is logged and otherwise ignored (relays poll
// anyway).
func (p *Plugin) signalNow(topics []string) {
	w := p.cfg.Wakeup
	if w == nil || len(topics) == 0 {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			p.logger().Warn("herald/gormcapture: wakeup panicked", "panic", r)
		}
	}()
	if err := w.Signal(context.Background(), topics); err != nil {
		p.logger().Warn("herald/gormcapture: wakeup signal failed; relays will poll", "error", err)
	}
}
