// Package deliverycall is how herald's own packages call a delivery: the
// relay, the Router, otelherald's tracing wrapper and the tests' harness.
// A call turns a panic into a *delivery.PanicError, checks a batch
// result's length, bounds each call by a timeout (a *delivery.TimeoutError)
// and runs plain deliveries of a batch concurrently. It is internal so that
// package delivery's godoc shows what a delivery implements and what a user
// calls.
//
// The functions are package delivery's own (it sets the hooks in its
// init); the interfaces here have the method sets of delivery.Delivery,
// delivery.BatchDelivery and delivery.TxDelivery, so those values convert
// implicitly.
package deliverycall

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// DefaultConcurrency is how many events of plain deliveries a batch
// delivers at once by default: relay.DefaultConcurrency, and the Router's
// when Routing.Concurrency is zero.
const DefaultConcurrency = 10

// Delivery has delivery.Delivery's method set.
type Delivery interface {
	Deliver(ctx context.Context, e *envelope.Event) error
	Close() error
}

// BatchDelivery has delivery.BatchDelivery's method set.
type BatchDelivery interface {
	Delivery
	DeliverBatch(ctx context.Context, es []*envelope.Event) []error
}

// TxDelivery has delivery.TxDelivery's method set.
type TxDelivery interface {
	Delivery
	DeliverTx(ctx context.Context, tx *sql.Tx, es []*envelope.Event) []error
}

// Hooks are set by package delivery's init. Call the functions below.
var Hooks struct {
	Call      func(ctx context.Context, d Delivery, e *envelope.Event) error
	CallBatch func(ctx context.Context, d BatchDelivery, es []*envelope.Event) []error
	CallTx    func(ctx context.Context, d TxDelivery, tx *sql.Tx, es []*envelope.Event) []error
	Each      func(ctx context.Context, d Delivery, es []*envelope.Event, concurrency int, timeout time.Duration) []error
}

// Call calls d.Deliver(ctx, e) and turns a panic into a *delivery.PanicError.
func Call(ctx context.Context, d Delivery, e *envelope.Event) error {
	return Hooks.Call(ctx, d, e)
}

// CallBatch calls d.DeliverBatch(ctx, es) and checks what it returns: a
// panic becomes a *delivery.PanicError for every event, and a result of the
// wrong length an error for every event. It always returns len(es) errors.
func CallBatch(ctx context.Context, d BatchDelivery, es []*envelope.Event) []error {
	return Hooks.CallBatch(ctx, d, es)
}

// CallTx calls d.DeliverTx(ctx, tx, es) and checks what it returns, as
// CallBatch does.
func CallTx(ctx context.Context, d TxDelivery, tx *sql.Tx, es []*envelope.Event) []error {
	return Hooks.CallTx(ctx, d, tx, es)
}

// Each delivers es through d, up to concurrency at once (at least one),
// each call bounded by timeout (none when timeout <= 0: past it the error
// is a *delivery.TimeoutError) and a panic turned into a
// *delivery.PanicError. It returns one error per event, in the order of
// es. It is what the relay does with a plain Delivery, and what the Router
// does with a plain route's share of a batch.
func Each(ctx context.Context, d Delivery, es []*envelope.Event, concurrency int, timeout time.Duration) []error {
	return Hooks.Each(ctx, d, es, concurrency, timeout)
}
