package river

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// ArgsFunc builds the job of an event: its args (whose Kind names the
// worker) and its insert options (queue, priority, unique options, …;
// nil = the args' own InsertOpts and River's defaults). An error fails
// the event at once, dead-lettered (ErrDelivery, ErrPermanent).
type ArgsFunc func(e *envelope.Event) (river.JobArgs, *river.InsertOpts, error)

// Config configures a Delivery whose River tables are in the outbox's
// database.
type Config struct {
	// Client is a River client on a riverdatabasesql driver (an
	// insert-only client needs no Queues or Workers); the delivery never
	// stops it.
	Client *river.Client[*sql.Tx]
	// Args builds each event's job.
	Args ArgsFunc
}

// Delivery inserts one River job per event. It is a
// delivery.TxDelivery: a relay inserts a batch's jobs with one
// InsertManyTx in the transaction that marks the events published, so a
// job exists exactly when its event is marked: exactly once into River.
type Delivery struct {
	client *river.Client[*sql.Tx]
	args   ArgsFunc
}

var _ delivery.TxDelivery = (*Delivery)(nil)

// New checks cfg and returns a Delivery.
func New(cfg Config) (*Delivery, error) {
	switch {
	case cfg.Client == nil:
		return nil, outbox.Configurationf("river.Config.Client", "not set; give a River client on a riverdatabasesql driver")
	case cfg.Args == nil:
		return nil, outbox.Configurationf("river.Config.Args", "not set; give a function that builds each event's job")
	}
	return &Delivery{client: cfg.Client, args: cfg.Args}, nil
}

// params builds the jobs of es; errs holds each event's failure, or is
// nil.
func params(fn ArgsFunc, es []*envelope.Event) (ps []river.InsertManyParams, idx []int, errs []error) {
	ps = make([]river.InsertManyParams, 0, len(es))
	idx = make([]int, 0, len(es))
	for i, e := range es {
		a, o, err := fn(e)
		if err == nil && a == nil {
			err = fmt.Errorf("no job args")
		}
		if err != nil {
			if errs == nil {
				errs = make([]error, len(es))
			}
			errs[i] = delivery.Permanent(fmt.Errorf("herald/river: event %s (topic %q): Args: %w: %w", e.ID, e.Topic, err, delivery.ErrDelivery))
			continue
		}
		ps = append(ps, river.InsertManyParams{Args: a, InsertOpts: o})
		idx = append(idx, i)
	}
	return ps, idx, errs
}

// failAll returns errs with every event of idx failed with err.
func failAll(errs []error, n int, idx []int, err error) []error {
	if errs == nil {
		errs = make([]error, n)
	}
	for _, i := range idx {
		errs[i] = err
	}
	return errs
}

// DeliverTx inserts the jobs of es in tx with one InsertManyTx, in the
// order of es.
func (d *Delivery) DeliverTx(ctx context.Context, tx *sql.Tx, es []*envelope.Event) []error {
	ps, idx, errs := params(d.args, es)
	if errs != nil || len(ps) == 0 {
		// The relay rolls tx back and tries the others again: insert
		// nothing now.
		return errs
	}
	if _, err := d.client.InsertManyTx(ctx, tx, ps); err != nil {
		return failAll(errs, len(es), idx, fmt.Errorf("herald/river: insert %d jobs: %w", len(ps), err))
	}
	return nil
}

// Deliver inserts the job of one event in a transaction of its own: what
// a Router with routes of other kinds calls, at least once (the job
// exists before the relay marks the event).
func (d *Delivery) Deliver(ctx context.Context, e *envelope.Event) error {
	ps, _, errs := params(d.args, []*envelope.Event{e})
	if errs != nil {
		return errs[0]
	}
	if _, err := d.client.InsertMany(ctx, ps); err != nil {
		return fmt.Errorf("herald/river: insert the job of event %s: %w", e.ID, err)
	}
	return nil
}

// Close does nothing: the client is the caller's.
func (d *Delivery) Close() error { return nil }

// Inserter is what AtLeastOnce needs of a River client: any
// *river.Client[TTx] is one, whatever its driver.
type Inserter interface {
	InsertMany(ctx context.Context, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// AtLeastOnceConfig configures an AtLeastOnce delivery.
type AtLeastOnceConfig struct {
	// Client is a River client of any driver, whose tables may be in
	// another database than the outbox's; the delivery never stops it.
	Client Inserter
	// Args builds each event's job. Put the event id in the args (in a
	// field tagged `river:"unique"`, or the args are unique as a whole):
	// the job is inserted with UniqueOpts.ByArgs, so a redelivered event
	// finds its job and inserts no second one.
	Args ArgsFunc
}

// AtLeastOnce inserts one River job per event, outside the outbox's
// transaction (River in another database): a job is inserted before its
// event is marked, so a relay crash between them redelivers the event,
// and River's unique jobs (UniqueOpts.ByArgs, on the event id in the
// args) keep it to one job. It is a delivery.BatchDelivery: a batch is
// one InsertMany.
type AtLeastOnce struct {
	client Inserter
	args   ArgsFunc
}

var _ delivery.BatchDelivery = (*AtLeastOnce)(nil)

// NewAtLeastOnce checks cfg and returns an AtLeastOnce delivery.
func NewAtLeastOnce(cfg AtLeastOnceConfig) (*AtLeastOnce, error) {
	switch {
	case cfg.Client == nil:
		return nil, outbox.Configurationf("river.AtLeastOnceConfig.Client", "not set; give a River client")
	case cfg.Args == nil:
		return nil, outbox.Configurationf("river.AtLeastOnceConfig.Args", "not set; give a function that builds each event's job")
	}
	return &AtLeastOnce{client: cfg.Client, args: cfg.Args}, nil
}

// unique returns the params with UniqueOpts.ByArgs set on each (on a copy
// of its options).
func unique(ps []river.InsertManyParams) {
	for i := range ps {
		o := river.InsertOpts{}
		if ps[i].InsertOpts != nil {
			o = *ps[i].InsertOpts
		} else if a, ok := ps[i].Args.(river.JobArgsWithInsertOpts); ok {
			o = a.InsertOpts()
		}
		o.UniqueOpts.ByArgs = true
		ps[i].InsertOpts = &o
	}
}

// DeliverBatch inserts the jobs of es with one InsertMany.
func (d *AtLeastOnce) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	ps, idx, errs := params(d.args, es)
	if len(ps) == 0 {
		return errs
	}
	unique(ps)
	if _, err := d.client.InsertMany(ctx, ps); err != nil {
		return failAll(errs, len(es), idx, fmt.Errorf("herald/river: insert %d jobs: %w", len(ps), err))
	}
	return errs
}

// Deliver inserts the job of one event.
func (d *AtLeastOnce) Deliver(ctx context.Context, e *envelope.Event) error {
	if errs := d.DeliverBatch(ctx, []*envelope.Event{e}); errs != nil {
		return errs[0]
	}
	return nil
}

// Close does nothing: the client is the caller's.
func (d *AtLeastOnce) Close() error { return nil }
