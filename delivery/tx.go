package delivery

import (
	"context"
	"database/sql"
	"fmt"
	"runtime/debug"

	"github.com/heraldgo/herald/envelope"
)

// TxDelivery is a Delivery whose destination is a table in the outbox's
// own database (a job queue such as River). The relay hands it the
// transaction that marks the batch published: DeliverTx writes the
// events in tx, the relay then marks them in tx and commits only when the
// mark took every event the delivery wrote (none was taken over by
// another relay meanwhile). So the writes exist exactly when their events
// are marked published: exactly once, not at least once; a relay crash
// before the commit leaves neither.
//
// DeliverTx returns one error per event, in the order of es (nil for a
// written event), or a nil slice when every event was written. When any
// event fails the relay rolls tx back and calls DeliverTx again, in a new
// transaction, with the events that may still go (not the failed ones,
// nor the later events of their keys); it must therefore write nothing
// outside tx. es may hold several events of one ordering key, in sequence
// order: write them in that order. ctx is bounded by the relay's
// DeliveryTimeout; tx is the relay's and must not be committed or rolled
// back.
//
// Deliver is what the delivery does outside a relay's transaction (a
// Router with routes of other kinds calls it): at least once.
type TxDelivery interface {
	Delivery
	DeliverTx(ctx context.Context, tx *sql.Tx, es []*envelope.Event) []error
}

// CallTx calls d.DeliverTx(ctx, tx, es) and checks what it returns: a
// panic becomes a *PanicError for every event, and a result of the wrong
// length an error for every event. It always returns len(es) errors.
func CallTx(ctx context.Context, d TxDelivery, tx *sql.Tx, es []*envelope.Event) (errs []error) {
	defer func() {
		if v := recover(); v != nil {
			p := &PanicError{Value: v, Stack: debug.Stack()}
			errs = make([]error, len(es))
			for i := range errs {
				errs[i] = p
			}
		}
	}()
	got := d.DeliverTx(ctx, tx, es)
	switch len(got) {
	case len(es):
		return got
	case 0:
		return make([]error, len(es))
	}
	err := fmt.Errorf("herald/delivery: %T.DeliverTx returned %d errors for %d events", d, len(got), len(es))
	errs = make([]error, len(es))
	for i := range errs {
		errs[i] = err
	}
	return errs
}
