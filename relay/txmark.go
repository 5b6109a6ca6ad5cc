package relay

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverycall"
)

// txOutcome is how one transaction of a TxDelivery ended.
type txOutcome int

const (
	txCommitted txOutcome = iota // written and marked
	txFailed                     // some events failed; rolled back
	txReleased                   // not begun, or its mark failed or fell short; rolled back: nothing written
	txUnknown                    // the commit failed: written and marked, or neither
)

// deliverTx delivers a batch through a delivery.TxDelivery: its writes and
// the mark of the events it wrote commit in one transaction of the
// relay's own, which commits only when the mark's RowsAffected equals the
// events written. When some events fail the transaction is rolled back
// and the rest (less the later events of a failed event's key) go again
// in a new one. The failures, and the events released, are then marked
// as every batch's are (mark).
func (r *Relay) deliverTx(ctx context.Context, batch []*envelope.Event, errs []error, since time.Time) (pollResult, error) {
	ren := r.startRenewal(ctx, batch, since)
	done := make([]bool, len(batch)) // committed, or of unknown outcome: not marked again
	var committed []*envelope.Event
	var errOut []error
	// A key behind an event that could not be decoded waits.
	blocked := map[string]bool{}
	var pending []int
	for i, e := range batch {
		switch k := e.OrderingKey; {
		case errs[i] != nil:
			if k != "" {
				blocked[k] = true
			}
		case k != "" && blocked[k]:
			errs[i] = errSkipped
		default:
			pending = append(pending, i)
		}
	}
	for len(pending) > 0 {
		if ctx.Err() != nil {
			for _, i := range pending {
				errs[i] = context.Cause(ctx)
			}
			break
		}
		es := make([]*envelope.Event, len(pending))
		for j, i := range pending {
			es[j] = batch[i]
		}
		got, outcome, err := r.txAttempt(ctx, es)
		if err != nil {
			errOut = append(errOut, err)
		}
		switch outcome {
		case txCommitted:
			for _, i := range pending {
				done[i] = true
			}
			committed = append(committed, es...)
			pending = nil
		case txUnknown:
			// Leased until the lease expires (then delivered again), or
			// published: either way not marked again here.
			for _, i := range pending {
				done[i] = true
			}
			pending = nil
		case txReleased:
			for _, i := range pending {
				errs[i] = errSkipped
			}
			pending = nil
		default:
			// Some events failed: they, and the later events of their
			// keys, stay out of the next transaction.
			var next []int
			failedKey := map[string]bool{}
			for j, i := range pending {
				k := batch[i].OrderingKey
				switch {
				case got[j] != nil:
					errs[i] = got[j]
					if k != "" {
						failedKey[k] = true
					}
				case k != "" && failedKey[k]:
					errs[i] = errSkipped
				default:
					next = append(next, i)
				}
			}
			pending = next
		}
	}
	ren.stop()
	var res pollResult
	now := r.now()
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	for _, e := range committed {
		if e.OrderingKey != "" {
			res.keyed++
		}
		if r.cfg.Observer != nil {
			r.observe(mctx, "Delivered", func() {
				r.cfg.Observer.Delivered(mctx, Delivered{Relay: r.cfg.Name, Event: e, Delay: now.Sub(e.CreatedAt)})
			})
		}
	}
	var rest []*envelope.Event
	var restErrs []error
	for i, e := range batch {
		if !done[i] {
			rest = append(rest, e)
			restErrs = append(restErrs, errs[i])
		}
	}
	if len(rest) > 0 {
		mres, err := r.mark(ctx, rest, restErrs)
		res.nextDue, res.lastDue = mres.nextDue, mres.lastDue
		errOut = append(errOut, err)
	}
	return res, errors.Join(errOut...)
}

// txAttempt writes es through the TxDelivery and marks them published in
// one transaction, and says how it ended; got holds the delivery's errors
// when some failed (txFailed), and err a database failure.
func (r *Relay) txAttempt(ctx context.Context, es []*envelope.Event) (got []error, _ txOutcome, err error) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DeliveryTimeout+markTimeout)
	defer cancel()
	tx, err := r.db.BeginTx(tctx, nil)
	if err != nil {
		err = stmtErr(tctx, "begin the delivery's transaction", err)
		r.log.ErrorContext(ctx, "herald/relay: could not begin the delivery's transaction; the events are released and delivered again",
			slog.String("relay", r.cfg.Name), slog.Int("events", len(es)), slog.Any("error", err))
		return nil, txReleased, err
	}
	rollback := func() { _ = tx.Rollback() }
	dctx, dcancel := context.WithTimeoutCause(ctx, r.cfg.DeliveryTimeout, &delivery.TimeoutError{Timeout: r.cfg.DeliveryTimeout})
	got = deliverycall.CallTx(dctx, r.txd, tx, es)
	timedOut := dctx.Err() != nil && ctx.Err() == nil
	dcancel()
	failed := false
	for i, e := range got {
		if e != nil {
			failed = true
			if timedOut && errors.Is(e, context.DeadlineExceeded) {
				got[i] = &delivery.TimeoutError{Timeout: r.cfg.DeliveryTimeout, Err: e}
			}
		}
	}
	if failed {
		rollback()
		return got, txFailed, nil
	}
	var res sql.Result
	if r.cfg.DeleteOnPublish {
		res, err = tx.ExecContext(tctx, r.sql.deletePublished, r.args([]any{r.seqArg(es), r.cfg.Name})...)
	} else {
		res, err = tx.ExecContext(tctx, r.sql.markPublished, r.args([]any{r.nowArg(), r.seqArg(es), r.cfg.Name})...)
	}
	if err != nil {
		rollback()
		err = stmtErr(tctx, "mark published", err)
		r.log.ErrorContext(ctx, "herald/relay: could not mark delivered events published; their transaction is rolled back and they are delivered again",
			slog.String("relay", r.cfg.Name), slog.Int("events", len(es)), slog.Any("error", err))
		return nil, txReleased, err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(es)) {
		rollback()
		r.log.WarnContext(ctx, "herald/relay: some events were no longer leased by this relay (lease expired and taken over); the delivery's transaction is rolled back, its other events released",
			slog.String("relay", r.cfg.Name), slog.Int("delivered", len(es)), slog.Int64("marked", n))
		return nil, txReleased, nil
	}
	if err := tx.Commit(); err != nil {
		err = stmtErr(tctx, "commit the delivery's transaction", err)
		r.log.ErrorContext(ctx, "herald/relay: the delivery's transaction did not commit, or its outcome is unknown; its events stay leased until the lease expires",
			slog.String("relay", r.cfg.Name), slog.Int("events", len(es)), slog.Any("error", err))
		return nil, txUnknown, err
	}
	return nil, txCommitted, nil
}
