package delivery

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverycall"

	"database/sql"
)

// ErrDelivery marks a delivery that was refused rather than one that broke
// on the way: a webhook's non-2xx answer, an event no route accepts. Match
// it with errors.Is; the message names the event and the reason.
var ErrDelivery = errors.New("herald/delivery: delivery refused")

// ErrPermanent marks a failure that trying again cannot mend: an event no
// route accepts, a destination function that gives no destination. The
// relay dead-letters such an event at once, whatever its attempts so far,
// instead of retrying it MaxAttempts times; its last_error says why, and
// RetryDeadLettered sends it again once the configuration is mended. A
// delivery returns it with Permanent; match it with errors.Is.
var ErrPermanent = errors.New("herald/delivery: permanent failure, not retried")

// Permanent returns err marked with ErrPermanent (nil for a nil err). The
// result's message is err's; errors.Is and errors.As see both.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, ErrPermanent} }

// Delivery hands events over to where they go.
//
// Deliver returns nil once e has been handed over (written to the broker,
// accepted by the endpoint); any error makes the relay try again later
// (one marked Permanent dead-letters the event at once). It must honour
// ctx: the relay bounds each call with its DeliveryTimeout and
// cancels it on a forced stop. It may be called from several goroutines at
// once (up to the relay's Concurrency) and must not keep e after it
// returns. Receivers must tolerate duplicates (de-duplicate on e.ID):
// delivery is at least once.
//
// Close releases what the delivery holds (clients, connections). The relay
// never calls it: whoever builds a delivery closes it, after the relays
// that use it have stopped.
type Delivery interface {
	Deliver(ctx context.Context, e *envelope.Event) error
	Close() error
}

// BatchDelivery is a Delivery that hands over a whole batch at once (one
// produce request, one pipeline). The relay checks for it at run time and
// then calls DeliverBatch instead of Deliver.
//
// DeliverBatch returns one error per event, in the order of es (nil for a
// delivered event), or a nil slice when every event was delivered. A batch
// holds at most one event per ordering key, so its events may be sent in
// any order. ctx is bounded by the relay's DeliveryTimeout for the batch.
type BatchDelivery interface {
	Delivery
	DeliverBatch(ctx context.Context, es []*envelope.Event) []error
}

// Func adapts a Go function to Delivery:
//
//	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
//		return publish(ctx, e.Topic, e.Payload)
//	})
type Func func(ctx context.Context, e *envelope.Event) error

var _ Delivery = Func(nil)

// Deliver calls f.
func (f Func) Deliver(ctx context.Context, e *envelope.Event) error { return f(ctx, e) }

// Close does nothing.
func (Func) Close() error { return nil }

