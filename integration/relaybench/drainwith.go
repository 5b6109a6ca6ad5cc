package relaybench

import (
	"context"
	"database/sql"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

// DrainWith is DrainRelays with the caller's delivery: relays relays
// deliver the n pending events of table through d (a transport being
// measured, or NoopBatch for the baseline); it returns how long they took
// to deliver and mark all of them.
func DrainWith(ctx context.Context, db *sql.DB, table string, n, batchSize, relays int, d delivery.Delivery) (time.Duration, error) {
	var marked atomic.Int64
	done := make(chan struct{})
	obs := relay.ObserverFuncs{OnDelivered: func(context.Context, relay.Delivered) {
		if marked.Add(1) == int64(n) {
			close(done)
		}
	}}
	var rs []*relay.Relay
	for i := range relays {
		r, err := relay.New(db, d, relay.Config{
			Table: table, Dialect: envelope.Postgres, BatchSize: batchSize, Name: "bench-" + strconv.Itoa(i),
			Observer: obs, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return 0, err
		}
		rs = append(rs, r)
	}
	start := time.Now()
	for _, r := range rs {
		if err := r.Start(ctx); err != nil {
			return 0, err
		}
	}
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	elapsed := time.Since(start)
	for _, r := range rs {
		_ = r.Stop(context.Background())
	}
	return elapsed, err
}

// NoopBatch is a BatchDelivery that delivers nothing, at once: the
// baseline a transport's drain is compared with.
type NoopBatch struct{}

func (NoopBatch) Deliver(context.Context, *envelope.Event) error { return nil }

func (NoopBatch) DeliverBatch(context.Context, []*envelope.Event) []error { return nil }

func (NoopBatch) Close() error { return nil }
