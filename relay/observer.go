package relay

import (
	"context"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// Observer is told what happens to the events a relay handles: a hook for
// metrics and alerts that adds no dependency. The relay calls it from its
// own goroutine after the batch's marks are written, so it must be quick
// and must not block; it must not modify the events. A panic in it is
// recovered and logged at ERROR.
//
// ObserverFuncs adapts a set of functions, and embedding it (or
// NopObserver) in a type lets that type implement only the methods it
// needs.
type Observer interface {
	// Delivered is called for each event the delivery accepted.
	Delivered(ctx context.Context, d Delivered)
	// Failed is called for each failed delivery that was recorded and will
	// be tried again.
	Failed(ctx context.Context, f Failed)
	// DeadLettered is called for each event that ran out of attempts or
	// failed permanently (delivery.ErrPermanent).
	DeadLettered(ctx context.Context, d DeadLettered)
}

// PollObserver is an Observer that is also told of each poll: a relay
// whose Config.Observer implements it calls Polled after every poll that
// ran its lease, an empty one included, from the poll loop's goroutine
// (quick, non-blocking, as the Observer's other methods).
type PollObserver interface {
	Observer
	Polled(ctx context.Context, p Poll)
}

// Poll describes one poll: the lease, the delivery of what it took, and
// the marks.
type Poll struct {
	Relay    string        // the relay's Name
	Leased   int           // events the lease took (0: nothing was due)
	Lease    time.Duration // the lease statement, with its transaction where it has one (and the last batch's mark carried into it)
	Deliver  time.Duration // delivering the batch (0 for an empty lease)
	Duration time.Duration // the whole poll: lease, hold, delivery and marks
	Err      error         // the lease's or the marks' error, if any
}

// Delivered describes a delivered event.
type Delivered struct {
	Relay string          // the relay's Name
	Event *envelope.Event // as leased: Attempts counts the failures before this delivery
	Delay time.Duration   // from the event's CreatedAt to its delivery
}

// Failed describes a failed delivery that will be tried again.
type Failed struct {
	Relay         string
	Event         *envelope.Event // as leased
	Err           error           // what the delivery returned (a *DecodeError for a row that could not be decoded)
	Attempts      int             // failed deliveries so far, this one included
	NextAttemptAt time.Time       // when it is due again, by the database's clock
}

// DeadLettered describes an event that ran out of attempts or failed
// permanently (errors.Is(Err, delivery.ErrPermanent)).
type DeadLettered struct {
	Relay    string
	Event    *envelope.Event // as leased
	Err      error           // what the last delivery returned (a *DecodeError for a row that could not be decoded)
	Attempts int             // failed deliveries, the last one included
}

// ObserverFuncs is an Observer made of optional functions; a nil field
// ignores that call.
//
//	cfg := relay.Config{Observer: relay.ObserverFuncs{
//		OnDeadLettered: func(ctx context.Context, d relay.DeadLettered) { alert(d.Event.ID, d.Err) },
//	}}
type ObserverFuncs struct {
	OnDelivered    func(ctx context.Context, d Delivered)
	OnFailed       func(ctx context.Context, f Failed)
	OnDeadLettered func(ctx context.Context, d DeadLettered)
}

var _ Observer = ObserverFuncs{}

// Delivered calls OnDelivered, if set.
func (o ObserverFuncs) Delivered(ctx context.Context, d Delivered) {
	if o.OnDelivered != nil {
		o.OnDelivered(ctx, d)
	}
}

// Failed calls OnFailed, if set.
func (o ObserverFuncs) Failed(ctx context.Context, f Failed) {
	if o.OnFailed != nil {
		o.OnFailed(ctx, f)
	}
}

// DeadLettered calls OnDeadLettered, if set.
func (o ObserverFuncs) DeadLettered(ctx context.Context, d DeadLettered) {
	if o.OnDeadLettered != nil {
		o.OnDeadLettered(ctx, d)
	}
}

// NopObserver ignores everything; embed it to implement only some methods.
type NopObserver struct{}

var _ Observer = NopObserver{}

func (NopObserver) Delivered(context.Context, Delivered)       {}
func (NopObserver) Failed(context.Context, Failed)             {}
func (NopObserver) DeadLettered(context.Context, DeadLettered) {}