// PanicError is the error of a delivery that panicked: the relay (and the
// Router) recover the panic and count it as that event's failure.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the panicking goroutine's stack
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("herald/delivery: delivery panicked: %v", e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// call calls d.Deliver(ctx, e) and turns a panic into a *PanicError.
func call(ctx context.Context, d Delivery, e *envelope.Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return d.Deliver(ctx, e)
}

// callBatch calls d.DeliverBatch(ctx, es) and checks what it returns: a
// panic becomes a *PanicError for every event, and a result of the wrong
// length an error for every event. It always returns len(es) errors.
func callBatch(ctx context.Context, d BatchDelivery, es []*envelope.Event) (errs []error) {
	defer func() {
		if v := recover(); v != nil {
			p := &PanicError{Value: v, Stack: debug.Stack()}
			errs = make([]error, len(es))
			for i := range errs {
				errs[i] = p
			}
		}
	}()
	got := d.DeliverBatch(ctx, es)
	switch len(got) {
	case len(es):
		return got
	case 0:
		return make([]error, len(es))
	}
	err := fmt.Errorf("herald/delivery: %T.DeliverBatch returned %d errors for %d events", d, len(got), len(es))
	errs = make([]error, len(es))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// each delivers es through d, up to concurrency at once (at least one),
// each call bounded by timeout (none when timeout <= 0) and a panic turned
// into a *PanicError. It returns one error per event, in the order of es.
// It is what the relay does with a plain Delivery, and what a BatchDelivery
// wrapping plain deliveries (the Router) does with their share of a batch.
func each(ctx context.Context, d Delivery, es []*envelope.Event, concurrency int, timeout time.Duration) []error {
	errs := make([]error, len(es))
	if len(es) == 0 {
		return errs
	}
	var cause error
	if timeout > 0 {
		cause = &TimeoutError{Timeout: timeout} // one per call: it is immutable
	}
	one := func(i int) {
		c := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			c, cancel = context.WithTimeoutCause(ctx, timeout, cause)
			defer cancel()
		}
		errs[i] = call(c, d, es[i])
		if errs[i] != nil && c.Err() != nil && ctx.Err() == nil && errors.Is(errs[i], context.DeadlineExceeded) {
			errs[i] = &TimeoutError{Timeout: timeout, Err: errs[i]}
		}
	}
	if concurrency <= 1 || len(es) == 1 {
		for i := range es {
			one(i)
		}
		return errs
	}
	// Workers take the next event by an atomic counter: cheaper than a
	// channel when deliveries are fast. The calling goroutine is one of
	// them, and the others start only when the batch is not done within
	// spawnAfter: a batch of fast deliveries (in memory, a local queue)
	// is done by the calling goroutine alone, without starting goroutines
	// that would find nothing left to do — 9 a batch at the default
	// concurrency, whose start and scheduling were a fifth of a relay's
	// CPU at its defaults (BENCHMARKS.md, "Backlog drains, sixth pass").
	// A delivery that waits (a network call) is joined by the others
	// spawnAfter after the batch began, whatever the first event does.
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < len(es); i = int(next.Add(1) - 1) {
			one(i)
		}
	}
	var wg sync.WaitGroup
	spawned := make(chan struct{})
	timer := time.AfterFunc(spawnAfter, func() {
		defer close(spawned)
		for range min(concurrency, len(es)) - 1 {
			if int(next.Load()) >= len(es) {
				return // nothing left to take
			}
			wg.Go(work)
		}
	})
	work()
	if !timer.Stop() {
		<-spawned // the workers, if any, were started: wait for them
	}
	wg.Wait()
	return errs
}

// spawnAfter is how long each's calling goroutine delivers alone before
// the other workers start.
const spawnAfter = 50 * time.Microsecond

// TimeoutError is the error of a delivery that ran out of its time.
type TimeoutError struct {
	Timeout time.Duration
	Err     error // what the delivery returned, or nil
}

func (e *TimeoutError) Error() string {
	s := "herald/delivery: delivery timed out after " + e.Timeout.String()
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns context.DeadlineExceeded and the delivery's own error.
func (e *TimeoutError) Unwrap() []error {
	if e.Err == nil {
		return []error{context.DeadlineExceeded}
	}
	return []error{context.DeadlineExceeded, e.Err}
}

// The relay, the Router, otelherald and the tests call deliveries through
// internal/deliverycall; these are its functions.
func init() {
	deliverycall.Hooks.Call = func(ctx context.Context, d deliverycall.Delivery, e *envelope.Event) error {
		return call(ctx, d, e)
	}
	deliverycall.Hooks.CallBatch = func(ctx context.Context, d deliverycall.BatchDelivery, es []*envelope.Event) []error {
		return callBatch(ctx, d, es)
	}
	deliverycall.Hooks.CallTx = func(ctx context.Context, d deliverycall.TxDelivery, tx *sql.Tx, es []*envelope.Event) []error {
		return callTx(ctx, d, tx, es)
	}
	deliverycall.Hooks.Each = func(ctx context.Context, d deliverycall.Delivery, es []*envelope.Event, concurrency int, timeout time.Duration) []error {
		return each(ctx, d, es, concurrency, timeout)
	}
}
