package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"

	"github.com/heraldgo/herald/internal/deliverycall"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/relayknob"
	"github.com/heraldgo/herald/internal/sqltime"
)

// markTimeout bounds the statements that mark a batch. They run under
// context.WithoutCancel: marks are written even while the relay stops.
const markTimeout = 30 * time.Second

// minStatementTimeout is the floor of the lease and renewal statements'
// timeout, which is otherwise the Lease: a lease that takes longer than
// itself is worthless.
const minStatementTimeout = 5 * time.Second

type pollResult struct {
	leased  int       // events leased (and handled)
	keyed   int       // events with an ordering key that were delivered
	nextDue time.Time // the earliest next attempt of a failure recorded (relay's clock), or zero
	lastDue time.Time // the latest (the backoffs' jitter spreads them), or zero
}

// withTimeout bounds ctx by d, naming what timed out.
func withTimeout(ctx context.Context, d time.Duration, what string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("herald/relay: %s timed out after %s", what, d))
}

// stmtErr names a statement's error, or its timeout, and adds what to
// change when the error says the statement ran through a pooler that
// loses prepared statements.
func stmtErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		if c := context.Cause(ctx); c != nil && !errors.Is(c, ctx.Err()) {
			return fmt.Errorf("%w (%w)", c, err)
		}
	}
	return fmt.Errorf("herald/relay: %s: %w%s", what, err, poolerHint(err))
}

// poll is one poll: lease a batch, deliver it, mark it. ctx is the run's
// forced-stop context: it cancels the lease query and the deliveries, never
// the marks.
func (r *Relay) poll(ctx context.Context) (res pollResult, err error) { return r.pollCarry(ctx, false) }

// pollCarry is poll; with carry (the poll loop's) the mark of a batch
// delivered whole may be carried into the next lease (fuseMark).
func (r *Relay) pollCarry(ctx context.Context, carry bool) (res pollResult, err error) {
	t0 := r.now()
	var p Poll
	if po, ok := r.cfg.Observer.(PollObserver); ok {
		defer func() {
			p.Relay, p.Duration, p.Err = r.cfg.Name, r.now().Sub(t0), err
			r.observe(ctx, "Polled", func() { po.Polled(ctx, p) })
		}()
	}
	batch, errs, err := r.lease(ctx)
	p.Lease, p.Leased = r.now().Sub(t0), len(batch)
	if err != nil || len(batch) == 0 {
		return pollResult{}, err
	}
	// The lease runs Lease from the database's now during the statement,
	// which is after t0: by the relay's own clock it ends no earlier than
	// t0 + Lease, however long the statement waited (a lock, SQLite's busy
	// timeout). hold makes sure the lease is still live before anything is
	// delivered.
	since := t0
	if r.held == nil { // locks do not run out while the statement runs
		batch, errs, since, err = r.hold(ctx, batch, errs, t0)
		if err != nil || len(batch) == 0 {
			return pollResult{leased: len(batch)}, err
		}
	}
	t1 := r.now()
	if r.txd != nil { // relay/txmark.go: the delivery's writes commit with the mark
		res, err = r.deliverTx(ctx, batch, errs, since)
		p.Deliver = r.now().Sub(t1)
		res.leased = len(batch)
		return res, err
	}
	r.deliver(ctx, batch, errs, since)
	p.Deliver = r.now().Sub(t1)
	res, err = r.markCarry(ctx, batch, errs, r.fuseMark(ctx, carry, batch, errs))
	res.leased = len(batch)
	return res, err
}

func (r *Relay) statementTimeout() time.Duration { return max(r.cfg.Lease, minStatementTimeout) }

// lease leases the next batch (one statement) and returns it in sequence
// order, with one error per event: nil, or why the row could not be
// decoded (a *DecodeError: that event's own failure).
// walkEvery bounds how many short leases of unordered events may pass
// without a key walk.
const walkEvery = 8

// floorEvery: every floorEvery-th lease after full ones scans its
// candidates from the start of the table (see leaseFloor), unless the
// last scan from the start was dear (fromStartDue).
const floorEvery = 16

// fromStartPace and fromStartMaxWait pace the leases from the start of
// the table in a drain (fromStartDue): the next one waits, after the last
// ended, fromStartPace times as long as the last took, and never more
// than fromStartMaxWait — so they take at most about a twentieth of a
// drain's time however large the table.
const (
	fromStartPace    = 19
	fromStartMaxWait = time.Second
)

// leaseFloor sets where the next lease's candidate scans start
// (PostgreSQL; {floor} in the candidate sources). After a full lease
// without the key walk, at that lease's lowest sequence (after its
// highest when it held unordered events alone: see afterLease): in a drain,
// what lies below it was published (or is leased) and, with nothing to
// vacuum the table, its dead entries in the pending indexes were read
// again by every candidate scan — about 1,400 index pages per lease half
// way through a drain of 1,000,000 events, which made the drain fall to
// half its speed. What can appear below the floor — a retry falling due,
// a lease run out, an event committed after later sequences, a key's
// next event once its head is published — is found by the scans from the
// start: after any short lease (a lease after which the loop waits), and
// after floorEvery leases whatever they hold, so nothing below the floor
// waits more than floorEvery leases (TestLeaseFloorReachesBelow) — or, when
// a scan from the start has grown dear, up to fromStartPace times its
// duration, at most fromStartMaxWait (fromStartDue). The floor narrows the
// candidate sources only; every predicate is checked as before.
func (r *Relay) leaseFloor(full bool, lowest int64) {
	r.resume = 0
	if !full || (r.floorLeases.Add(1) >= floorEvery && r.fromStartDue()) {
		r.floorLeases.Store(0)
		r.floor.Store(0)
		if full {
			r.resume = lowest
		}
		return
	}
	r.floor.Store(lowest)
}

// fromStartDue reports whether a lease from the start of the table may
// run now, as far as its cost goes: when fromStartPace times the last
// one's duration, at most fromStartMaxWait, has passed since it ended.
//
// Without VACUUM the pending indexes keep an entry for every event
// published since (killed once a scan finds its row dead, but still on
// its page), and a scan from the start reads them all: in a drain of
// 1,000,000 events at batch 100 the lease from the start grew from 2.3 ms
// to 7.4 ms on average, and every 16th lease took 19% of the drain
// (relayprof; BENCHMARKS.md, "eleventh pass"). Paced by its own cost, it
// takes at most about a twentieth; on a small table, where it costs what
// a lease from the floor does, it still runs every floorEvery-th lease.
// What it reaches waits no longer than fromStartMaxWait more.
// fromStartEvery, when set (tests), replaces the pace with a count alone.
func (r *Relay) fromStartDue() bool {
	if r.fromStartEvery || r.fromStartEnd.IsZero() {
		return true
	}
	return time.Since(r.fromStartEnd) >= min(fromStartPace*r.fromStartCost, fromStartMaxWait)
}

