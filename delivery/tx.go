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

// callTx calls d.DeliverTx(ctx, tx, es) and checks what it returns: a
// panic becomes a *PanicError for every event, and a result of the wrong
// length an error for every event. It always returns len(es) errors.
func callTx(ctx context.Context, d TxDelivery, tx *sql.Tx, es []*envelope.Event) (errs []error) {
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

// AsTx returns d as a TxDelivery when it is one: a TxDelivery, or a
// Routing whose every route (and fallback) is a TxDelivery (InTx). A
// Routing with a route of another kind is not: its routes deliver outside
// the relay's transaction, at least once, so give the TxDelivery routes a
// relay of their own (relay.Config.Topics) to keep them exactly once.
// The relay calls it on its delivery; wrappers (otelherald.Delivery) call
// it on the delivery they wrap.
func AsTx(d Delivery) (TxDelivery, bool) {
	switch t := d.(type) {
	case TxDelivery:
		return t, true
	case *Routing:
		if t.InTx() {
			return txRouting{t}, true
		}
	}
	return nil, false
}

// InTx reports whether every route of r, and its fallback, is a
// TxDelivery (AsTx of one): then AsTx(r) delivers each route's share in
// the relay's transaction.
func (r *Routing) InTx() bool {
	if len(r.targets) == 0 {
		return false
	}
	for _, d := range r.targets {
		if _, ok := AsTx(d); !ok {
			return false
		}
	}
	return true
}

// txRouting is a Routing of TxDelivery routes as a TxDelivery.
type txRouting struct{ *Routing }

var _ BatchDelivery = txRouting{}

// DeliverTx splits es by route and hands each route its share in tx, one
// route after the other (a transaction runs one statement at a time), in
// the order of their first event; an event no route accepts fails
// Permanent.
func (r txRouting) DeliverTx(ctx context.Context, tx *sql.Tx, es []*envelope.Event) []error {
	errs := make([]error, len(es))
	failed := false
	var order []int
	by := map[int][]int{}
	for i, e := range es {
		t := r.route(e.Topic)
		if t < 0 {
			errs[i] = unrouted(e)
			failed = true
			continue
		}
		if _, ok := by[t]; !ok {
			order = append(order, t)
		}
		by[t] = append(by[t], i)
	}
	for _, t := range order {
		idx := by[t]
		td, _ := AsTx(r.targets[t])
		sub := make([]*envelope.Event, len(idx))
		for j, i := range idx {
			sub[j] = es[i]
		}
		for j, err := range callTx(ctx, td, tx, sub) {
			if err != nil {
				errs[idx[j]] = err
				failed = true
			}
		}
	}
	if !failed {
		return nil
	}
	return errs
}
