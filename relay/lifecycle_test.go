package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/wakeup"
)

func TestStopFinishesTheBatchInHand(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		evs := e.enqueue(t, msg("a", "", 1), msg("b", "", 2), msg("c", "k", 3))
		started := make(chan struct{}, 3)
		release := make(chan struct{})
		logs := &logRecords{}
		d := delivery.Func(func(ctx context.Context, ev *envelope.Event) error {
			started <- struct{}{}
			<-release
			return nil
		})
		r := e.newRelay(t, d, Config{Concurrency: 3, Logger: slog.New(logs)})
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			<-started
		}
		stopped := make(chan error, 1)
		go func() { stopped <- r.Stop(context.Background()) }()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) while the batch was still out", err)
		default:
		}
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		<-r.Stopped()
		if n := e.count(t, "published_at IS NOT NULL"); n != len(evs) {
			t.Fatalf("%d of %d events marked published when Stop returned", n, len(evs))
		}
		if bad := logs.atLeast(slog.LevelWarn); len(bad) > 0 {
			t.Fatalf("a graceful stop logged %q", bad[0].Message)
		}
	})
}

func TestStopDeadlineCancelsDeliveriesAndReleasesTheirEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	ev := e.enqueue(t, msg("a", "k", 1))[0]
	started := make(chan struct{}, 1)
	logs := &logRecords{}
	d := delivery.Func(func(ctx context.Context, _ *envelope.Event) error {
		started <- struct{}{}
		<-ctx.Done() // a delivery that only ends when cancelled
		return ctx.Err()
	})
	r := e.newRelay(t, d, Config{Lease: time.Hour, DeliveryTimeout: 50 * time.Minute, Logger: slog.New(logs)})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with an ended context: %v", err)
	}
	<-r.Stopped()
	row := e.row(t, ev.ID)
	if row.Attempts != 0 || row.LeaseUntil != nil || row.PublishedAt != nil || row.LastError != "" {
		t.Fatalf("a delivery cancelled by the stop must release its event, not fail it: %+v", row)
	}
	if bad := logs.atLeast(slog.LevelWarn); len(bad) > 0 {
		t.Fatalf("a forced stop logged %q", bad[0].Message)
	}
}

func TestLifecycleIsIdempotentAndDoesNotLeak(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	rec := &recorder{}
	r := e.newRelay(t, rec, Config{Wakeup: wakeup.NewInProcess()})
	ctx := context.Background()
	select {
	case <-r.Stopped():
	default:
		t.Fatal("Stopped must be closed before Start")
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	// 200 start/stop cycles, each Start twice and Stop twice; goleak in
	// TestMain checks that nothing is left running.
	for i := range 200 {
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			n := rec.count() + 1 // counted before the event exists: the running relay may deliver it at once
			e.enqueue(t, msg("cycle", "", i))
			testkit.Eventually(t, 10*time.Second, func() bool { return rec.count() == n }, "delivered in cycle %d", i)
		}
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		<-r.Stopped()
	}
}

func TestRunStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	e.enqueue(t, msg("a", "", 1))
	rec := &recorder{}
	r := e.newRelay(t, rec, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, func() bool { return rec.count() == 1 }, "delivered")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-r.Stopped()
}

func TestStartFailsWhenTheDatabaseIsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	r := e.newRelay(t, &recorder{}, Config{})
	_ = e.db.Close()
	if err := r.Start(context.Background()); err == nil {
		t.Fatal("Start on a closed database succeeded")
	}
}

func TestWakeupCutsTheWaitShort(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		w := wakeup.NewInProcess()
		t.Cleanup(func() { _ = w.Close() })
		rec := &recorder{}
		// Polls an hour apart: only the wakeup can bring the event in time.
		r := e.newRelay(t, rec, Config{Wakeup: w, MinPollInterval: time.Hour, MaxPollInterval: time.Hour, Topics: []string{"library.*"}})
		start(t, r)
		r.mu.Lock()
		waiting := r.run.waiting
		r.mu.Unlock()
		<-waiting // the first (empty) poll is done; the relay waits an hour
		testkit.Eventually(t, 10*time.Second, r.listening, "wakeup listening")
		res, err := e.w.Write(context.Background(), e.db, []envelope.Message{msg("library.loan.updated", "", 1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Signal(context.Background(), res.Topics); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool { return rec.count() == 1 }, "delivered after the wakeup")
	})
}

func TestFilterMatch(t *testing.T) {
	t.Parallel()
	c := Config{Topics: []string{"a_b.*", "x.y"}, ExcludeTopics: []string{"a_b.secret*"}}.withDefaults()
	f, err := c.validate()
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]bool{
		"a_b.c": true, "axb.c": false, "A_B.c": false, "x.y": true, "x.yz": false,
		"a_b.secret": false, "a_b.secrets": false, "a_b.public": true,
	} {
		if f.Match(topic) != want {
			t.Errorf("Match(%q) = %v", topic, !want)
		}
	}
}

