package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/outbox"
)

// Defaults of the relay's retry settings (relay.DefaultMaxAttempts,
// DefaultRetryBase, DefaultRetryMax), copied so that a consumer need not
// import the relay; a test keeps them equal.
const (
	relayMaxAttempts = 5
	relayRetryBase   = time.Second
	relayRetryMax    = 5 * time.Minute
)

// RelayRetrySpan is the longest time herald's relay keeps retrying an
// event after its first attempt, for a relay configured with maxAttempts,
// retryBase and retryMax (relay.Config's MaxAttempts, RetryBase, RetryMax;
// 0 means the relay's default): the sum of its waits, each at its +10%
// jitter. A message can be delivered again that long after a first
// delivery whose acknowledgement was lost; add the broker's own
// redelivery window (retention, or the longest a message stays unacked)
// and give the sum as Config.RedeliveryWindow. An event dead-lettered and
// retried later by an operator (relay.RetryDeadLettered, `herald dead
// retry`) can come back after any time: keep TTL beyond how long you keep
// dead letters before retrying them.
func RelayRetrySpan(maxAttempts int, retryBase, retryMax time.Duration) time.Duration {
	if maxAttempts == 0 {
		maxAttempts = relayMaxAttempts
	}
	if retryBase == 0 {
		retryBase = relayRetryBase
	}
	if retryMax == 0 {
		retryMax = max(relayRetryMax, retryBase)
	}
	var span time.Duration
	wait := retryBase
	for i := 1; i < maxAttempts; i++ {
		span += wait + wait/10
		wait = min(2*wait, retryMax)
	}
	return span
}

// Cleanup deletes the consumer's ids (and per-key marks) older than TTL,
// in batches of CleanupBatch rows, each its own statement, until none is
// left; it returns how many ids it deleted. Several instances may run it
// at once: on PostgreSQL each batch skips the rows another is deleting
// (FOR UPDATE SKIP LOCKED); SQLite runs them one after the other.
func (in *Inbox) Cleanup(ctx context.Context) (int64, error) {
	cutoff := outbox.TimeArg(in.d, time.Now().Add(-in.cfg.TTL))
	var total int64
	for _, q := range []string{in.cleanupSQL, in.cleanupKeysSQL} {
		for {
			res, err := in.db.ExecContext(ctx, q, in.cfg.Consumer, cutoff, in.cfg.CleanupBatch)
			if err != nil {
				return total, fmt.Errorf("herald/inbox: cleanup of %s: %w", in.t.Name, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return total, err
			}
			if q == in.cleanupSQL {
				total += n
			}
			if n < int64(in.cfg.CleanupBatch) {
				break
			}
		}
	}
	return total, nil
}

// Start runs Cleanup every CleanupInterval in the background until Stop
// or ctx's end. Starting a started inbox does nothing.
func (in *Inbox) Start(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stop != nil {
		return nil
	}
	if err := in.db.PingContext(ctx); err != nil {
		return fmt.Errorf("herald/inbox: start: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	in.stop, in.stopped = cancel, stopped
	go func() {
		defer close(stopped)
		tick := time.NewTicker(in.cfg.CleanupInterval)
		defer tick.Stop()
		for {
			if _, err := in.Cleanup(ctx); err != nil && !errors.Is(err, context.Canceled) {
				in.cfg.Logger.ErrorContext(ctx, "herald/inbox: cleanup failed", "table", in.t.Name, "consumer", in.cfg.Consumer, "error", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return nil
}

// Stop ends the cleaner and waits for it, at most until ctx ends. It is
// safe to call twice, or without Start.
func (in *Inbox) Stop(ctx context.Context) error {
	in.mu.Lock()
	cancel, stopped := in.stop, in.stopped
	in.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("herald/inbox: stop: %w", ctx.Err())
	}
}