// leaseQuery returns the form of the next lease (see afterLease): with
// runs of keys or not, with the key walk (walk > 0: how many keys) or
// not, and, from the floor after a full lease of unordered events alone,
// the lease of unordered events.
func (r *Relay) leaseQuery() (query string, runs bool, walk int64) {
	// After a lease that held keyed events, lease runs of their keys
	// (leaseRunsPostgres): the heads' next events are the work at hand.
	runs = r.dialect == envelope.Postgres && r.runs.Load()
	query = r.sql.lease
	if runs {
		query = r.sql.leaseRuns
	}
	if walk = r.walk.Load(); walk > 0 {
		query = r.sql.leaseWalk
		if runs {
			query = r.sql.leaseRunsWalk
		}
	} else if !runs && r.unordered.Load() && r.floor.Load() > 0 {
		query = r.sql.leaseUnordered // see leaseUnorderedPostgres
	}
	return query, runs, walk
}

func (r *Relay) lease(ctx context.Context) ([]*envelope.Event, []error, error) {
	if r.dialect == envelope.MySQL {
		return r.leaseMySQL(ctx)
	}
	ctx, cancel := withTimeout(ctx, r.statementTimeout(), "lease query")
	defer cancel()
	var args []any
	if r.dialect == envelope.Postgres {
		args = append(args, r.cfg.Lease.Microseconds(), r.cfg.Name, r.nowArg(), r.cfg.BatchSize)
	} else {
		now := r.sqliteNow()
		args = append(args, outbox.TimeArg(r.dialect, now.Add(r.cfg.Lease)), r.cfg.Name, outbox.TimeArg(r.dialect, now), r.cfg.BatchSize)
	}
	query, runs, walk := r.leaseQuery()
	if walk > 0 {
		args = append(args, walk)
	}
	args = append(args, r.fargs...)
	floored := query == r.sql.lease || query == r.sql.leaseRuns || query == r.sql.leaseUnordered // no key walk
	// fromStart: a floored form that scans from the start of the table (see fromStartDue)
	fromStart := false
	if floored && r.dialect == envelope.Postgres {
		floor := r.floor.Load()
		fromStart = floor == 0
		args = append(args, floor) // see leaseFloor
	}
	walkFrom := r.walkAfter
	if walk > 0 {
		args = append(args, walkFrom) // see walkedTo
	}
	// A mark carried from the last batch runs first in the lease's
	// transaction; when that transaction does not commit, on its own.
	carried := r.carried
	r.carried = nil
	committed := false
	if carried != nil {
		defer func() {
			if !committed {
				_ = r.markCarried(ctx, carried)
			}
		}()
	}
	var withMark, successors, locked bool
	if q, a, ok := r.leaseSuccessors(ctx, append(slices.Clip(args[:4]), r.fargs...), carried); ok {
		query, args, withMark, successors, runs, floored, fromStart = q, a, true, true, true, false, false
	} else if r.cfg.LeaseByLock && query == r.sql.leaseUnordered {
		// A mark carried (from a batch leased by writing its lease) runs
		// first in the lock's transaction, and commits with that batch's
		// own mark.
		query, locked = r.sql.leaseUnorderedLocked, true
	} else if q, a, ok := r.leaseWithMark(ctx, query, args, carried); ok {
		query, args, withMark = q, a, true
	}
	jitOff := carried == nil && r.leaseNeedsJITOff(ctx, query, args)
	// Before the lease's transaction: reading the table's size takes a
	// connection of its own.
	run, prepared := r.planned(ctx, query)
	var ltx leaseTx
	var err error
	switch {
	case locked:
		ltx, err = r.beginLocked(ctx, carried, jitOff)
	case !withMark:
		ltx, err = r.beginLeaseWith(ctx, carried, jitOff)
	}
	if err != nil {
		return nil, nil, stmtErr(ctx, "lease query", err)
	}
	if r.onLease != nil {
		r.onLease(query)
	}
	began := time.Now()
	var rows *sql.Rows
	if prepared {
		relayknob.PreparedLeases.Add(1)
		rows, err = ltx.queryPrepared(ctx, r, run, args...)
	} else {
		rows, err = ltx.query(ctx, r, query, args...)
	}
	if err != nil {
		ltx.rollback()
		return nil, nil, stmtErr(ctx, "lease query", err)
	}
	defer rows.Close()
	got := make([]leased, 0, r.cfg.BatchSize)
	sc := newLeaseScanner(r.extra, r.cfg.Name, r.dialect != envelope.Postgres)
	if runs {
		sc.dest = append(sc.dest, &sc.pos)
	}
	var tids map[int64]string // a lease by lock: each row's ctid, for its mark (markHeld)
	if locked {
		sc.dest = append(sc.dest, &sc.tid)
		tids = make(map[int64]string, r.cfg.BatchSize)
	}
	marked := int64(-1) // the carried mark's rows, when the lease returned them
	if withMark {
		sc.dest = append(sc.dest, &marked)
	}
	var walkedTo sql.NullString // where the next walk starts after (walk forms)
	walked := walk > 0 && !successors && !withMark
	if walked {
		sc.dest = append(sc.dest, &walkedTo)
	}
	for rows.Next() {
		sc.pos = 1
		e, err := sc.scan(rows)
		if e == nil {
			// Not even its sequence could be read: give back what this
			// lease took so far (the rest waits for its lease to run out).
			_ = rows.Close()
			if ltx.tx != nil {
				ltx.rollback() // nothing was leased
				return nil, nil, err
			}
			es := make([]*envelope.Event, len(got))
			for i, l := range got {
				es[i] = l.e
			}
			r.releaseEvents(ctx, es)
			return nil, nil, err
		}
		got = append(got, leased{e, err, sc.pos})
		if locked {
			tids[e.Sequence] = sc.tid
		}
	}
	if err := rows.Err(); err != nil {
		ltx.rollback()
		return nil, nil, stmtErr(ctx, "lease query", err)
	}
	if err := rows.Close(); err != nil {
		ltx.rollback()
		return nil, nil, stmtErr(ctx, "lease query", err)
	}
	if locked && len(got) > 0 {
		r.held = &heldLease{tx: ltx.tx, tids: tids} // committed with the batch's mark (markHeld)
	} else if err := ltx.commit(); err != nil {
		return nil, nil, stmtErr(ctx, "lease query", err)
	}
	committed = true
	if fromStart {
		r.fromStartEnd = time.Now()
		r.fromStartCost = r.fromStartEnd.Sub(began)
	}
	rowsTouched := len(got)
	if withMark {
		rowsTouched += len(carried.delivered)
	}
	if time.Since(began) > jitSlow(rowsTouched) {
		if ltx.tx == nil && r.noJIT.Load() {
			r.slowLease(query) // JIT-compiled, perhaps: ask again
		}
		if prepared {
			r.slowPrepared() // planned on a table emptied since, perhaps
		}
	}
	if carried != nil {
		if withMark && marked >= 0 {
			r.warnUnmarked(ctx, len(carried.delivered), marked)
		}
		r.observeDelivered(ctx, carried.delivered, carried.at)
	}
	if walked {
		r.walkedTo(ctx, walkFrom, walk, len(got) > 0, walkedTo)
	} else if len(got) > 0 {
		r.walkIdle = false
	}
	if successors && len(got) == 0 {
		// No successor to lease (the keys delivered were drained, or their
		// next events are not leasable): the full form, now, rather than
		// a wait for the next poll with work perhaps waiting elsewhere.
		r.successors = false
		return r.lease(ctx)
	}
	resume, unordered := r.resume, r.unordered.Load()
	r.afterLease(got, runs, floored, successors)
	if fromStart && resume > 0 && len(got) < r.cfg.BatchSize {
		// The periodic lease from the start of the table came back short
		// in a drain: not proof that the drain is over. It scans further
		// than a lease from the floor, and with another relay draining
		// beside it its candidates — the first pending events in its
		// snapshot — may all have been published or locked by that
		// relay's next lease before its own locks reached them (two
		// relays by lock: the second idled for a poll interval, then
		// another, most of a drain of 100,000 events; BENCHMARKS.md,
		// "fourteenth pass"). Nothing below the floor was free for it,
		// or it would have locked it: lease again at once, from the
		// floor — of unordered events alone when the lease before took
		// them alone and this one found no keyed event (a lease that
		// scans from the floor without candidates from a snapshot) — and
		// wait only if that lease is short too.
		r.floor.Store(resume)
		r.walk.Store(0)
		r.unordered.Store(unordered && !slices.ContainsFunc(got, func(l leased) bool { return l.e.OrderingKey != "" }))
		r.leaseAgain = true
	}
	slices.SortFunc(got, func(a, b leased) int { return cmp.Compare(a.e.Sequence, b.e.Sequence) })
	// Of each key, keep the run's positions 1, 2, 3… without a gap: an
	// event whose predecessor in its run is not in the batch (a follower
	// changed under the statement) must not be delivered before it.
	var next map[string]int64
	var cut []*envelope.Event
	if runs {
		next = make(map[string]int64, len(got))
		kept := got[:0]
		for _, l := range got {
			if k := l.e.OrderingKey; k != "" {
				if want := next[k] + 1; l.pos != want {
					cut = append(cut, l.e)
					next[k] = -1 << 62 // nothing more of this key
					continue
				}
				next[k]++
			}
			kept = append(kept, l)
		}
		got = kept
	}
	if len(cut) > 0 {
		r.log.DebugContext(ctx, "herald/relay: released events leased behind a gap in their key's run",
			slog.String("relay", r.cfg.Name), slog.Int("events", len(cut)))
		r.releaseEvents(ctx, cut)
	}
	batch := make([]*envelope.Event, len(got))
	errs := make([]error, len(got))
	for i, l := range got {
		batch[i], errs[i] = l.e, l.err
		if l.err != nil {
			r.log.WarnContext(ctx, "herald/relay: leased an event it cannot decode; recording it as the event's failure",
				slog.String("relay", r.cfg.Name), slog.Int64("sequence", l.e.Sequence), slog.Any("error", l.err))
		}
	}
	return batch, errs, nil
}

