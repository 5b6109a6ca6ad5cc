package relay

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// The mark carried into the next lease (PostgreSQL).
//
// In a drain every batch cost two commits, each waiting for its WAL flush:
// the lease's and the mark's. When a batch was delivered whole and the
// loop polls again at once (a full batch, or one with keyed events), the
// mark is not written on its own: it is carried to the next poll and runs
// as the first statement of the next lease's transaction — BEGIN, mark,
// lease, COMMIT: one commit (one WAL flush) per batch instead of two. The
// mark's statement also sets jit off for the rest of the transaction
// (set_config(…, true), evaluated in its SELECT list whatever the mark
// touched), so where JIT is possible the lease needs no SET LOCAL of its
// own: four round trips instead of five. While a backlog drains, the mark
// runs inside the next lease's statement instead — one round trip, one
// commit: of unordered events, the lease of unordered events
// (leaseUnorderedMarkedPostgres), which takes no keyed event, so it needs
// nothing of the mark, and leaves the carried events out; of keyed
// events, the lease of the next events of the keys delivered
// (leaseSuccessorsPostgres), which finds them after the carried events
// and takes them only if the mark published every carried event.
//
// At least once. Nothing is marked before it was delivered, and a carried
// mark only moves later in time. If the process dies before the fused
// transaction commits, the mark is lost with it, and the batch is still
// leased by this relay: its lease runs out and it is delivered again — a
// duplicate, as after a crash between a delivery and its own mark. The
// mark keeps its guards (leased_by this relay, not published), so if the
// lease ran out meanwhile and another relay took an event, the mark leaves
// it to that relay, as a late mark of its own would.
//
// Per-key order. A key's next event becomes a head only once the event
// before it is published. In the fused transaction the lease statement
// runs after the mark in the same transaction, so it sees the mark and may
// lease the next events of the keys just delivered; other relays see
// neither the mark nor the lease until the commit, which makes both
// visible at once; and this relay delivers nothing of the new batch before
// the commit returned. If the transaction fails, both are undone: no
// successor was leased by anyone, and the mark is written on its own
// (markCarried) before lease returns its error. Every argument of
// leaseBatchPostgres holds as before: the fused lease is the same statement
// run after the mark has committed — only its commit is shared.
//
// When not. A mark is never carried when some event of the batch failed or
// was released (the failures are recorded at once, so their retries are
// timed from now), when the loop will wait before its next poll (the mark
// would wait with it), when the run is stopping (the loop writes a carried
// mark on its own before it returns: loop's flushCarried), and never with
// AsyncCommit, whose marks must not wait for the flush that a lease's
// commit waits for (asyncCommitPostgres). On SQLite a lease is a single
// statement outside any transaction, and nothing is carried.

// carriedMark is a batch's mark carried into the next lease's transaction.
type carriedMark struct {
	delivered []*envelope.Event
	seqs      string    // r.seqArg(delivered)
	at        time.Time // when the batch was delivered (relay's clock), for Delivered.Delay
}

// fuseMark reports whether the mark of batch — delivered with errs — is
// carried into the next lease's transaction rather than written now.
// carry is false where the caller is not the poll loop (which will poll
// again at once only when the batch was full or held keyed events).
func (r *Relay) fuseMark(ctx context.Context, carry bool, batch []*envelope.Event, errs []error) bool {
	// Never for a TxDelivery: its writes commit with a mark in a
	// transaction of its own (relay/txmark.go).
	if !carry || r.held != nil || r.txd != nil || r.dialect != envelope.Postgres || r.cfg.AsyncCommit || ctx.Err() != nil || len(batch) == 0 {
		return false
	}
	keyed := false
	for i, e := range batch {
		if errs[i] != nil {
			return false
		}
		keyed = keyed || e.OrderingKey != ""
	}
	return len(batch) == r.cfg.BatchSize || keyed
}

// fusedMarkSQL wraps the relay's mark (markPublishedPostgres or
// deletePublishedPostgres) for the lease's transaction: it returns the
// rows marked and sets jit off for the rest of the transaction.
const fusedMarkSQL = `WITH herald_marked AS (%s RETURNING 1)
SELECT (SELECT count(*) FROM herald_marked), set_config('jit', 'off', true)`

// markCarriedIn runs a carried mark as the first statement of tx.
func (r *Relay) markCarriedIn(ctx context.Context, tx *sql.Tx, c *carriedMark) error {
	var q string
	var args []any
	if r.cfg.DeleteOnPublish {
		q, args = r.sql.fusedDelete, []any{c.seqs, r.cfg.Name}
	} else {
		q, args = r.sql.fusedMark, []any{r.nowArg(), c.seqs, r.cfg.Name}
	}
	var n int64
	var jit string
	if err := tx.QueryRowContext(ctx, q, r.args(args)...).Scan(&n, &jit); err != nil {
		return err
	}
	r.warnUnmarked(ctx, len(c.delivered), n)
	return nil
}

// markCarried writes a carried mark on its own: the lease it was carried
// into failed, or the loop ends.
func (r *Relay) markCarried(runCtx context.Context, c *carriedMark) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), markTimeout)
	defer cancel()
	err := r.markDelivered(ctx, c.delivered, c.seqs)
	r.observeDelivered(ctx, c.delivered, c.at)
	return err
}

// observeDelivered tells the Observer of events delivered at now (relay's
// clock), after their mark was written (or failed).
func (r *Relay) observeDelivered(ctx context.Context, delivered []*envelope.Event, now time.Time) {
	if r.cfg.Observer == nil {
		return
	}
	for _, e := range delivered {
		r.observe(ctx, "Delivered", func() {
			r.cfg.Observer.Delivered(ctx, Delivered{Relay: r.cfg.Name, Event: e, Delay: now.Sub(e.CreatedAt)})
		})
	}
}

// flushCarried writes the mark still carried, if any, on its own.
func (r *Relay) flushCarried(ctx context.Context) {
	if c := r.carried; c != nil {
		r.carried = nil
		_ = r.markCarried(ctx, c)
	}
}

// markDelivered marks delivered published (or deletes them), retrying,
// and logs what went wrong.
func (r *Relay) markDelivered(ctx context.Context, delivered []*envelope.Event, seqs string) error {
	var marked sql.Result
	err := retryMark(ctx, func() (err error) {
		if r.cfg.DeleteOnPublish {
			marked, err = r.exec(ctx, r.sql.deletePublished, seqs, r.cfg.Name)
		} else {
			marked, err = r.exec(ctx, r.sql.markPublished, r.nowArg(), seqs, r.cfg.Name)
		}
		return err
	})
	if err != nil {
		err = stmtErr(ctx, "mark published", err)
		r.log.ErrorContext(ctx, "herald/relay: could not mark delivered events published; they will be delivered again when their lease expires",
			slog.String("relay", r.cfg.Name), slog.Int("events", len(delivered)), slog.Any("error", err))
		return err
	}
	if n, err := marked.RowsAffected(); err == nil {
		r.warnUnmarked(ctx, len(delivered), n)
	}
	return nil
}

func (r *Relay) warnUnmarked(ctx context.Context, delivered int, marked int64) {
	if marked < int64(delivered) {
		r.log.WarnContext(ctx, "herald/relay: some delivered events were no longer leased by this relay (lease expired and taken over); their new holder will deliver them again",
			slog.String("relay", r.cfg.Name), slog.Int("delivered", delivered), slog.Int64("marked", marked))
	}
}
