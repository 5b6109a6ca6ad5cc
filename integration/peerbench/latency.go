package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

type latencyCase struct {
	name string
	run  func(context.Context, config) ([]figure, error)
}

func latencyCases() []latencyCase {
	return []latencyCase{
		{"herald, in-process wakeup", heraldLatency("herald, in-process wakeup", true, false, 0)},
		{"herald, in-process wakeup, DeleteOnPublish", heraldLatency("herald, in-process wakeup, DeleteOnPublish", true, true, 0)},
		{"herald, polling every 10ms (no wakeup)", heraldLatency("herald, polling every 10ms (no wakeup)", false, false, 10*time.Millisecond)},
		{"River, defaults", riverLatency("River, defaults", false)},
		{"River, tuned (FetchCooldown 1ms, FetchPollInterval 10ms)", riverLatency("River, tuned (FetchCooldown 1ms, FetchPollInterval 10ms)", true)},
	}
}

// tracker pairs each event's commit time (taken when the writer's
// transaction returned) with its receipt by the handler, whichever comes
// first; a receipt before the writer saw its commit return counts as 0.
type tracker struct {
	mu    sync.Mutex
	sent  map[any]time.Time
	recv  map[any]time.Time
	lat   []sample
	start time.Time
}

type sample struct {
	at  time.Duration // commit, from the start of the run
	lat time.Duration
}

func newTracker() *tracker {
	return &tracker{sent: map[any]time.Time{}, recv: map[any]time.Time{}, start: time.Now()}
}

func (t *tracker) committed(id any, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.recv[id]; ok {
		delete(t.recv, id)
		t.lat = append(t.lat, sample{at.Sub(t.start), max(0, r.Sub(at))})
		return
	}
	t.sent[id] = at
}

func (t *tracker) received(id any) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.sent[id]; ok {
		delete(t.sent, id)
		t.lat = append(t.lat, sample{s.Sub(t.start), now.Sub(s)})
		return
	}
	t.recv[id] = now
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.lat)
}

func pct(ls []time.Duration, p float64) float64 {
	if len(ls) == 0 {
		return 0
	}
	s := slices.Clone(ls)
	slices.Sort(s)
	i := min(len(s)-1, int(float64(len(s))*p))
	return float64(s[i].Microseconds()) / 1000
}

// windowName is the drift windows' name: the first and last minute of a
// run of at least two minutes, else its first and last fifth.
func windowName(d time.Duration) string {
	if d >= 2*time.Minute {
		return "minute"
	}
	return "fifth"
}

func window(d time.Duration) time.Duration {
	if d >= 2*time.Minute {
		return time.Minute
	}
	return d / 5
}

// summary returns the case's figures for the round: the whole run's p50
// (with a note: the first and last window's p50/p99) and p99, and the
// drift, last window's p99 ÷ first window's (windowName).
func (t *tracker) summary(name string, d time.Duration) []figure {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := window(d)
	var all, first, last []time.Duration
	for _, s := range t.lat {
		all = append(all, s.lat)
		switch {
		case s.at < w:
			first = append(first, s.lat)
		case s.at >= d-w:
			last = append(last, s.lat)
		}
	}
	wn := windowName(d)
	note := fmt.Sprintf("first %s %.2f/%.2f, last %s %.2f/%.2f (n=%d)", wn, pct(first, 0.5), pct(first, 0.99), wn, pct(last, 0.5), pct(last, 0.99), len(all))
	if d >= 2*time.Minute {
		// Every minute's p99, so that a trend (drift) shows apart from
		// one slow minute (a checkpoint, a vacuum).
		by := make([][]time.Duration, int((d+w-1)/w))
		for _, s := range t.lat {
			if i := int(s.at / w); i >= 0 && i < len(by) {
				by[i] = append(by[i], s.lat)
			}
		}
		ps := make([]string, len(by))
		for i, ls := range by {
			ps[i] = fmt.Sprintf("%.2f", pct(ls, 0.99))
		}
		note += "; p99 by minute: " + strings.Join(ps, " ")
	}
	drift := 0.0
	if f := pct(first, 0.99); f > 0 {
		drift = pct(last, 0.99) / f
	}
	return []figure{
		{name: name + ": p50", unit: "ms", value: pct(all, 0.5), note: note},
		{name: name + ": p99", unit: "ms", value: pct(all, 0.99)},
		{name: name + ": drift, last " + wn + "'s p99 ÷ first's", unit: "×", value: drift},
	}
}

