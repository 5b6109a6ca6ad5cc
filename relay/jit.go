package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"time"
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
// too late: the decision was taken at planning. So a lease whose estimate
// may reach jit_above_cost runs in a transaction of its own that first
// says SET LOCAL jit = off: the setting lasts until that transaction ends,
// touches no other statement of the pool's connections, and holds under a
// transaction-pooling PgBouncer. It costs three more round trips per lease
// (BEGIN, SET, COMMIT; no statement is planned for them) — on a relay that
// keeps up, most of the time from a commit to its delivery (p50 0.94 ms
// without them, 1.78 ms with, at 500 events/s: BENCHMARKS.md, "Latency and
// the JIT guard"). So they are paid only where JIT can happen:
//
//   - pg_jit_available() and jit on, as the relay's connections see them
//     when the relay checks its table (a pool with jit off — in the DSN, the
//     role or the server's configuration — never pays them);
//   - and the lease's estimated cost at least half of jit_above_cost:
//     the relay asks PostgreSQL (EXPLAIN, which plans without running) for
//     the estimate of each form of the lease it runs, at its first run and
//     again when that answer is jitRecheck old, or jitSlowRecheck old and
//     a lease of that form unguarded took longer than jitSlow says. An
//     estimate that cannot be had counts as over the threshold. The estimate grows with the table,
//     not with the work (above), so half the threshold leaves room for a
//     table that doubles between two checks.
//
// A lease after a batch whose mark is carried (a full batch, a backlog)
// runs in a transaction in any case, and the carried mark sets jit off in
// it (pending.go). The marks, renewals and releases are estimated by their
// primary-key lookups at a few dozen whatever the table holds, and run as
// before.
const (
	jitPossibleSQL = `SELECT pg_jit_available() AND current_setting('jit')::boolean, current_setting('jit_above_cost')::float8`
	jitOffSQL      = `SET LOCAL jit = off`
)

// jitRecheck is how long a lease form's estimated cost is trusted;
// jitSlowLease, plus jitSlowRow for each row the statement leased or
// marked, is a lease's duration that makes the relay ask again at once (a
// JIT-compiled lease takes tens of milliseconds more; a lease of 1,000
// events with the mark of 1,000 more, 8–17 ms without JIT).
const (
	jitRecheck     = 10 * time.Second
	jitSlowRecheck = time.Second // see slowLease
	jitSlowLease   = 5 * time.Millisecond
	jitSlowRow     = 15 * time.Microsecond
)

// jitSlow is the duration over which an unguarded lease that leased or
// marked rows rows makes the relay ask for its estimate again.
func jitSlow(rows int) time.Duration { return jitSlowLease + time.Duration(rows)*jitSlowRow }

// detectJIT reports whether the database may JIT-compile the relay's
// statements on db's connections, and the cost from which it does.
func detectJIT(ctx context.Context, db *sql.DB) (bool, float64, error) {
	var on bool
	var above float64
	err := db.QueryRowContext(ctx, jitPossibleSQL).Scan(&on, &above)
	return on && above >= 0, above, err // jit_above_cost -1: never
}

// jitEstimate is a lease form's estimated cost and when it was asked.
type jitEstimate struct {
	cost float64
	at   time.Time
}

// leaseNeedsJITOff reports whether lease statement q (with args) runs in
// a transaction with jit off: JIT possible on the relay's connections, and
// q's estimated cost, asked at most jitRecheck ago, at least half of
// jit_above_cost.
func (r *Relay) leaseNeedsJITOff(ctx context.Context, q string, args []any) bool {
	if !r.noJIT.Load() {
		return false
	}
	threshold := math.Float64frombits(r.jitAbove.Load()) / 2
	r.jitMu.Lock()
	e, ok := r.jitCost[q]
	r.jitMu.Unlock()
	if ok && time.Since(e.at) < jitRecheck {
		return e.cost >= threshold
	}
	cost, err := r.estimateCost(ctx, q, args)
	if err != nil {
		r.log.DebugContext(ctx, "herald/relay: could not read the lease's estimated cost; leasing with jit off", slog.String("relay", r.cfg.Name), slog.Any("error", err))
		cost = math.Inf(1)
	}
	r.jitMu.Lock()
	if r.jitCost == nil {
		r.jitCost = map[string]jitEstimate{}
	}
	r.jitCost[q] = jitEstimate{cost, time.Now()}
	r.jitMu.Unlock()
	return cost >= threshold
}