// leaseWithMark returns the statement and arguments that run carried, a
// carried mark, inside lease query q (with args): when q is the lease of
// unordered events (leaseUnorderedMarkedPostgres), and unless that
// statement may be JIT-compiled — then ok is false, and the mark runs in
// the lease's transaction, which it sets jit off for.
func (r *Relay) leaseWithMark(ctx context.Context, q string, args []any, carried *carriedMark) (string, []any, bool) {
	if carried == nil || len(carried.delivered) == 0 || q != r.sql.leaseUnordered {
		return "", nil, false
	}
	lo, hi := carried.delivered[0].Sequence, carried.delivered[0].Sequence
	for _, e := range carried.delivered {
		lo, hi = min(lo, e.Sequence), max(hi, e.Sequence)
	}
	return r.markedForm(ctx, r.sql.leaseUnorderedMarked, r.sql.leaseUnorderedDeleted, append(slices.Clip(args), carried.seqs, lo, hi))
}

// markedForm returns the one-statement form that carries a mark — marked,
// or deleted with Config.DeleteOnPublish — with args, unless PostgreSQL
// may JIT-compile it (ok false: the mark then runs in the lease's
// transaction, which sets jit off).
func (r *Relay) markedForm(ctx context.Context, marked, deleted string, args []any) (string, []any, bool) {
	q := marked
	if r.cfg.DeleteOnPublish {
		q = deleted
	}
	if r.leaseNeedsJITOff(ctx, q, args) {
		return "", nil, false
	}
	return q, args, true
}

// walkedTo sets where the next key walk starts (PostgreSQL and SQLite):
// after the last key this one visited, when it visited as many keys as it
// may (walk), else from the first key. A walk restarted from the first key
// every time never reached a key sorted after BatchSize keys whose heads
// are held back (failed and waiting for their retry, leased, dead): a
// backlog of their events filled the lease's other candidates, and that
// key's events waited as long as the keys before it did
// (TestWalkReachesEveryKey). Walking on from the last key visited, as the
// MySQL lease does, every key is visited within keys ÷ BatchSize walks.
// The walk forms return where the next walk starts with each row
// (walkEndPostgres); a walk that leased nothing returns no row, and then
// the statement walkEnd asks it — unless the last walk that asked visited
// every key from the first and no lease returned an event since: an idle
// relay issues one statement per poll, as before.
func (r *Relay) walkedTo(ctx context.Context, from string, walk int64, leased bool, to sql.NullString) {
	if !leased {
		if r.walkIdle {
			return
		}
		r.walkEnds++
		if err := r.queryRow(ctx, r.sql.walkEnd, from, walk).Scan(&to); err != nil {
			r.log.DebugContext(ctx, "herald/relay: could not read where the key walk ended; the next walk starts from the first key",
				slog.String("relay", r.cfg.Name), slog.Any("error", err))
			r.walkAfter = ""
			return
		}
		r.walkIdle = !to.Valid && from == ""
	} else {
		r.walkIdle = false
	}
	r.walkAfter = to.String // NULL: from the first key
}

