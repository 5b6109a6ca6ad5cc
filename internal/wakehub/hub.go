// Package wakehub is the machinery the cross-process wakeups share: one
// listening session per Wakeup value (per process) fanned out to every
// Listen call, reconnected with back-off, and a sender that coalesces
// topics signalled while a publish is in flight.
package wakehub

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/wakeup"
)

// Session connects and subscribes, calls ready once subscribed (signals
// sent from then on reach it), then deliver with the topics of each signal,
// until ctx ends (it returns then, with any error) or the connection fails
// (it returns the error). An error matching envelope.ErrUnsupported or
// envelope.ErrConfiguration is permanent: the Listen calls return it.
type Session func(ctx context.Context, ready func(), deliver func(topics []string)) error

// Options tune a Hub.
type Options struct {
	// Name prefixes log messages ("herald/wakeup/pgnotify").
	Name string
	// Logger receives a WARN for each failure to connect or lost
	// connection, an ERROR from the fifth failure in a row on, and an INFO
	// when listening again. nil = slog.Default().
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait between reconnects; it
	// doubles from MinBackoff after each failure in a row.
	MinBackoff, MaxBackoff time.Duration
	// PollWhileDown is how often listeners are told to poll (fn(nil))
	// while the session is not subscribed.
	PollWhileDown time.Duration
	// StableAfter is how long a session must stay subscribed for its end
	// to start a new count of failures: one that fails sooner (a broker
	// that accepts the subscription, then refuses the first fetch) is one
	// more failure in a row, and the back-off keeps growing.
	// 0 = DefaultStableAfter.
	StableAfter time.Duration
}

// DefaultStableAfter is Options.StableAfter's default.
const DefaultStableAfter = 10 * time.Second

// ErrorAfter is how many failures in a row are logged as an ERROR (the
// ones before are WARNs).
const ErrorAfter = 5

// Hub runs one Session for all the Listen calls of one Wakeup value.
type Hub struct {
	session Session
	opt     Options

	mu     sync.Mutex
	subs   map[*sub]struct{}
	up     bool
	stop   context.CancelFunc // of the running session loop; nil = none
	done   chan struct{}      // closed when that loop returned
	closed bool
	loops  sync.WaitGroup // every session loop started
}

type sub struct {
	fn  func([]string)
	err chan error // capacity 1: a permanent failure of the session
}

// New returns a Hub that runs session while someone listens.
func New(session Session, opt Options) *Hub {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = 100 * time.Millisecond
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = max(opt.MinBackoff, 30*time.Second)
	}
	if opt.PollWhileDown <= 0 {
		opt.PollWhileDown = time.Second
	}
	if opt.StableAfter <= 0 {
		opt.StableAfter = DefaultStableAfter
	}
	return &Hub{session: session, opt: opt, subs: map[*sub]struct{}{}}
}

// Listen implements wakeup.Wakeup.Listen on the shared session.
func (h *Hub) Listen(ctx context.Context, fn func(topics []string)) error {
	s := &sub{fn: fn, err: make(chan error, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return wakeup.ErrClosed
	}
	h.subs[s] = struct{}{}
	if h.stop == nil {
		loopCtx, cancel := context.WithCancel(context.Background())
		h.stop, h.done = cancel, make(chan struct{})
		done := h.done
		h.loops.Go(func() { h.loop(loopCtx, done) })
	}
	up, done := h.up, h.done
	h.mu.Unlock()
	if up {
		fn(nil) // the session is subscribed already
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-s.err:
	case <-done: // Close, or the loop ended for the last listener
		select {
		case err = <-s.err:
		default:
		}
	}
	h.mu.Lock()
	delete(h.subs, s)
	if len(h.subs) == 0 && h.stop != nil && h.done == done {
		h.stop() // nobody listens: release the connection
		h.stop, h.done, h.up = nil, nil, false
	}
	h.mu.Unlock()
	return err
}

// Close stops the session; Listen calls running return nil, later ones
// ErrClosed. It waits for every session to end.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	stop := h.stop
	h.stop, h.done, h.up = nil, nil, false
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	h.loops.Wait()
}

// Up reports whether the session is subscribed (for tests).
func (h *Hub) Up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up
}

func (h *Hub) broadcast(topics []string) {
	h.mu.Lock()
	fns := make([]func([]string), 0, len(h.subs))
	for s := range h.subs {
		fns = append(fns, s.fn)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(topics)
	}
}

// setUp records whether the loop that owns done is subscribed; a loop
// already replaced (stopped for want of listeners) changes nothing.
func (h *Hub) setUp(done chan struct{}, v bool) {
	h.mu.Lock()
	if h.done == done {
		h.up = v
	}
	h.mu.Unlock()
}

// loop runs the session until ctx ends, reconnecting with back-off.
func (h *Hub) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	var up atomic.Bool
	tick := time.NewTicker(h.opt.PollWhileDown)
	defer tick.Stop()
	tickDone := make(chan struct{})
	defer func() { <-tickDone }()
	go func() { // while not subscribed, listeners poll
		defer close(tickDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if !up.Load() {
					h.broadcast(nil)
				}
			}
		}
	}()

	// failures counts the sessions in a row that failed before they were
	// subscribed or within StableAfter of it: a session that is ready
	// and then fails at once must not reset the back-off, or a broker
	// that accepts every subscription and fails every fetch would be
	// reconnected to at MinBackoff forever, every relay of the process
	// polling each time.
	failures := 0
	backoff := h.opt.MinBackoff
	for ctx.Err() == nil {
		var upSince time.Time
		err := h.session(ctx,
			func() {
				upSince = time.Now()
				up.Store(true)
				h.setUp(done, true)
				if failures > 0 {
					h.opt.Logger.Info(h.opt.Name+": listening again", slog.Int("failures", failures))
				}
				h.broadcast(nil) // signals sent before now reached no one
			},
			h.broadcast)
		up.Store(false)
		h.setUp(done, false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, envelope.ErrUnsupported) || errors.Is(err, envelope.ErrConfiguration) {
			h.fail(err, done)
			return
		}
		if err == nil {
			err = errors.New("session ended")
		}
		if !upSince.IsZero() && time.Since(upSince) >= h.opt.StableAfter {
			failures, backoff = 0, h.opt.MinBackoff // it had recovered: a new count
		}
		failures++
		level := slog.LevelWarn
		if failures >= ErrorAfter {
			level = slog.LevelError
		}
		attrs := []any{slog.Int("failures_in_a_row", failures), slog.Duration("retry_in", backoff), slog.Any("error", err)}
		if !upSince.IsZero() {
			attrs = append(attrs, slog.Duration("subscribed_for", time.Since(upSince).Round(time.Millisecond)))
		}
		h.opt.Logger.Log(ctx, level, h.opt.Name+": not listening; relays poll meanwhile; reconnecting", attrs...)
		h.broadcast(nil)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, h.opt.MaxBackoff)
	}
}

// fail hands a permanent error to every listener and forgets the loop, so
// a later Listen tries again.
func (h *Hub) fail(err error, done chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.err <- err:
		default:
		}
	}
	if h.done == done {
		h.stop()
		h.stop, h.done, h.up = nil, nil, false
	}
}