func TestTopicsPartitionTheTable(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		e.enqueue(t, msg("a_b.c", "", 1), msg("axb.c", "", 2), msg("A_B.c", "", 3), msg("a%b.c", "", 4),
			msg("a_b.audit", "", 5), msg("other", "", 6))
		recA, recRest := &recorder{}, &recorder{}
		ra := e.newRelay(t, recA, Config{Topics: []string{"a_b.*", "a%b.*"}, ExcludeTopics: []string{"a_b.audit"}})
		rest := e.newRelay(t, recRest, Config{ExcludeTopics: []string{"a_b.*", "a%b.*"}})
		ctx := context.Background()
		if b, err := ra.Backlog(ctx); err != nil || b.Pending != 2 {
			t.Fatalf("backlog of the a_b relay: %+v %v", b, err)
		}
		pollOnce(t, ra, recA)
		pollOnce(t, rest, recRest)
		got := map[string]bool{}
		for _, topic := range topics(recA.events()) {
			got[topic] = true
		}
		if len(got) != 2 || !got["a_b.c"] || !got["a%b.c"] {
			t.Fatalf("a_b.* relay delivered %v; '_' and '%%' are literal, case matters", topics(recA.events()))
		}
		got = map[string]bool{}
		for _, topic := range topics(recRest.events()) {
			got[topic] = true
		}
		if len(got) != 3 || !got["axb.c"] || !got["A_B.c"] || !got["other"] {
			t.Fatalf("the other relay delivered %v", topics(recRest.events()))
		}
		// a_b.audit is nobody's: still pending, counted by neither.
		for _, r := range []*Relay{ra, rest} {
			if b, err := r.Backlog(ctx); err != nil || b.Pending != 0 {
				t.Fatalf("backlog after delivery: %+v %v", b, err)
			}
		}
		// Retry with the relay's filter and the caller's binds its
		// arguments in order (nothing is dead here).
		if n, err := ra.RetryDeadLettered(ctx, Filter{Topics: []string{"a_b.*", "x"}, IDs: []uuid.UUID{uuid.New()}}); err != nil || n != 0 {
			t.Fatalf("RetryDeadLettered with filters: %d %v", n, err)
		}
		// Cleanup deletes only the relay's own topics.
		n, err := ra.CleanupPublished(ctx, 0)
		if err != nil || n != 2 {
			t.Fatalf("cleanup by the a_b relay: %d %v", n, err)
		}
		if left := e.count(t, "1 = 1"); left != 4 {
			t.Fatalf("%d rows left, want 4", left)
		}
	})
}

func TestPanickingDeliveryIsAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	ev := e.enqueue(t, msg("a", "", 1))[0]
	var calls atomic.Int32
	d := delivery.Func(func(context.Context, *envelope.Event) error {
		if calls.Add(1) == 1 {
			panic("nil map")
		}
		return nil
	})
	r := e.newRelay(t, d, Config{})
	start(t, r)
	testkit.Eventually(t, 10*time.Second, func() bool { return e.row(t, ev.ID).PublishedAt != nil }, "delivered after the panic")
	if row := e.row(t, ev.ID); row.Attempts != 1 || row.LastError != "herald/delivery: delivery panicked: nil map" {
		t.Fatalf("row: %+v", row)
	}
}

func TestFewKeysDrainWithoutWaiting(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		var ms []envelope.Message
		for i := range 30 {
			ms = append(ms, msg("k", []string{"a", "b"}[i%2], i))
		}
		e.enqueue(t, ms...)
		rec := &recorder{}
		// Batches of at most two events (one per key) never fill a batch of
		// 100; with polls an hour apart only the immediate re-poll after
		// delivering ordered events can drain them.
		r := e.newRelay(t, rec, Config{MinPollInterval: time.Hour, MaxPollInterval: time.Hour})
		start(t, r)
		testkit.Eventually(t, 30*time.Second, func() bool { return rec.count() == len(ms) }, "all %d delivered", len(ms))
	})
}

// brokenWakeup cannot listen.
type brokenWakeup struct{ wakeup.Wakeup }

func (brokenWakeup) Listen(context.Context, func([]string)) error {
	return errors.New("connection refused")
}

func TestRelayPollsWhenItsWakeupCannotListen(t *testing.T) {
	t.Parallel()
	for _, w := range []wakeup.Wakeup{brokenWakeup{}, closedWakeup()} {
		e := newEnv(t, envelope.SQLite)
		logs := &logRecords{}
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{Wakeup: w, Logger: slog.New(logs)})
		start(t, r)
		e.enqueue(t, msg("a", "", 1))
		testkit.Eventually(t, 20*time.Second, func() bool { return rec.count() == 1 }, "delivered by polling")
		testkit.Eventually(t, 20*time.Second, func() bool {
			for _, l := range logs.atLeast(slog.LevelWarn) {
				if strings.Contains(l.Message, "wakeup") {
					return true
				}
			}
			return false
		}, "a WARN about the wakeup")
	}
}

func closedWakeup() wakeup.Wakeup {
	w := wakeup.NewInProcess()
	_ = w.Close()
	return w
}