// leaseSuccessors returns the statement and arguments that run carried,
// a carried mark, together with the lease of the next events of the keys
// it delivered (leaseSuccessorsPostgres), when the last lease asked for it
// (afterLease) and carried holds keyed events — unless that statement may
// be JIT-compiled: then ok is false and the full form runs, the mark in
// its transaction. base is the lease's first four arguments and the
// relay's filter's.
func (r *Relay) leaseSuccessors(ctx context.Context, base []any, carried *carriedMark) (string, []any, bool) {
	if !r.successors || carried == nil || r.dialect != envelope.Postgres {
		return "", nil, false
	}
	keys := make(map[string]struct{}, len(carried.delivered))
	for _, e := range carried.delivered {
		if e.OrderingKey != "" {
			keys[e.OrderingKey] = struct{}{}
		}
	}
	if len(keys) == 0 {
		return "", nil, false
	}
	followers := max(0, r.cfg.BatchSize-len(keys)) / len(keys) // each head's share of the batch
	// The window: the events delivered below the carried block, and twice
	// as many events as there are keys, at most BatchSize. Where keys
	// interleave, each key's next event lies within as many events as
	// there are keys; with few keys and many followers a window of
	// BatchSize read a thousand rows for ten successors. A key whose next
	// event lies beyond the window costs one descent of the key index,
	// about as much as reading ten rows of the window.
	from, to, below := carriedBlock(carried.delivered)
	window := min(r.cfg.BatchSize, 2*len(keys)) + below
	return r.markedForm(ctx, r.sql.leaseSuccessorsMarked, r.sql.leaseSuccessorsDeleted,
		append(slices.Clip(base), carried.seqs, int64(len(carried.delivered)), int64(followers),
			from, to, int64(window)))
}

// carriedBlock returns the last block of consecutive sequences among the
// delivered events — from the lowest of it to the highest delivered — and
// how many delivered events lie below it. No other event has a sequence
// in that block, so the lease of successors reads its window around it
// (leaseSuccessorsPostgres): a backlog drained in runs of consecutive
// sequences, the common case, has the whole batch in the block, and the
// window then reads none of the events the statement marks.
func carriedBlock(delivered []*envelope.Event) (from, to int64, below int) {
	seqs := make([]int64, len(delivered))
	for i, e := range delivered {
		seqs[i] = e.Sequence
	}
	slices.Sort(seqs)
	i := len(seqs) - 1
	for i > 0 && seqs[i-1] == seqs[i]-1 {
		i--
	}
	return seqs[i], seqs[len(seqs)-1], i
}

// leased is one event a lease returned: the event, why it could not be
// decoded (nil when it could), its position in its key's run (1 for a
// head and an unordered event).
type leased struct {
	e   *envelope.Event
	err error
	pos int64
}

// afterLease sets, from what a lease returned, where the next lease's
// candidate scans start (leaseFloor), whether it walks keys, whether it
// takes runs and whether it leases the successors of the keys it
// delivered. runs: this lease took runs; floored: it ran without the key
// walk, from the floor; successors: it was the lease of successors.
func (r *Relay) afterLease(got []leased, runs, floored, successors bool) {
	var lowest, highest int64
	keyed := false
	for i, l := range got {
		if i == 0 || l.e.Sequence < lowest {
			lowest = l.e.Sequence
		}
		highest = max(highest, l.e.Sequence)
		keyed = keyed || l.e.OrderingKey != ""
	}
	// After a full lease of unordered events alone the next lease is the
	// lease of unordered events (below), which carries this batch's mark
	// and leaves these events out: it starts after them, not on them —
	// from the lowest, its scan read every event of the batch again (the
	// statement's snapshot sees them pending) only to leave it out, a
	// third of its rows. Events below that — an event another relay held,
	// one committed after later sequences — are found by the lease from
	// the start, as anything below the floor is (leaseFloor). A keyed
	// lease's next events of its keys may lie within the batch: its floor
	// stays the lowest.
	from := lowest
	if r.dialect == envelope.Postgres && floored && len(got) == r.cfg.BatchSize && !keyed {
		from = highest + 1
	}
	r.leaseFloor(floored && len(got) == r.cfg.BatchSize, from)
	// Whether the next lease that carries a mark leases the successors of
	// the keys delivered (leaseSuccessorsPostgres): after a lease of at
	// least half a batch that held keyed events — a backlog of keys being
	// drained (a run lease with many keys leaves up to a follower per key
	// of its batch unused, so "full" would rarely hold) — and for at most
	// floorEvery − 1 leases in a row, or as many more as the pace of the
	// leases from the start asks (fromStartDue): then the full form from
	// the start, which reaches the keys the batches did not hold and the
	// unordered events.
	if successors {
		r.successorLeases++
	} else {
		r.successorLeases = 0
	}
	r.successors = r.dialect == envelope.Postgres && keyed && 2*len(got) >= r.cfg.BatchSize && (r.successorLeases < floorEvery-1 || !r.fromStartDue())
	// Whether the next lease, if it starts at the floor, takes unordered
	// events alone (leaseUnorderedPostgres): after a full lease that held
	// no keyed event — a backlog of unordered events being drained. Any
	// short lease, and every lease from the start of the table, is the
	// full form, which finds keyed events too.
	unordered := r.dialect == envelope.Postgres && floored && len(got) == r.cfg.BatchSize
	for _, l := range got {
		if !unordered {
			break
		}
		unordered = l.e.OrderingKey == ""
	}
	r.unordered.Store(unordered)
	// Whether the next lease walks keys (see leaseBatchPostgres). A full
	// batch needs no walk. A short one may have missed heads beyond the
	// first BatchSize pending events: walk when it held keyed events or
	// none at all (evidence of keys held back, or nothing found), and in
	// any case every walkEvery-th short lease, so that a key waiting
	// behind a held-back backlog is reached even while unordered events
	// keep every lease busy. A table of unordered events alone then
	// rarely runs the walk's statement at all.
	walk := false
	if len(got) < r.cfg.BatchSize && !successors {
		// (A lease of successors says nothing of heads elsewhere: the full
		// form after it, short or not, decides.)
		keyed := len(got) == 0
		for _, l := range got {
			keyed = keyed || l.e.OrderingKey != ""
		}
		walk = keyed || r.shortLeases.Add(1)%walkEvery == 0
	}
	if walk {
		r.walk.Store(int64(r.cfg.BatchSize))
	} else {
		r.walk.Store(0)
	}
	// Whether the next lease takes runs. After a lease that held keyed
	// events, yes — unless a runs lease found no followers since: a steady
	// trickle of events whose keys each hold one pending event then keeps
	// the plain lease (the runs statement is dearer to plan and run, and on
	// a table without statistics its estimate grows with the published
	// history until JIT compiles it on every poll), until a key is leased
	// again right after the lease before — a backlog behind that key.
	if len(got) > 0 { // an empty lease says nothing of what comes next
		keys := make(map[string]struct{}, len(got))
		keyed, repeat, followers := false, false, false
		for _, l := range got {
			if k := l.e.OrderingKey; k != "" {
				keyed = true
				keys[k] = struct{}{}
				followers = followers || l.pos > 1
				if _, ok := r.lastKeys[k]; ok {
					repeat = true
				}
			}
		}
		r.lastKeys = keys
		switch {
		case runs:
			r.noRuns = !followers
		case repeat:
			r.noRuns = false
		}
		// A full plain lease leaves no room for followers: with many
		// ready keys a runs lease right after it takes heads alone, at
		// twice the cost (with 1,000 keys and BatchSize 1000 the relay
		// alternated a plain lease with a runs lease that had no room).
		fullPlain := !runs && len(got) == r.cfg.BatchSize
		r.runs.Store(keyed && !r.noRuns && !fullPlain)
	}
}

