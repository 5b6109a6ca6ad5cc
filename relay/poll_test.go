package relay

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// topics returns the topics of a batch, in order.
func topics(es []*envelope.Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Topic)
	}
	return out
}

// clock is a settable clock for a relay.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// pollOnce runs one poll and returns the topics it delivered.
func pollOnce(t *testing.T, r *Relay, rec *recorder) []string {
	t.Helper()
	before := rec.count()
	res, err := r.poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := topics(rec.events()[before:])
	if res.leased < len(got) {
		t.Fatalf("leased %d, delivered %d", res.leased, len(got))
	}
	return got
}

func TestOrderingKeyHoldsBackOnlyItsKey(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		e.enqueue(t,
			msg("a1", "a", 1), msg("b1", "b", 1), msg("u1", "", 1), msg("a2", "a", 2),
			msg("b2", "b", 2), msg("u2", "", 2), msg("a3", "a", 3))
		failA1 := true
		rec := &recorder{fail: func(ev *envelope.Event) error {
			if ev.Topic == "a1" && failA1 {
				failA1 = false
				return errors.New("broker down")
			}
			return nil
		}}
		clk := &clock{t: time.Now()}
		r := e.newRelay(t, rec, Config{Concurrency: 1, RetryBase: time.Hour, RetryMax: time.Hour})
		r.dbClock = clk.now

		// a1 fails; b1 and the unordered events go; a2, b2, a3 wait for
		// their key's earlier event.
		if got := pollOnce(t, r, rec); !slices.Equal(got, []string{"b1", "u1", "u2"}) {
			t.Fatalf("poll 1 delivered %v", got)
		}
		// b1 is published, so b2 goes; a2 still waits for the failed a1.
		if got := pollOnce(t, r, rec); !slices.Equal(got, []string{"b2"}) {
			t.Fatalf("poll 2 delivered %v", got)
		}
		if got := pollOnce(t, r, rec); len(got) != 0 {
			t.Fatalf("poll 3 delivered %v; a1 is not due for an hour", got)
		}
		clk.add(2 * time.Hour)
		// On PostgreSQL poll 2 was a runs lease (after poll 1's keyed
		// events) that found no followers, so runs stay off until a key is
		// leased twice in a row: the same one event per key per poll as on
		// SQLite, in order.
		for i, want := range []string{"a1", "a2", "a3"} {
			if got := pollOnce(t, r, rec); !slices.Equal(got, []string{want}) {
				t.Fatalf("poll %d delivered %v, want %s: one event per key per batch, in order", 4+i, got, want)
			}
		}
	})
}

func TestLeaseSkipsLiveLeasesAndMarksAreGuarded(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		ev := e.enqueue(t, msg("t", "k", 1))[0]
		clk := &clock{t: time.Now()}
		rec := &recorder{}
		r1 := e.newRelay(t, rec, Config{Name: "r1", Lease: time.Minute})
		r2 := e.newRelay(t, rec, Config{Name: "r2", Lease: time.Minute})
		r1.dbClock, r2.dbClock = clk.now, clk.now
		ctx := context.Background()

		b1, _, err := r1.lease(ctx)
		if err != nil || len(b1) != 1 {
			t.Fatalf("r1 lease: %v %v", b1, err)
		}
		if b2, _, err := r2.lease(ctx); err != nil || len(b2) != 0 {
			t.Fatalf("r2 leased an event under r1's live lease: %v %v", describe(b2), err)
		}
		// r1's lease runs out; r2 takes the event and publishes it.
		clk.add(2 * time.Minute)
		b2, _, err := r2.lease(ctx)
		if err != nil || len(b2) != 1 {
			t.Fatalf("r2 lease after expiry: %v %v", b2, err)
		}
		if _, err := r2.mark(ctx, b2, []error{nil}); err != nil {
			t.Fatal(err)
		}
		// r1 comes back late with a failure: it must not undo r2's work.
		if _, err := r1.mark(ctx, b1, []error{errors.New("late failure")}); err != nil {
			t.Fatal(err)
		}
		row := e.row(t, ev.ID)
		if row.PublishedAt == nil || row.Attempts != 0 || row.LastError != "" || row.LeasedBy != "r2" {
			t.Fatalf("after r1's late failure: %+v", row)
		}
	})
}

