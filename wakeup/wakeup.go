package wakeup

import (
	"context"
	"errors"
	"sync"

	"github.com/heraldgo/herald/envelope"
)

// Wakeup is a channel from event writers to relays.
//
// Signal is called by writers after their transaction committed, with the
// distinct topics it wrote; it must not block for long and may drop a signal
// (relays poll anyway). Listen calls fn with the topics of each signal it
// receives until ctx ends, then returns nil; it returns an error only when
// it cannot listen at all. fn must not block.
//
// Once Listen is subscribed — and again after every re-subscription, such
// as a reconnect — it calls fn once with nil topics: signals sent before
// that moment reached no one, so the listener should poll. Without it an
// event committed between a relay's last poll and its subscription would
// wait for the relay's longest poll interval.
//
// Close releases what Signal and Listen opened; Listen calls running at
// Close return.
type Wakeup interface {
	Signal(ctx context.Context, topics []string) error
	Listen(ctx context.Context, fn func(topics []string)) error
	Close() error
}

// TxSignaler is implemented by a Wakeup that signals from inside the
// events' transaction and lets the database deliver the signal at commit
// (PostgreSQL NOTIFY). Writers that see it call SignalTx in the transaction
// instead of Signal after it.
type TxSignaler interface {
	SignalTx(ctx context.Context, q envelope.Querier, topics []string) error
}

// DialectChecker is implemented by a Wakeup that works only with some
// databases (wakeup/pgnotify: PostgreSQL's NOTIFY). relay.New calls
// CheckDialect with the dialect of its database and refuses the Wakeup
// when it returns an error (an envelope.ErrConfiguration).
type DialectChecker interface {
	CheckDialect(d envelope.Dialect) error
}

// ErrClosed is returned by Signal and Listen after Close.
var ErrClosed = errors.New("herald/wakeup: closed")

// InProcess wakes relays of the same process. Signals are coalesced per
// listener: topics signalled while a listener is busy reach it once, in its
// next call. Safe for use from any goroutine.
type InProcess struct {
	mu     sync.Mutex
	subs   map[*listener]struct{}
	closed bool
	done   chan struct{}
}

type listener struct {
	mu      sync.Mutex
	pending map[string]struct{}
	ready   chan struct{} // capacity 1: "pending is not empty"
}

// NewInProcess returns an in-process Wakeup.
func NewInProcess() *InProcess {
	return &InProcess{subs: map[*listener]struct{}{}, done: make(chan struct{})}
}

var _ Wakeup = (*InProcess)(nil)

// Signal hands topics to every listener without blocking.
func (w *InProcess) Signal(_ context.Context, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	for l := range w.subs {
		l.mu.Lock()
		for _, t := range topics {
			l.pending[t] = struct{}{}
		}
		l.mu.Unlock()
		select {
		case l.ready <- struct{}{}:
		default: // already signalled; the topics were merged into pending
		}
	}
	return nil
}

// Listen calls fn with coalesced topics until ctx ends or w is closed.
func (w *InProcess) Listen(ctx context.Context, fn func(topics []string)) error {
	l := &listener{pending: map[string]struct{}{}, ready: make(chan struct{}, 1)}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.subs[l] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.subs, l)
		w.mu.Unlock()
	}()
	fn(nil) // subscribed: what was signalled before reached no one
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.done:
			return nil
		case <-l.ready:
			l.mu.Lock()
			topics := make([]string, 0, len(l.pending))
			for t := range l.pending {
				topics = append(topics, t)
			}
			clear(l.pending)
			l.mu.Unlock()
			if len(topics) > 0 {
				fn(topics)
			}
		}
	}
}

// Close stops every Listen call; later calls return ErrClosed. Safe to call
// twice.
func (w *InProcess) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.done)
	}
	return nil
}

// Topics collects the distinct topics of one transaction, in first-seen
// order. The zero value is ready to use; it is not safe for concurrent use.
type Topics struct {
	list []string
	set  map[string]struct{}
}

// Add records topics.
func (t *Topics) Add(topics ...string) {
	for _, s := range topics {
		if _, ok := t.set[s]; ok {
			continue
		}
		if t.set == nil {
			t.set = map[string]struct{}{}
		}
		t.set[s] = struct{}{}
		t.list = append(t.list, s)
	}
}

// List returns the distinct topics.
func (t *Topics) List() []string { return t.list }

// Len returns how many distinct topics were added.
func (t *Topics) Len() int { return len(t.list) }