// hold makes sure the batch is still this relay's before it is delivered.
// The lease statement started at t0 (relay's clock); when it returned
// later than a renewal would be due (Lease/3 after t0), the lease is
// renewed now, before any delivery, and only the events the renewal still
// found leased by this relay are kept: a lease that ran out may have been
// taken by another relay, which then delivers those events itself. It
// returns the batch and errors kept and the time (relay's clock) from
// which their lease runs, for the renewals.
func (r *Relay) hold(ctx context.Context, batch []*envelope.Event, errs []error, t0 time.Time) ([]*envelope.Event, []error, time.Time, error) {
	took := r.now().Sub(t0)
	if took < r.cfg.Lease/3 {
		return batch, errs, t0, nil
	}
	t1 := r.now()
	held, err := r.renew(ctx, r.seqArg(batch))
	if err == nil && r.now().Sub(t1) >= r.cfg.Lease {
		err = fmt.Errorf("herald/relay: the lease renewal itself took %s, longer than the Lease %s", r.now().Sub(t1), r.cfg.Lease)
	}
	if err != nil {
		if took < r.cfg.Lease {
			// The first lease is still live: deliver under it; the
			// renewals try again.
			return batch, errs, t0, nil
		}
		r.releaseEvents(ctx, batch)
		return nil, nil, t0, fmt.Errorf("herald/relay: the lease statement took %s, longer than the Lease %s, and the lease could not be renewed; nothing of the batch was delivered: %w", took, r.cfg.Lease, err)
	}
	if len(held) == len(batch) {
		return batch, errs, t1, nil
	}
	keep := batch[:0:0]
	var keepErrs []error
	var lost map[string]bool // keys of events no longer held
	var behind []*envelope.Event
	for i, e := range batch {
		k := e.OrderingKey
		switch {
		case !held[e.Sequence]:
			if k != "" {
				if lost == nil {
					lost = map[string]bool{}
				}
				lost[k] = true
			}
		case k != "" && lost[k]:
			// Held, but an earlier event of its key in this batch is
			// not: it must wait for that one.
			behind = append(behind, e)
		default:
			keep = append(keep, e)
			keepErrs = append(keepErrs, errs[i])
		}
	}
	r.releaseEvents(ctx, behind)
	r.log.WarnContext(ctx, "herald/relay: the lease ran out before delivery (the lease statement was slow) and another relay took part of the batch; those events are left to it",
		slog.String("relay", r.cfg.Name), slog.Duration("lease_statement", took), slog.Int("leased", len(batch)), slog.Int("kept", len(keep)))
	return keep, keepErrs, t1, nil
}

// errSkipped is the outcome of an event of a run whose predecessor in the
// batch failed (or could not be decoded): it was not delivered, and is
// released, not counted as a failure; it waits behind its predecessor.
var errSkipped = errors.New("herald/relay: not delivered: an earlier event of its ordering key failed in this batch")