// pace calls write(i) at rate per second for d, from 4 goroutines, and
// returns how many writes it started. It stops early, with the error, when
// a write fails or ctx ends.
func pace(ctx context.Context, rate int, d time.Duration, write func(i int) error) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan int, 1024)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				if err := write(i); err != nil {
					cancel(err)
				}
			}
		})
	}
	start := time.Now()
	n := int(d.Seconds() * float64(rate))
	sent := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for i := range n {
		if w := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); w > 0 {
			timer.Reset(w)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break loop
			}
		}
		select {
		case jobs <- i:
			sent++
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	return sent, context.Cause(ctx)
}

func waitFor(ctx context.Context, t *tracker, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for t.count() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("latency: %d of %d events delivered %s after the last write", t.count(), n, timeout)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("latency: %d of %d events delivered: %w", t.count(), n, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func heraldLatency(name string, useWakeup, deleteOnPublish bool, poll time.Duration) func(context.Context, config) ([]figure, error) {
	return func(ctx context.Context, cfg config) ([]figure, error) {
		var w wakeup.Wakeup
		if useWakeup {
			ip := wakeup.NewInProcess()
			defer ip.Close()
			w = ip
		}
		_, herald, err := gormDBs(cfg, w)
		if err != nil {
			return nil, err
		}
		sqlDB, _ := herald.DB()
		defer sqlDB.Close()
		if cfg.maxIdle > 0 {
			sqlDB.SetMaxIdleConns(cfg.maxIdle)
		}
		tr := newTracker()
		rc := relay.Config{Wakeup: w, DeleteOnPublish: deleteOnPublish, Logger: slog.New(slog.DiscardHandler), Name: "latency"}
		if poll > 0 {
			rc.MinPollInterval, rc.MaxPollInterval = poll, poll
		}
		r, err := relay.New(sqlDB, delivery.Func(func(_ context.Context, e *envelope.Event) error {
			tr.received(e.ID)
			return nil
		}), rc)
		if err != nil {
			return nil, err
		}
		if err := r.Start(ctx); err != nil {
			return nil, err
		}
		defer func() { _ = r.Stop(context.Background()) }()
		body := json.RawMessage(`{"model": "library.Loan", "operation": "updated", "pk": 7}`)
		tr.start = time.Now()
		n, err := pace(ctx, cfg.rate, cfg.latencyDur, func(int) error {
			var ev *envelope.Event
			err := herald.Transaction(func(tx *gorm.DB) error {
				var err error
				ev, err = gormcapture.Enqueue(tx, envelope.Message{Topic: "latency", Payload: body})
				return err
			})
			if err != nil {
				return err
			}
			tr.committed(ev.ID, time.Now())
			return nil
		})
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, tr, n, time.Minute); err != nil {
			return nil, err
		}
		figs := tr.summary(name, cfg.latencyDur)
		figs[0].note += fmt.Sprintf("; pool: %d connections closed for lack of idle room", sqlDB.Stats().MaxIdleClosed)
		return figs, nil
	}
}

func riverLatency(name string, tuned bool) func(context.Context, config) ([]figure, error) {
	return func(ctx context.Context, cfg config) ([]figure, error) {
		pool, err := riverPool(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		if err := riverMigrate(ctx, pool); err != nil {
			return nil, err
		}
		if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
			return nil, err
		}
		tr := newTracker()
		wk := &riverWorker{fn: func(j *river.Job[riverArgs]) { tr.received(j.ID) }}
		client, err := river.NewClient(riverpgxv5.New(pool), riverConfig(tuned, wk))
		if err != nil {
			return nil, err
		}
		if err := client.Start(ctx); err != nil {
			return nil, err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = client.Stop(sctx)
		}()
		tr.start = time.Now()
		n, err := pace(ctx, cfg.rate, cfg.latencyDur, func(int) error {
			res, err := client.Insert(ctx, riverArgs{Body: `{"model": "library.Loan", "operation": "updated", "pk": 7}`}, nil)
			if err != nil {
				return err
			}
			tr.committed(res.Job.ID, time.Now())
			return nil
		})
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, tr, n, time.Minute); err != nil {
			return nil, err
		}
		return tr.summary(name, cfg.latencyDur), nil
	}
}