func TestFailuresBackOffThenDeadLetter(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		ev := e.enqueue(t, msg("billing.charge", "invoice:1", 1))[0]
		logs := &logRecords{}
		var mu sync.Mutex
		var failed []Failed
		var dead []DeadLettered
		obs := ObserverFuncs{
			OnFailed:       func(_ context.Context, f Failed) { mu.Lock(); failed = append(failed, f); mu.Unlock() },
			OnDeadLettered: func(_ context.Context, d DeadLettered) { mu.Lock(); dead = append(dead, d); mu.Unlock() },
		}
		boom := errors.New("card declined")
		rec := &recorder{fail: func(*envelope.Event) error { return boom }}
		clk := &clock{t: time.Now().UTC().Truncate(time.Microsecond)}
		r := e.newRelay(t, rec, Config{MaxAttempts: 3, RetryBase: time.Second, RetryMax: time.Minute,
			Logger: slog.New(logs), Observer: obs})
		r.dbClock = clk.now
		r.jitter = func() float64 { return 0.5 } // no jitter

		for attempt, wait := range []time.Duration{time.Second, 2 * time.Second} {
			if got := pollOnce(t, r, rec); len(got) != 0 {
				t.Fatalf("delivered %v", got)
			}
			row := e.row(t, ev.ID)
			if row.Attempts != attempt+1 || row.LastError != "card declined" || row.NextAttemptAt == nil ||
				!row.NextAttemptAt.Equal(clk.now().Add(wait)) || row.LeaseUntil != nil || row.DeadLetteredAt != nil {
				t.Fatalf("after failure %d: %+v (want next attempt in %s)", attempt+1, row, wait)
			}
			if res, _ := r.poll(context.Background()); res.leased != 0 {
				t.Fatal("a failed event was leased before it was due")
			}
			clk.add(wait)
		}
		pollOnce(t, r, rec)
		row := e.row(t, ev.ID)
		if row.Attempts != 3 || row.DeadLetteredAt == nil || !row.DeadLetteredAt.Equal(clk.now()) || row.PublishedAt != nil {
			t.Fatalf("after the last attempt: %+v", row)
		}
		clk.add(time.Hour)
		if res, _ := r.poll(context.Background()); res.leased != 0 {
			t.Fatal("a dead event was leased")
		}

		mu.Lock()
		defer mu.Unlock()
		if len(failed) != 2 || failed[0].Attempts != 1 || failed[1].Attempts != 2 || !errors.Is(failed[0].Err, boom) ||
			failed[0].Event.ID != ev.ID || failed[0].Relay != r.Name() {
			t.Fatalf("Failed observations: %+v", failed)
		}
		if len(dead) != 1 || dead[0].Attempts != 3 || !errors.Is(dead[0].Err, boom) {
			t.Fatalf("DeadLettered observations: %+v", dead)
		}
		warns, errs := 0, 0
		for _, rec := range logs.atLeast(slog.LevelWarn) {
			v, ok := attr(rec, "error")
			if !ok || !strings.Contains(v.String(), "card declined") {
				t.Errorf("log %q has no delivery error attached", rec.Message)
			}
			if id, _ := attr(rec, "event_id"); id.String() != ev.ID.String() {
				t.Errorf("log %q does not name the event", rec.Message)
			}
			switch rec.Level {
			case slog.LevelWarn:
				warns++
			case slog.LevelError:
				errs++
			}
		}
		if warns != 2 || errs != 1 {
			t.Fatalf("%d WARN and %d ERROR logs, want 2 and 1", warns, errs)
		}
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	r := &Relay{cfg: Config{RetryBase: time.Second, RetryMax: 5 * time.Minute}}
	r.jitter = func() float64 { return 0.5 }
	for attempts, want := range map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second,
		10: 5 * time.Minute, 63: 5 * time.Minute, 64: 5 * time.Minute, 1000: 5 * time.Minute,
	} {
		if got := r.backoff(attempts); got != want {
			t.Errorf("backoff(%d) = %s, want %s", attempts, got, want)
		}
	}
	r.jitter = func() float64 { return 0 }
	if got := r.backoff(1); got != 900*time.Millisecond {
		t.Errorf("-10%% jitter: %s", got)
	}
	r.jitter = func() float64 { return 0.999999 }
	if got := r.backoff(10); got < 329*time.Second || got > 330*time.Second {
		t.Errorf("+10%% jitter on RetryMax: %s", got)
	}
}

func TestPacer(t *testing.T) {
	t.Parallel()
	p := newPacer(250*time.Millisecond, time.Second, 1.5)
	var got []time.Duration
	for range 5 {
		got = append(got, p.next())
	}
	want := []time.Duration{250 * time.Millisecond, 375 * time.Millisecond, 562500 * time.Microsecond, 843750 * time.Microsecond, time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	p.full()
	if w := p.next(); w != 250*time.Millisecond {
		t.Fatalf("after a full batch: %s", w)
	}
}