// deliver hands the events of the batch that decoded (errs[i] == nil) to
// the delivery, outside any transaction, renewing the lease every Lease/3
// from since until it returns, and stores each delivery's error in errs.
//
// A batch may hold a run of several events of one key (leaseRunsPostgres).
// They go out in waves: wave n holds the n-th event of each key in the
// batch (and, in the first, the unordered events), and an event is
// delivered only after the one before it in its key succeeded — so a
// BatchDelivery still gets at most one event per key per call, and a
// plain Delivery never has two events of a key in flight. The events of a
// key behind a failure are not delivered (errSkipped).
func (r *Relay) deliver(ctx context.Context, batch []*envelope.Event, errs []error, since time.Time) {
	ren := r.startRenewal(ctx, batch, since)
	defer ren.stop()
	// rank[i] is how many events of batch[i]'s key come before it in the
	// batch; nil when every key appears once (the usual batch: one wave).
	var rank []int
	var seen map[string]int
	waves := 1
	for i, e := range batch {
		if e.OrderingKey == "" {
			continue
		}
		if seen == nil {
			seen = make(map[string]int)
		}
		n := seen[e.OrderingKey]
		seen[e.OrderingKey] = n + 1
		if n > 0 {
			if rank == nil {
				rank = make([]int, len(batch))
			}
			rank[i] = n
			waves = max(waves, n+1)
		}
	}
	// byWave[w] are the indexes of wave w's events, in batch order.
	var byWave [][]int
	if rank != nil {
		byWave = make([][]int, waves)
		for i, w := range rank {
			byWave[w] = append(byWave[w], i)
		}
	}
	var blocked map[string]bool // keys with a failure in this batch
	for w := range waves {
		var in []int // nil: every event of the batch (one wave)
		if byWave != nil {
			in = byWave[w]
		}
		n := len(batch)
		if in != nil {
			n = len(in)
		}
		idx := make([]int, 0, n)
		for j := range n {
			i := j
			if in != nil {
				i = in[j]
			}
			e := batch[i]
			k := e.OrderingKey
			switch {
			case k != "" && blocked[k]:
				errs[i] = errSkipped
			case errs[i] != nil: // could not be decoded: its key waits
				if k != "" && waves > 1 {
					if blocked == nil {
						blocked = map[string]bool{}
					}
					blocked[k] = true
				}
			default:
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		if w > 0 && ctx.Err() != nil {
			// A forced stop between waves: the rest is released (mark).
			for _, i := range idx {
				errs[i] = context.Cause(ctx)
			}
			continue
		}
		out := batch
		if len(idx) < len(batch) {
			out = make([]*envelope.Event, len(idx))
			for j, i := range idx {
				out[j] = batch[i]
			}
		}
		got := r.deliverEvents(ctx, out)
		for j, i := range idx {
			errs[i] = got[j]
			if got[j] != nil && waves > 1 && batch[i].OrderingKey != "" {
				if blocked == nil {
					blocked = map[string]bool{}
				}
				blocked[batch[i].OrderingKey] = true
			}
		}
	}
}

// deliverEvents delivers es — at most one event per key — through the
// delivery and returns one error per event.
func (r *Relay) deliverEvents(ctx context.Context, es []*envelope.Event) []error {
	if r.batch == nil {
		return deliverycall.Each(ctx, r.d, es, r.cfg.Concurrency, r.cfg.DeliveryTimeout)
	}
	dctx, cancel := context.WithTimeoutCause(ctx, r.cfg.DeliveryTimeout, &delivery.TimeoutError{Timeout: r.cfg.DeliveryTimeout})
	defer cancel()
	got := deliverycall.CallBatch(dctx, r.batch, es)
	if dctx.Err() != nil && ctx.Err() == nil {
		for i, err := range got {
			if err != nil && errors.Is(err, context.DeadlineExceeded) {
				got[i] = &delivery.TimeoutError{Timeout: r.cfg.DeliveryTimeout, Err: err}
			}
		}
	}
	return got
}

// renewal extends a batch's lease every Lease/3 while the batch is out, so
// a batch that takes longer than one Lease is not taken by another relay.
// It is a timer, not a goroutine: most batches are marked long before the
// first renewal is due, and then cost nothing (a goroutine started and
// stopped per batch cost ~0.1 ms of thread hand-offs, measurable at
// BatchSize 100).
type renewal struct {
	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	running sync.WaitGroup // a renewal statement in flight
}

// startRenewal renews the batch's lease, which runs from since (relay's
// clock), Lease/3 after since and then Lease/3 after each renewal
// started.
func (r *Relay) startRenewal(ctx context.Context, batch []*envelope.Event, since time.Time) *renewal {
	ren := &renewal{}
	every := r.cfg.Lease / 3
	var seqs string // built on the first renewal only
	held := r.held
	ren.mu.Lock()
	defer ren.mu.Unlock()
	ren.timer = time.AfterFunc(max(0, every-r.now().Sub(since)), func() {
		ren.mu.Lock()
		if ren.stopped {
			ren.mu.Unlock()
			return
		}
		ren.running.Add(1)
		ren.mu.Unlock()
		defer ren.running.Done()
		started := r.now()
		if held != nil {
			r.keepHeld(ctx, held.tx, len(batch))
		} else {
			if seqs == "" {
				seqs = r.seqArg(batch)
			}
			r.renewBatch(ctx, len(batch), seqs)
		}
		ren.mu.Lock()
		if !ren.stopped {
			ren.timer.Reset(max(0, every-r.now().Sub(started)))
		}
		ren.mu.Unlock()
	})
	return ren
}

// stop ends the renewals and waits for one in flight.
func (ren *renewal) stop() {
	ren.mu.Lock()
	ren.stopped = true
	ren.timer.Stop()
	ren.mu.Unlock()
	ren.running.Wait()
}

// renewBatch extends the lease of the n events in seqs by one Lease,
// logging what went wrong.
func (r *Relay) renewBatch(ctx context.Context, n int, seqs string) {
	if ctx.Err() != nil {
		return
	}
	held, err := r.renew(ctx, seqs)
	if err != nil {
		if ctx.Err() == nil {
			r.log.WarnContext(ctx, "herald/relay: lease renewal failed; the batch may be delivered again by another relay if its lease runs out",
				slog.String("relay", r.cfg.Name), slog.Int("events", n), slog.Any("error", err))
		}
		return
	}
	if len(held) < n {
		r.log.WarnContext(ctx, "herald/relay: lease lost for part of the batch (taken over by another relay after it expired)",
			slog.String("relay", r.cfg.Name), slog.Int("events", n), slog.Int("renewed", len(held)))
	}
}

// keepHeld is the renewal of a batch leased by lock (Config.LeaseByLock):
// a statement on its transaction restarts the server's
// idle_in_transaction_session_timeout, which the lease set to the Lease.
func (r *Relay) keepHeld(ctx context.Context, tx *sql.Tx, n int) {
	if ctx.Err() != nil {
		return
	}
	c, cancel := withTimeout(ctx, r.statementTimeout(), "lease renewal")
	defer cancel()
	if _, err := tx.ExecContext(c, "SELECT 1"); err != nil && ctx.Err() == nil {
		r.log.WarnContext(ctx, "herald/relay: could not keep the batch's locks (LeaseByLock); if they were lost the batch may be delivered again by another relay",
			slog.String("relay", r.cfg.Name), slog.Int("events", n), slog.Any("error", err))
	}
}

// renew extends the lease of the events in seqs by one Lease from the
// database's now and returns the sequences this relay still held.
func (r *Relay) renew(ctx context.Context, seqs string) (map[int64]bool, error) {
	if r.dialect == envelope.MySQL {
		return r.renewMySQL(ctx, seqs)
	}
	c, cancel := withTimeout(ctx, r.statementTimeout(), "lease renewal")
	defer cancel()
	var args []any
	if r.dialect == envelope.Postgres {
		args = []any{r.cfg.Lease.Microseconds(), seqs, r.cfg.Name, r.nowArg()}
	} else {
		args = []any{outbox.TimeArg(r.dialect, r.sqliteNow().Add(r.cfg.Lease)), seqs, r.cfg.Name}
	}
	rows, err := r.query(c, r.sql.renew, args...)
	if err != nil {
		return nil, stmtErr(c, "lease renewal", err)
	}
	defer rows.Close()
	held := map[int64]bool{}
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			return nil, stmtErr(c, "lease renewal", err)
		}
		held[s] = true
	}
	if err := rows.Err(); err != nil {
		return nil, stmtErr(c, "lease renewal", err)
	}
	return held, nil
}

// releaseEvents clears the lease of events this relay will not deliver, so
// another relay may take them at once. A failure is only logged: the lease
// expires on its own.
func (r *Relay) releaseEvents(ctx context.Context, es []*envelope.Event) {
	if len(es) == 0 {
		return
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if _, err := r.exec(c, r.sql.release, r.seqArg(es), r.cfg.Name); err != nil {
		r.log.DebugContext(ctx, "herald/relay: could not release events", slog.String("relay", r.cfg.Name), slog.Any("error", err))
	}
}

// nowArg binds the database's now for the statements that take it: on
// PostgreSQL NULL, so the statement uses now() (a test's dbClock
// instead, when set); on SQLite the clock of this machine, which is the
// database's, as text.
func (r *Relay) nowArg() any {
	if r.dialect == envelope.MySQL {
		return r.mysqlNowArg()
	}
	if r.dialect == envelope.Postgres {
		if r.dbClock != nil {
			return r.dbClock()
		}
		return nil
	}
	return outbox.TimeArg(r.dialect, r.sqliteNow())
}

// sqliteNow is SQLite's clock: the machine's (a test's dbClock instead).
func (r *Relay) sqliteNow() time.Time {
	if r.dbClock != nil {
		return r.dbClock()
	}
	return time.Now()
}

// seqArg binds a list of sequences: a bigint[] literal on PostgreSQL, a
// JSON array on SQLite. One parameter keeps the statement's text constant,
// so drivers can prepare it once.
func (r *Relay) seqArg(batch []*envelope.Event) string {
	var b strings.Builder
	lb, rb := "[", "]"
	if r.dialect == envelope.Postgres {
		lb, rb = "{", "}"
	}
	b.WriteString(lb)
	for i, e := range batch {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(e.Sequence, 10))
	}
	b.WriteString(rb)
	return b.String()
}

