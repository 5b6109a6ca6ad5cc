package relay

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/heraldgo/herald/wakeup"
)

// listen listens on the wakeup until ctx ends and pokes the loop when a
// signal names one of the relay's topics. The relay counts as listening
// from the wakeup's "subscribed" call (fn(nil)) until Listen returns, not
// while Listen is still connecting. When the wakeup cannot listen it tries
// again with back-off (1s doubling to 1m) and the loop meanwhile polls at
// least every MaxPollInterval-without-wakeup; losing the wakeup pokes the
// loop, so a long wait computed while it listened does not run on; a
// closed wakeup is given up.
func (r *Relay) listen(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		err := r.cfg.Wakeup.Listen(ctx, func(topics []string) {
			if topics == nil {
				// Subscribed (or re-subscribed): a signal sent since the
				// last poll reached no one, so poll now rather than at
				// the next interval, up to MaxPollInterval away.
				r.setListening(true)
				r.wake()
				return
			}
			for _, t := range topics {
				if r.filter.Match(t) {
					r.wake()
					return
				}
			}
		})
		if r.listeningFlag.Swap(false) {
			// The wait running now may have been computed with the long
			// interval of a listening relay: cut it short.
			r.wake()
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, wakeup.ErrClosed) {
			r.log.WarnContext(ctx, "herald/relay: wakeup closed; polling only", slog.String("relay", r.cfg.Name))
			return
		}
		if err != nil {
			r.log.WarnContext(ctx, "herald/relay: wakeup cannot listen; polling meanwhile",
				slog.String("relay", r.cfg.Name), slog.Duration("retry_in", backoff), slog.Any("error", err))
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Minute)
	}
}

func (r *Relay) setListening(v bool) { r.listeningFlag.Store(v) }

func (r *Relay) listening() bool { return r.listeningFlag.Load() }

// wake asks the loop to poll now, without blocking.
func (r *Relay) wake() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}