// slowLease makes the next lease of form q ask for its estimate again
// after a lease of that form ran unguarded and slow (jitSlow) — unless the
// estimate is younger than jitSlowRecheck. A database slow for another
// reason (load, I/O, a long backlog's dead index entries) makes every lease
// slow, and asking at each of them put an EXPLAIN of the lease, planned
// like the lease itself, into every poll: 82 of 200 polls, 4.4% of a
// drain of 200,000 events at batch 1000 on a loaded machine. The estimate
// grows with the table's statistics, so one asked less than
// jitSlowRecheck ago still stands but where an ANALYZE changed them in
// between: then the relay's leases are JIT-compiled for at most
// jitSlowRecheck.
func (r *Relay) slowLease(q string) {
	r.jitMu.Lock()
	if e, ok := r.jitCost[q]; ok && time.Since(e.at) >= jitSlowRecheck {
		delete(r.jitCost, q)
	}
	r.jitMu.Unlock()
}

// estimateCost returns the planner's total cost of q with args (EXPLAIN:
// planned, not run).
func (r *Relay) estimateCost(ctx context.Context, q string, args []any) (float64, error) {
	var plan string
	if err := r.queryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, args...).Scan(&plan); err != nil {
		return 0, err
	}
	var p []struct {
		Plan struct {
			TotalCost float64 `json:"Total Cost"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &p); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, errors.New("herald/relay: EXPLAIN returned no plan")
	}
	return p[0].Plan.TotalCost, nil
}

// leaseTx is the transaction a lease runs in where JIT is possible; nil
// where it is not, and then its methods do nothing.
type leaseTx struct{ tx *sql.Tx }

// beginLease opens the lease's transaction when the relay found JIT
// possible (always: the estimate aside) or carries a mark (pending.go),
// and runs the carried mark in it: the mark also sets jit off, in place of
// SET LOCAL.
func (r *Relay) beginLease(ctx context.Context) (leaseTx, error) {
	return r.beginLeaseWith(ctx, nil, r.noJIT.Load())
}

// beginLeaseWith is beginLease with jitOff saying whether the lease needs
// jit off (leaseNeedsJITOff).
func (r *Relay) beginLeaseWith(ctx context.Context, carried *carriedMark, jitOff bool) (leaseTx, error) {
	if !jitOff && carried == nil {
		return leaseTx{}, nil
	}
	return r.beginTx(ctx, ctx, carried, jitOff)
}

// beginLocked opens the transaction of a lease by lock
// (Config.LeaseByLock), which lasts until the batch's mark: it is begun
// without the lease's deadline or the run's cancellation, which would roll
// it back (database/sql does when a transaction's context ends) under a
// mark still to come.
func (r *Relay) beginLocked(ctx context.Context, carried *carriedMark, jitOff bool) (leaseTx, error) {
	return r.beginTx(context.WithoutCancel(ctx), ctx, carried, jitOff)
}

// beginTx begins a lease's transaction, bound to txCtx, and runs its first
// statement with ctx: the mark carried, if any (which sets jit off too),
// else SET LOCAL jit = off when jitOff.
func (r *Relay) beginTx(txCtx, ctx context.Context, carried *carriedMark, jitOff bool) (leaseTx, error) {
	tx, err := r.db.BeginTx(txCtx, nil)
	if err != nil {
		return leaseTx{}, err
	}
	switch {
	case carried != nil:
		err = r.markCarriedIn(ctx, tx, carried)
	case jitOff:
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

// queryPrepared runs q on the connections' own query mode, pgx's statement
// cache: prepared under a name, its plan kept (see Relay.planned).
func (l leaseTx) queryPrepared(ctx context.Context, r *Relay, q string, args ...any) (*sql.Rows, error) {
	if l.tx == nil {
		return r.db.QueryContext(ctx, q, args...)
	}
	return l.tx.QueryContext(ctx, q, args...)
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