// failure is one failed delivery as markFailed binds it. On PostgreSQL
// the statement computes next_attempt_at (now + backoff_us) and
// dead_lettered_at (now, when dead) from the database's now; on SQLite
// they come computed from SQLite's clock.
type failure struct {
	Sequence      int64  `json:"sequence"`
	Attempts      int    `json:"attempts"`
	Error         string `json:"error"`
	BackoffUS     int64  `json:"backoff_us"`
	Dead          bool   `json:"dead"`
	NextAttemptAt any    `json:"next_attempt_at"`
	DeadLettered  any    `json:"dead_lettered_at"`

	event *envelope.Event
	err   error
	wait  time.Duration // its backoff: due again that long after it was recorded
}

// maxErrorLength cuts last_error.
const maxErrorLength = 4000

// lastError is err's text as last_error stores it: at most maxErrorLength
// bytes of valid UTF-8 without NUL. A delivery's error may hold any bytes
// (a broker's or an endpoint's answer), and PostgreSQL refuses NUL in
// text and jsonb (22P05) and invalid UTF-8 (22021): one such error would
// make the whole batch's failures unrecordable. Both become U+FFFD.
func lastError(err error) string {
	s := err.Error()
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return cut(s, maxErrorLength)
}

// mark writes the outcome of a batch: one statement for the delivered
// events, one for the failures. It runs even while the relay stops.
// Deliveries cancelled by a forced stop are released (their lease
// cleared), not counted as failures.
func (r *Relay) mark(runCtx context.Context, batch []*envelope.Event, errs []error) (pollResult, error) {
	return r.markCarry(runCtx, batch, errs, false)
}

// markCarry is mark; with carry (fuseMark) the delivered events' mark is
// left in r.carried for the next lease's transaction (pending.go).
func (r *Relay) markCarry(runCtx context.Context, batch []*envelope.Event, errs []error, carry bool) (pollResult, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), markTimeout)
	defer cancel()
	now := r.now()
	var dbNow time.Time // SQLite's clock
	if r.dialect != envelope.Postgres {
		dbNow = r.sqliteNow()
	}
	var (
		delivered, released []*envelope.Event
		failures            []failure
		res                 pollResult
	)
	forced := runCtx.Err() != nil
	held := r.held // a batch leased by lock: marked in its transaction, then committed
	r.held = nil
	for i, e := range batch {
		err := errs[i]
		switch {
		case err == nil:
			delivered = append(delivered, e)
			if e.OrderingKey != "" {
				res.keyed++
			}
		case forced, errors.Is(err, errSkipped):
			// Cancelled by a forced stop, or held back behind its key's
			// failure in this batch: not the event's fault.
			released = append(released, e)
		default:
			f := failure{Sequence: e.Sequence, Attempts: e.Attempts + 1, Error: lastError(err), event: e, err: err}
			// A permanent failure (delivery.Permanent: no route, no
			// destination) would fail the same way every time: it is
			// dead-lettered at once rather than holding its key through
			// MaxAttempts backoffs.
			if f.Attempts >= r.cfg.MaxAttempts || errors.Is(err, delivery.ErrPermanent) {
				f.Dead = true
				if r.dialect != envelope.Postgres {
					f.DeadLettered = outbox.TimeArg(r.dialect, dbNow)
				}
			} else {
				b := r.backoff(f.Attempts)
				f.wait = b
				f.BackoffUS = b.Microseconds()
				if r.dialect != envelope.Postgres {
					f.NextAttemptAt = outbox.TimeArg(r.dialect, dbNow.Add(b))
				}
			}
			failures = append(failures, f)
		}
	}
	var errOut []error
	if held != nil {
		return r.markHeld(ctx, held, delivered, failures, now, res)
	}
	if len(delivered) > 0 {
		if carry {
			// Observed once the carried mark is written (observeCarried).
			r.carried = &carriedMark{delivered: delivered, seqs: r.seqArg(delivered), at: now}
		} else {
			if err := r.markDelivered(ctx, delivered, r.seqArg(delivered)); err != nil {
				errOut = append(errOut, err)
			}
			r.observeDelivered(ctx, delivered, now)
		}
	}
	if len(failures) > 0 {
		var recorded map[int64]sqltime.NullTime
		err := retryMark(ctx, func() (err error) {
			recorded, err = r.markFailed(ctx, failures)
			return err
		})
		// The database counts each backoff from its now() during that
		// statement (PostgreSQL's, or MySQL's when the relay binds none),
		// which is after the relay read its clock at the top of this
		// function: counted from then, the relay woke for the retry before
		// the database had it due, by as long as the delivery's marks took,
		// found nothing to lease, and waited its poll interval — up to
		// MaxPollInterval, a minute with a wakeup — for a retry RetryBase
		// away (TestRetryDueAfterASlowMark). Counted from the statement's
		// return, the relay's wake comes after the database's due time
		// whatever the two clocks read: only elapsed time is compared.
		recordedAt := r.now()
		if err != nil {
			r.log.ErrorContext(ctx, "herald/relay: could not record failed deliveries; they will be tried again when their lease expires",
				slog.String("relay", r.cfg.Name), slog.Int("events", len(failures)), slog.Any("error", err))
			errOut = append(errOut, err)
		}
		r.reportFailures(ctx, failures, recorded, err, recordedAt, &res)
	}
	r.releaseEvents(ctx, released)
	return res, errors.Join(errOut...)
}

// heldLease is a batch leased by lock (Config.LeaseByLock): the
// transaction holding its rows locked, and each row's ctid by sequence, as
// the lease returned them (for the mark: tidArg).
type heldLease struct {
	tx   *sql.Tx
	tids map[int64]string
}

// markHeld writes the outcome of a batch leased by lock
// (Config.LeaseByLock) in the lease's transaction and commits it: the
// mark of the delivered events and the failures' in one commit, which
// also releases the batch's locks. The events released (a forced stop)
// need nothing: the commit unlocks them as they were. If a statement or
// the commit fails, none of it holds (the transaction is rolled back, or
// its outcome is unknown): the batch is pending again and is delivered
// again, as after a failed mark.
func (r *Relay) markHeld(ctx context.Context, held *heldLease, delivered []*envelope.Event, failures []failure, now time.Time, res pollResult) (pollResult, error) {
	tx := held.tx
	var err error
	marked := int64(-1)
	if len(delivered) > 0 {
		var out sql.Result
		rows := tidArg(delivered, held.tids)
		if r.cfg.DeleteOnPublish {
			out, err = tx.ExecContext(ctx, r.sql.deletePublishedLocked, r.args([]any{rows})...)
		} else {
			out, err = tx.ExecContext(ctx, r.sql.markPublishedLocked, r.args([]any{r.nowArg(), rows, r.cfg.Name})...)
		}
		if err == nil {
			marked, _ = out.RowsAffected()
		}
	}
	var recorded map[int64]sqltime.NullTime
	if err == nil && len(failures) > 0 {
		recorded, err = r.markFailedIn(ctx, tx, failures)
	}
	if err == nil {
		err = tx.Commit()
	} else {
		_ = tx.Rollback()
	}
	recordedAt := r.now() // see markCarry
	if err != nil {
		err = stmtErr(ctx, "mark", err)
		r.log.ErrorContext(ctx, "herald/relay: could not mark a batch leased by lock (LeaseByLock); its events are pending again and will be delivered again",
			slog.String("relay", r.cfg.Name), slog.Int("delivered", len(delivered)), slog.Int("failed", len(failures)), slog.Any("error", err))
	}
	if len(delivered) > 0 {
		if err == nil && marked >= 0 {
			r.warnUnmarked(ctx, len(delivered), marked)
		}
		r.observeDelivered(ctx, delivered, now)
	}
	if len(failures) > 0 {
		r.reportFailures(ctx, failures, recorded, err, recordedAt, &res)
	}
	return res, err
}

