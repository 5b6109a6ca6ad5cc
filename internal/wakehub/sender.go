package wakehub

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/heraldgo/herald/wakeup"
)

// Publish sends topics, one signal each; it returns when they are sent or
// failed.
type Publish func(ctx context.Context, topics []string) error

// Sender implements Wakeup.Signal for brokers: Signal never blocks; one
// goroutine publishes, and topics signalled while a publish is in flight
// are coalesced (each once) into the next one.
type Sender struct {
	publish Publish
	opt     Options
	timeout time.Duration

	mu       sync.Mutex
	pending  wakeup.Topics
	running  bool
	closed   bool
	kick     chan struct{}
	stop     context.CancelFunc
	ctx      context.Context
	wg       sync.WaitGroup
	failures int
}

// NewSender returns a Sender; each publish is bounded by timeout.
func NewSender(publish Publish, timeout time.Duration, opt Options) *Sender {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Sender{publish: publish, opt: opt, timeout: timeout, kick: make(chan struct{}, 1), ctx: ctx, stop: cancel}
}

// Signal queues topics for the publisher goroutine.
func (s *Sender) Signal(topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return wakeup.ErrClosed
	}
	s.pending.Add(topics...)
	if !s.running {
		s.running = true
		s.wg.Add(1)
		go s.run()
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

func (s *Sender) run() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
		}
		s.mu.Lock()
		topics := s.pending.List()
		s.pending = wakeup.Topics{}
		s.mu.Unlock()
		if len(topics) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
		err := s.publish(ctx, topics)
		cancel()
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			s.failures++
			level := slog.LevelWarn
			if s.failures >= ErrorAfter {
				level = slog.LevelError
			}
			s.opt.Logger.Log(s.ctx, level, s.opt.Name+": signal failed; relays will poll",
				slog.Int("failures_in_a_row", s.failures), slog.Any("topics", topics), slog.Any("error", err))
		} else {
			s.failures = 0
		}
	}
}

// Close stops the publisher goroutine; signals not yet sent are dropped.
func (s *Sender) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}
