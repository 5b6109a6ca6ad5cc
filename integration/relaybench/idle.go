package relaybench

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

// IdleStatements runs one relay on an empty table for d, through a pool
// that counts statements, and returns how many statements it issued after
// Start (the ping is not a statement). scale divides the relay's poll
// intervals (MinPollInterval, and MaxPollInterval, either given in cfg or
// the defaults) so that d = time.Hour/scale stands for an hour; wakeup
// says whether the relay has a Wakeup (which changes the default
// MaxPollInterval, and costs no statements: InProcess).
func IdleStatements(ctx context.Context, dsn, table string, withWakeup bool, scale float64, d time.Duration) (int64, error) {
	var n atomic.Int64
	db, err := OpenCounting(dsn, &n)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if err := Reset(ctx, db, table); err != nil {
		return 0, err
	}
	cfg := relay.Config{Table: table, Dialect: envelope.Postgres, Logger: slog.New(slog.DiscardHandler)}
	maxPoll := relay.DefaultMaxPollInterval
	if withWakeup {
		w := wakeup.NewInProcess()
		defer w.Close()
		cfg.Wakeup = w
		maxPoll = relay.DefaultMaxPollIntervalWithWakeup
	}
	cfg.MinPollInterval = time.Duration(float64(relay.DefaultMinPollInterval) / scale)
	cfg.MaxPollInterval = time.Duration(float64(maxPoll) / scale)
	r, err := relay.New(db, delivery.Func(func(context.Context, *envelope.Event) error { return nil }), cfg)
	if err != nil {
		return 0, err
	}
	before := n.Load()
	if err := r.Start(ctx); err != nil {
		return 0, err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	got := n.Load() - before
	if err := r.Stop(context.Background()); err != nil {
		return got, err
	}
	return got, ctx.Err()
}

// PollsIn returns how many polls the adaptive rule issues on an idle
// table in span: one at start, then one after each wait, the wait starting
// at lo and growing by mult up to hi. It is the model IdleStatements
// measures.
func PollsIn(span, lo, hi time.Duration, mult float64) int {
	polls, at, wait := 1, time.Duration(0), lo
	for {
		at += wait
		if at > span {
			return polls
		}
		polls++
		wait = min(time.Duration(float64(wait)*mult), hi)
	}
}