// tidArg binds the rows of es by their ctids in tids (as their lease by
// lock returned them) as a tid[] literal: {"(0,1)","(0,2)"}.
func tidArg(es []*envelope.Event, tids map[int64]string) string {
	var b strings.Builder
	b.Grow(len(es) * 12)
	b.WriteByte('{')
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(tids[e.Sequence])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// reportFailures logs the failures of a batch and tells the Observer, once
// markFailed returned recorded (err: it did not), and schedules their
// retries' wake in res, from recordedAt (see markCarry).
func (r *Relay) reportFailures(ctx context.Context, failures []failure, recorded map[int64]sqltime.NullTime, err error, recordedAt time.Time, res *pollResult) {
	for _, f := range failures {
		e := f.event
		attrs := []any{slog.String("relay", r.cfg.Name), slog.String("event_id", e.ID.String()),
			slog.Int64("sequence", e.Sequence), slog.String("topic", e.Topic), slog.Int("attempts", f.Attempts), slog.Any("error", f.err)}
		if e.OrderingKey != "" {
			attrs = append(attrs, slog.String("ordering_key", e.OrderingKey))
		}
		next, ok := recorded[e.Sequence]
		switch {
		case err != nil:
		case !ok:
			r.log.WarnContext(ctx, "herald/relay: delivery failed; not recorded because the event is no longer leased by this relay",
				attrs...)
		case f.Dead:
			msg := "herald/relay: event dead-lettered: out of attempts; it and later events of its ordering key wait for RetryDeadLettered"
			if f.Attempts < r.cfg.MaxAttempts {
				msg = "herald/relay: event dead-lettered: permanent failure, not retried; it and later events of its ordering key wait for RetryDeadLettered"
			}
			r.log.ErrorContext(ctx, msg, append(attrs, slog.Int("max_attempts", r.cfg.MaxAttempts))...)
			if r.cfg.Observer != nil {
				r.observe(ctx, "DeadLettered", func() {
					r.cfg.Observer.DeadLettered(ctx, DeadLettered{Relay: r.cfg.Name, Event: e, Err: f.err, Attempts: f.Attempts})
				})
			}
		default:
			r.log.WarnContext(ctx, "herald/relay: delivery failed; will retry",
				append(attrs, slog.Time("next_attempt_at", next.Time))...)
			if r.cfg.Observer != nil {
				r.observe(ctx, "Failed", func() {
					r.cfg.Observer.Failed(ctx, Failed{Relay: r.cfg.Name, Event: e, Err: f.err, Attempts: f.Attempts, NextAttemptAt: next.Time})
				})
			}
			due := recordedAt.Add(f.wait)
			if res.nextDue.IsZero() || due.Before(res.nextDue) {
				res.nextDue = due
			}
			if due.After(res.lastDue) {
				res.lastDue = due
			}
		}
	}
}

// observe calls an Observer method. A panic in it is logged, not let
// through: it would end the relay's loop (and the process) over a metric.
func (r *Relay) observe(ctx context.Context, method string, call func()) {
	defer func() {
		if v := recover(); v != nil {
			r.log.ErrorContext(ctx, "herald/relay: the Observer panicked; the relay goes on",
				slog.String("relay", r.cfg.Name), slog.String("method", method), slog.Any("panic", v))
		}
	}()
	call()
}

// markRetries are the waits before the second and later tries of a mark
// statement. Both marks are idempotent (they set absolute values, guarded by
// leased_by and published_at IS NULL), so a statement that failed — SQLite
// still busy after its timeout, a dropped connection — is simply run again:
// an unmarked batch would stay leased until its lease expires, holding back
// its ordering keys, and then be delivered a second time.
var markRetries = []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, time.Second}

// retryMark runs mark until it succeeds, the retries are spent, or ctx
// (the mark's own timeout) ends.
func retryMark(ctx context.Context, mark func() error) error {
	err := mark()
	for _, wait := range markRetries {
		if err == nil || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = mark()
	}
	return err
}

func (r *Relay) markFailed(ctx context.Context, failures []failure) (map[int64]sqltime.NullTime, error) {
	if r.dialect == envelope.MySQL {
		return r.markFailedMySQL(ctx, failures)
	}
	return r.markFailedIn(ctx, nil, failures)
}

// markFailedIn is markFailed on PostgreSQL and SQLite; with tx (a batch
// leased by lock, PostgreSQL) in that transaction, without the leased_by
// guard (markFailedLockedPostgres).
func (r *Relay) markFailedIn(ctx context.Context, tx *sql.Tx, failures []failure) (map[int64]sqltime.NullTime, error) {
	doc, err := json.Marshal(failures)
	if err != nil {
		return nil, fmt.Errorf("herald/relay: mark failed: %w", err)
	}
	args := []any{string(doc), r.cfg.Name}
	if r.dialect == envelope.Postgres {
		args = append(args, r.nowArg())
	}
	var rows *sql.Rows
	if tx != nil {
		rows, err = tx.QueryContext(ctx, r.sql.markFailedLocked, r.args(args)...)
	} else {
		rows, err = r.query(ctx, r.sql.markFailed, args...)
	}
	if err != nil {
		return nil, stmtErr(ctx, "mark failed", err)
	}
	defer rows.Close()
	recorded := make(map[int64]sqltime.NullTime, len(failures))
	for rows.Next() {
		var s int64
		var next sqltime.NullTime
		if err := rows.Scan(&s, &next); err != nil {
			return nil, stmtErr(ctx, "mark failed", err)
		}
		recorded[s] = next
	}
	if err := rows.Err(); err != nil {
		return nil, stmtErr(ctx, "mark failed", err)
	}
	return recorded, nil
}

// backoff is the wait after the attempts-th failure:
// min(RetryBase·2^(attempts−1), RetryMax), ±10% jitter.
func (r *Relay) backoff(attempts int) time.Duration {
	d := r.cfg.RetryMax
	if n := attempts - 1; n < 62 {
		if b := r.cfg.RetryBase << n; b>>n == r.cfg.RetryBase && b < d {
			d = b
		}
	}
	// ±10% jitter, computed in float64 and clamped: RetryMax may be near
	// the largest Duration ("no cap"), and 1.1 times it overflows.
	f := float64(d) * (0.9 + 0.2*r.jitter())
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(f)
}

// cut shortens s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
