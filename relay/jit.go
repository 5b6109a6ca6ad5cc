package relay

import (
	"context"
	"database/sql"
)

// JIT and the lease.
//
// PostgreSQL decides whether to JIT-compile a statement when it plans it:
// when the plan's estimated cost passes jit_above_cost (100,000 by
// default) and jit is on, the executor compiles the plan's expressions
// with LLVM before the first row — tens of milliseconds, every execution,
// since the relay's statements are planned at each execution (plans.go).
// The lease's estimate grows with the table's statistics, not with the
// work it does: after ANALYZE of an outbox of 100,000 pending unordered
// events the plain lease is estimated at 27,000 and the lease with the key
// walk at 296,000 (the head test's subquery is costed as a bitmap scan of
// a third of the table for each candidate, though an unordered candidate
// never runs it), and at 1,000,000 rows both pass the threshold. Measured
// from outside, JIT took 9.3 ms of a 9.7 ms poll in a 100,000-event drain,
// and the drain ran at a fifth of its speed with jit=off.
//
// A setting made inside the statement (as AsyncCommit's set_config) comes
// too late: the decision was taken at planning. So where JIT can happen —
// pg_jit_available() and jit on, as the relay's connections see them when
// the relay checks its table — each lease runs in a transaction of its
// own that first says SET LOCAL jit = off: the setting lasts until that
// transaction ends, touches no other statement of the pool's connections,
// and holds under a transaction-pooling PgBouncer. It costs three more
// round trips per lease (BEGIN, SET, COMMIT; no statement is planned for
// them), which a pool that already has jit off — in the DSN, the role or
// the server's configuration — does not pay. The marks, renewals and
// releases are estimated by their primary-key lookups at a few dozen
// whatever the table holds, and run as before.
const (
	jitPossibleSQL = `SELECT pg_jit_available() AND current_setting('jit')::boolean`
	jitOffSQL      = `SET LOCAL jit = off`
)

// detectJIT reports whether the database may JIT-compile the relay's
// statements on db's connections.
func detectJIT(ctx context.Context, db *sql.DB) (bool, error) {
	var on bool
	err := db.QueryRowContext(ctx, jitPossibleSQL).Scan(&on)
	return on, err
}

// leaseTx is the transaction a lease runs in where JIT is possible; nil
// where it is not, and then its methods do nothing.
type leaseTx struct{ tx *sql.Tx }

// beginLease opens the lease's transaction when the relay found JIT
// possible or carries a mark (pending.go), and runs the carried mark in
// it: the mark also sets jit off, in place of SET LOCAL.
func (r *Relay) beginLease(ctx context.Context) (leaseTx, error) { return r.beginLeaseWith(ctx, nil) }

func (r *Relay) beginLeaseWith(ctx context.Context, carried *carriedMark) (leaseTx, error) {
	if !r.noJIT.Load() && carried == nil {
		return leaseTx{}, nil
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return leaseTx{}, err
	}
	if carried != nil {
		err = r.markCarriedIn(ctx, tx, carried)
	} else {
		_, err = tx.ExecContext(ctx, jitOffSQL)
	}
	if err != nil {
		_ = tx.Rollback()
		return leaseTx{}, err
	}
	return leaseTx{tx}, nil
}

// query runs the lease statement, in the transaction when there is one.
func (l leaseTx) query(ctx context.Context, r *Relay, q string, args ...any) (*sql.Rows, error) {
	if l.tx == nil {
		return r.query(ctx, q, args...)
	}
	return l.tx.QueryContext(ctx, q, r.args(args)...)
}

// commit commits the lease; rollback undoes it (the events are leased by
// no one again).
func (l leaseTx) commit() error {
	if l.tx == nil {
		return nil
	}
	return l.tx.Commit()
}

func (l leaseTx) rollback() {
	if l.tx != nil {
		_ = l.tx.Rollback()
	}
}
