package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/wakeup"
)

// tableName is the env's outbox table, quoted.
func (e *env) tableName() string {
	tbl, _ := envelope.ParseTable(e.d, e.table)
	return tbl.Quoted
}

func (e *env) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	if e.d == envelope.SQLite {
		q = strings.NewReplacer("$1", "?1", "$2", "?2").Replace(q)
	}
	if e.d == envelope.MySQL {
		q, args = mysqlArgs(q, args)
	}
	if _, err := e.db.Exec(strings.ReplaceAll(q, "{table}", e.tableName()), args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// Regression (issue 12 item 1): a delivery error holding a NUL byte (or
// invalid UTF-8) made the failure mark fail on PostgreSQL (jsonb and text
// refuse \u0000): the row stayed at attempts 0 and was redelivered at
// every lease expiry, never dead-lettered, and the other failures of its
// batch were lost with it.
func TestDeliveryErrorWithNULIsRecorded(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		evs := e.enqueue(t, msg("nul", "k", 1), msg("bad-utf8", "", 2), msg("plain", "", 3))
		rec := &recorder{fail: func(ev *envelope.Event) error {
			switch ev.Topic {
			case "nul":
				return errors.New("broker said \x00 and stopped")
			case "bad-utf8":
				return errors.New("endpoint answered \xff\xfe")
			}
			return errors.New("plain failure")
		}}
		clk := &clock{t: time.Now()}
		r := e.newRelay(t, rec, Config{MaxAttempts: 2, RetryBase: time.Minute, RetryMax: time.Minute})
		r.dbClock = clk.now
		ctx := context.Background()
		if _, err := r.poll(ctx); err != nil {
			t.Fatalf("poll: %v", err)
		}
		for _, ev := range evs {
			row := e.row(t, ev.ID)
			if row.Attempts != 1 || row.LastError == "" || strings.ContainsRune(row.LastError, 0) || row.LeaseUntil != nil {
				t.Fatalf("%s after one failure: attempts %d, last_error %q, lease %v", ev.Topic, row.Attempts, row.LastError, row.LeaseUntil)
			}
		}
		if got := e.row(t, evs[0].ID).LastError; got != "broker said \uFFFD and stopped" {
			t.Fatalf("last_error %q", got)
		}
		clk.add(2 * time.Minute)
		if _, err := r.poll(ctx); err != nil {
			t.Fatalf("poll: %v", err)
		}
		if row := e.row(t, evs[0].ID); row.Attempts != 2 || row.DeadLetteredAt == nil {
			t.Fatalf("after MaxAttempts failures: %+v", row)
		}
	})
}

func TestLastError(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ok": "ok", "a\x00b": "a\uFFFDb", "\xff": "\uFFFD", "é\x00\xc3": "é\uFFFD\uFFFD",
		strings.Repeat("é", 3000): strings.Repeat("é", maxErrorLength/2),
	} {
		if got := lastError(errors.New(in)); got != want {
			t.Errorf("lastError(%q) = %q, want %q", in, got, want)
		}
	}
}

// steppedClock is a relay clock that jumps: its n-th reading (from 1)
// adds jump[n] for good, after running hook[n].
type steppedClock struct {
	mu   sync.Mutex
	n    int
	off  time.Duration
	jump map[int]time.Duration
	hook map[int]func()
}

func (c *steppedClock) now() time.Time {
	c.mu.Lock()
	c.n++
	h, j := c.hook[c.n], c.jump[c.n]
	c.off += j
	off := c.off
	c.mu.Unlock()
	if h != nil {
		h()
	}
	return time.Now().Add(off)
}

// Regression (issue 12 item 2): the lease end was computed before the
// lease statement, and the batch delivered however long the statement
// took. Here the statement "takes" 2×Lease by the relay's clock (its
// second reading, right after the statement, jumps), and meanwhile relay
// B, for which A's lease has run out, leases the same event: A must not
// deliver it.
func TestLeaseThatRanOutDuringItsStatementIsNotDelivered(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		const lease = time.Minute
		ev := e.enqueue(t, msg("t", "k", 1))[0]
		recA, recB := &recorder{}, &recorder{}
		logs := &logRecords{}
		a := e.newRelay(t, recA, Config{Name: "a", Lease: lease, Logger: slog.New(logs)})
		b := e.newRelay(t, recB, Config{Name: "b", Lease: lease})
		b.dbClock = func() time.Time { return time.Now().Add(2 * lease) } // A's lease has run out for B
		var bGot int
		a.now = (&steppedClock{jump: map[int]time.Duration{2: 2 * lease}, hook: map[int]func(){2: func() {
			batch, _, err := b.lease(context.Background())
			if err != nil {
				t.Error(err)
			}
			bGot = len(batch)
		}}}).now
		res, err := a.poll(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if bGot != 1 {
			t.Fatalf("relay B leased %d events; the test needs it to take A's expired lease", bGot)
		}
		if recA.count() != 0 || res.keyed != 0 {
			t.Fatalf("relay A delivered %d events under a lease that ran out during its statement (B holds it)", recA.count())
		}
		if row := e.row(t, ev.ID); row.LeasedBy != "b" || row.PublishedAt != nil || row.Attempts != 0 {
			t.Fatalf("row after A gave up: %+v", row)
		}
		if len(logs.atLeast(slog.LevelWarn)) == 0 {
			t.Fatal("A did not say why it delivered nothing")
		}

		// The same slow statement with nobody taking over: A renews the
		// lease, then delivers.
		ev2 := e.enqueue(t, msg("t", "k2", 2))[0]
		a.now = (&steppedClock{jump: map[int]time.Duration{2: 2 * lease}}).now
		if _, err := a.poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		if recA.count() != 1 || e.row(t, ev2.ID).PublishedAt == nil {
			t.Fatalf("after a slow lease nobody took over, A delivered %d events", recA.count())
		}
	})
}

// skewed returns a relay clock off by d.
func skewed(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }

// Regression (issue 9 §4): leases and due times were compared with each
// relay host's clock. Relays whose clocks run 2×Lease ahead and behind
// must agree with the database: no takeover of a live lease, no retry or
// DeliverAt left waiting, leases no longer than Lease.
func TestSkewedRelayClocksAgreeOnLeasesAndDueTimes(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		const lease = time.Minute
		ctx := context.Background()
		rec := &recorder{}
		ahead := e.newRelay(t, rec, Config{Name: "ahead", Lease: lease, RetryBase: time.Millisecond, RetryMax: time.Millisecond})
		behind := e.newRelay(t, rec, Config{Name: "behind", Lease: lease})
		ahead.now, behind.now = skewed(2*lease), skewed(-2*lease)

		// A live lease of the relay that runs behind is not taken over by
		// the one that runs ahead.
		e.enqueue(t, msg("held", "", 1))
		held, _, err := behind.lease(ctx)
		if err != nil || len(held) != 1 {
			t.Fatalf("behind leased %d: %v", len(held), err)
		}
		if got, _, err := ahead.lease(ctx); err != nil || len(got) != 0 {
			t.Fatalf("the relay ahead took over a live lease: %s %v", describe(got), err)
		}
		// The lease the relay ahead writes runs Lease from the database's
		// now, not from its own.
		e.enqueue(t, msg("mine", "", 2))
		mine, _, err := ahead.lease(ctx)
		after := time.Now()
		if err != nil || len(mine) != 1 {
			t.Fatalf("ahead leased %d: %v", len(mine), err)
		}
		if lu := e.row(t, mine[0].ID).LeaseUntil; lu == nil || lu.After(after.Add(lease)) {
			t.Fatalf("lease_until %v is past the database's now + Lease (%v)", lu, after.Add(lease))
		}
		if _, err := ahead.mark(ctx, mine, []error{nil}); err != nil {
			t.Fatal(err)
		}
		if _, err := behind.mark(ctx, held, []error{nil}); err != nil {
			t.Fatal(err)
		}

		// An event due now is due for the relay that runs behind.
		due := e.enqueue(t, envelope.Message{Topic: "due", Payload: 1, DeliverAt: time.Now()})[0]
		testkit.Eventually(t, 10*time.Second, func() bool {
			_, _ = behind.poll(ctx)
			return e.row(t, due.ID).PublishedAt != nil
		}, "an event due now delivered by the relay whose clock runs behind")

		// A retry the relay ahead schedules (1 ms) is due for the others
		// in 1 ms, not in 2×Lease.
		failOnce := e.enqueue(t, msg("retry", "", 3))[0]
		var failed atomic.Bool
		rec.fail = func(ev *envelope.Event) error {
			if ev.Topic == "retry" && failed.CompareAndSwap(false, true) {
				return errors.New("once")
			}
			return nil
		}
		if _, err := ahead.poll(ctx); err != nil || !failed.Load() {
			t.Fatalf("ahead's poll: %v (failed: %v)", err, failed.Load())
		}
		testkit.Eventually(t, 10*time.Second, func() bool {
			_, _ = behind.poll(ctx)
			return e.row(t, failOnce.ID).PublishedAt != nil
		}, "a retry scheduled by the relay ahead delivered by the relay behind")
	})
}

// Regression (issue 12 item 8): with RetryMax near the largest Duration
// the ±10% jitter overflowed and every retry after attempt ~34 was due at
// once (a wait of about −292 years).
func TestBackoffDoesNotOverflow(t *testing.T) {
	t.Parallel()
	r := &Relay{cfg: Config{RetryBase: time.Second, RetryMax: math.MaxInt64}}
	for _, j := range []float64{0, 0.5, 0.999999} {
		r.jitter = func() float64 { return j }
		prev := time.Duration(0)
		for attempts := 1; attempts <= 100; attempts++ {
			got := r.backoff(attempts)
			if got <= 0 || (got < prev && attempts < 62) {
				t.Fatalf("jitter %v: backoff(%d) = %s after %s", j, attempts, got, prev)
			}
			prev = got
		}
	}
	eachDialect(t, func(t *testing.T, e *env) {
		ev := e.enqueue(t, msg("t", "", 1))[0]
		rec := &recorder{fail: func(*envelope.Event) error { return errors.New("no") }}
		r := e.newRelay(t, rec, Config{MaxAttempts: 100, RetryBase: time.Hour, RetryMax: math.MaxInt64})
		r.jitter = func() float64 { return 0.999999 }
		// As if it had failed 40 times already.
		e.exec(t, `UPDATE {table} SET attempts = 40`)
		if _, err := r.poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		row := e.row(t, ev.ID)
		if row.Attempts != 41 || row.NextAttemptAt == nil || row.NextAttemptAt.Before(time.Now().Add(100*365*24*time.Hour)) {
			t.Fatalf("after the 41st failure: %+v", row)
		}
		if res, err := r.poll(context.Background()); err != nil || res.leased != 0 {
			t.Fatalf("the event is due again at once: leased %d, %v", res.leased, err)
		}
	})
}

// controlledWakeup subscribes (fn(nil)) and listens until drop is closed;
// from then on Listen fails at once, as a wakeup whose server is gone.
type controlledWakeup struct {
	wakeup.Wakeup
	subscribe bool // false: Listen blocks "connecting" and never subscribes
	drop      chan struct{}
}

func (w *controlledWakeup) Listen(ctx context.Context, fn func([]string)) error {
	select {
	case <-w.drop:
		return errors.New("connection refused")
	default:
	}
	if w.subscribe {
		fn(nil)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-w.drop:
		return errors.New("connection reset")
	}
}

// waits records the loop's waits between polls.
type waits struct {
	mu sync.Mutex
	ds []time.Duration
}

func (w *waits) add(d time.Duration) { w.mu.Lock(); w.ds = append(w.ds, d); w.mu.Unlock() }
func (w *waits) list() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.ds...)
}

// Regression (issue 12 item 7): losing the wakeup did not shorten a wait
// already running (a minute, the default cap with a wakeup), so nothing
// was polled for up to a minute although the docs promise a poll at least
// every MaxPollInterval without the wakeup.
func TestLosingTheWakeupCutsTheRunningWaitShort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	w := &controlledWakeup{subscribe: true, drop: make(chan struct{})}
	rec := &recorder{}
	ws := &waits{}
	long := make(chan struct{})
	var once sync.Once
	r, err := New(e.db, rec, Config{Wakeup: w, MinPollInterval: time.Millisecond, PollMultiplier: 1e12,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.onWait = func(d time.Duration) {
		ws.add(d)
		if d >= DefaultMaxPollIntervalWithWakeup && r.listening() {
			once.Do(func() { close(long) })
		}
	}
	start(t, r)
	<-long // listening, and in a one-minute wait
	e.enqueue(t, msg("a", "", 1))
	close(w.drop)
	testkit.Eventually(t, 30*time.Second, func() bool { return rec.count() == 1 }, "delivered after the wakeup was lost (waits %v)", ws.list())
}

// Regression (issue 12 item 7): a wait computed while the wakeup was still
// connecting (Listen called, not yet subscribed) took the one-minute cap
// of a listening relay.
func TestWaitWhileTheWakeupConnectsIsCappedAsWithout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	w := &controlledWakeup{drop: make(chan struct{})} // never subscribes
	ws := &waits{}
	enough := make(chan struct{})
	var once sync.Once
	r, err := New(e.db, &recorder{}, Config{Wakeup: w, MinPollInterval: time.Millisecond, PollMultiplier: 1e12,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.onWait = func(d time.Duration) {
		ws.add(d)
		if len(ws.list()) >= 2 {
			once.Do(func() { close(enough) })
		}
	}
	start(t, r)
	<-enough
	if r.listening() {
		t.Fatal("a wakeup that never subscribed counts as listening")
	}
	for _, d := range ws.list() {
		if d > DefaultMaxPollInterval {
			t.Fatalf("waits %v: one is above %s, the cap without a wakeup", ws.list(), DefaultMaxPollInterval)
		}
	}
}

// Regression (issue 9 §3): one row the relay cannot decode made every
// poll fail, so no event was delivered. Each decoded column is broken in
// turn, on both dialects: the bad row becomes its own failure (attempts,
// last_error naming the column, dead-lettered at MaxAttempts), its key is
// held back, and every other event is delivered.
func TestUndecodableRowIsItsOwnFailure(t *testing.T) {
	t.Parallel()
	type breakage struct {
		column, set string
		repaired    bool // recording the failure rewrites the column: the retry decodes
	}
	cases := map[envelope.Dialect][]breakage{
		envelope.Postgres: {
			{"headers", `headers = '{"h": 5}'`, false},
			{"headers", `headers = '[1,2]'`, false},
			{"headers", `headers = '"text"'`, false},
			{"created_at", `created_at = 'infinity'`, false},
			{"next_attempt_at", `next_attempt_at = '-infinity'`, true},
		},
		envelope.SQLite: {
			{"headers", `headers = '{"h": 5}'`, false},
			{"headers", `headers = '[1,2]'`, false},
			{"payload", `payload = 'not json'`, false},
			{"id", `id = 'not-a-uuid'`, false},
			{"created_at", `created_at = 'yesterday'`, false},
			{"attempts", `attempts = 'many'`, true},
			{"next_attempt_at", `next_attempt_at = '0000-garbage'`, true},
			{"topic", `topic = x'ff00'`, false}, // the control: any bytes are a string, no failure
		},
	}
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite} {
		for i, c := range cases[d] {
			t.Run(fmt.Sprintf("%s/%d_%s", d, i, c.column), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, d)
				evs := e.enqueue(t, msg("good", "", 1), msg("bad", "k", 2), msg("good", "other", 3),
					msg("after", "k", 4), msg("good", "", 5))
				e.exec(t, `UPDATE {table} SET `+c.set+` WHERE sequence = $1`, evs[1].Sequence)
				if c.column == "topic" { // the control
					rec := &recorder{}
					r := e.newRelay(t, rec, Config{})
					for range 3 {
						pollOnce(t, r, rec)
					}
					if rec.count() != 5 {
						t.Fatalf("%d of 5 delivered", rec.count())
					}
					return
				}
				rec := &recorder{}
				var mu sync.Mutex
				var failed []Failed
				var dead []DeadLettered
				clk := &clock{t: time.Now()}
				r := e.newRelay(t, rec, Config{MaxAttempts: 2, RetryBase: time.Minute, RetryMax: time.Minute,
					Observer: ObserverFuncs{
						OnFailed:       func(_ context.Context, f Failed) { mu.Lock(); failed = append(failed, f); mu.Unlock() },
						OnDeadLettered: func(_ context.Context, d DeadLettered) { mu.Lock(); dead = append(dead, d); mu.Unlock() },
					}})
				r.dbClock = clk.now
				ctx := context.Background()
				for range 3 {
					if _, err := r.poll(ctx); err != nil {
						t.Fatalf("poll failed: %v", err)
					}
				}
				if rec.count() != 3 {
					t.Fatalf("%d events delivered, want the 3 good ones (the bad row's key holds back 'after')", rec.count())
				}
				row := e.rawRow(t, evs[1].Sequence)
				if row.attempts != 1 || !strings.Contains(row.lastError, "column "+c.column) || row.dead {
					t.Fatalf("the bad row after one poll: %+v; want attempts 1 and last_error naming %s", row, c.column)
				}
				var de *DecodeError
				mu.Lock()
				if len(failed) != 1 || !errors.As(failed[0].Err, &de) || de.Column != c.column || de.Sequence != evs[1].Sequence {
					t.Fatalf("Failed observed: %+v", failed)
				}
				mu.Unlock()
				clk.add(2 * time.Minute)
				for range 3 {
					if _, err := r.poll(ctx); err != nil {
						t.Fatalf("poll failed: %v", err)
					}
				}
				row = e.rawRow(t, evs[1].Sequence)
				if c.repaired {
					if !row.published || rec.count() != 5 {
						t.Fatalf("a row whose bad column the failure record rewrote: %+v, %d delivered", row, rec.count())
					}
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if row.attempts != 2 || !row.dead || len(dead) != 1 || !errors.As(dead[0].Err, &de) {
					t.Fatalf("the bad row after MaxAttempts: %+v, dead-lettered observed %d", row, len(dead))
				}
				if rec.count() != 3 {
					t.Fatalf("%d delivered; 'after' must wait behind its dead key", rec.count())
				}
			})
		}
	}
}

type rawRow struct {
	attempts        int
	lastError       string
	dead, published bool
}

// rawRow reads the bookkeeping of a row whose other columns may not scan.
func (e *env) rawRow(t testing.TB, seq int64) rawRow {
	t.Helper()
	q := `SELECT CAST(attempts AS INTEGER), coalesce(last_error, ''), dead_lettered_at IS NOT NULL, published_at IS NOT NULL FROM ` + e.tableName() + ` WHERE sequence = $1`
	if e.d == envelope.SQLite {
		q = strings.ReplaceAll(q, "$1", "?")
	}
	if e.d == envelope.MySQL {
		q = strings.NewReplacer("$1", "?", "CAST(attempts AS INTEGER)", "attempts").Replace(q)
	}
	var r rawRow
	if err := e.db.QueryRow(q, seq).Scan(&r.attempts, &r.lastError, &r.dead, &r.published); err != nil {
		t.Fatal(err)
	}
	return r
}

// Regression (issue 10): a statement that fails because a pooler lost
// pgx's prepared statement (SQLSTATE 26000; DEALLOCATE ALL does the same
// to the one connection here) says what to change. The relay itself runs
// its statements unnamed on pgx's stdlib driver (plans.go), so it is
// immune; through a driver it cannot see into (here: that detection
// turned off) its statements are named and the advice applies.
func TestPoolerErrorSaysWhatToChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	e.db.SetMaxOpenConns(1)
	ctx := context.Background()
	immune := e.newRelay(t, &recorder{}, Config{})
	r := e.newRelay(t, &recorder{}, Config{})
	r.execMode.Store(nil)
	e.enqueue(t, msg("t", "", 1))
	for range 3 { // as many runs as after the DEALLOCATE ALL below
		if _, err := immune.poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := immune.Backlog(ctx); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, msg("t", "", 2))
	defer func() {
		e.exec(t, `DEALLOCATE ALL`)
		for range 3 {
			if _, err := immune.poll(ctx); err != nil {
				t.Fatalf("poll after DEALLOCATE ALL, relay in cache-describe mode: %v", err)
			}
		}
		if _, err := immune.Backlog(ctx); err != nil {
			t.Fatalf("backlog after DEALLOCATE ALL, relay in cache-describe mode: %v", err)
		}
	}()
	if _, err := r.Backlog(ctx); err != nil {
		t.Fatal(err)
	}
	// Two polls prepare both forms of the lease (with and without the key
	// walk): the first walks and leases the event, the second, after a
	// short lease of an unordered event, does not walk and finds nothing,
	// so the next one walks again.
	for range 2 {
		if _, err := r.poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(t, `DEALLOCATE ALL`)
	_, err := r.Backlog(ctx)
	if err == nil || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
		t.Fatalf("backlog after the statements were lost: %v", err)
	}
	e.exec(t, `DEALLOCATE ALL`)
	if _, err := r.poll(ctx); err == nil || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
		t.Fatalf("poll after the statements were lost: %v", err)
	}
	for code, want := range map[string]bool{"26000": true, "42P05": true, "23505": false} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code, Message: "x"})
		if got := poolerHint(err) != ""; got != want {
			t.Errorf("SQLSTATE %s: hint %v, want %v", code, got, want)
		}
	}
}

// Issue 10: the scheduled cleanup deletes what its Retain options name,
// and only that.
func TestScheduledCleanup(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		var ms []envelope.Message
		for i := range 25 {
			ms = append(ms, msg("ok", "", i))
		}
		ms = append(ms, msg("dead", "", 0))
		e.enqueue(t, ms...)
		rec := &recorder{fail: func(ev *envelope.Event) error {
			if ev.Topic == "dead" {
				return errors.New("no")
			}
			return nil
		}}
		r := e.newRelay(t, rec, Config{MaxAttempts: 1, RetainPublished: time.Microsecond, CleanupInterval: 5 * time.Millisecond,
			CleanupBatchSize: 10})
		start(t, r)
		testkit.Eventually(t, 30*time.Second, func() bool {
			return e.count(t, "published_at IS NOT NULL") == 0 && e.count(t, "dead_lettered_at IS NOT NULL") == 1 && rec.count() == 25
		}, "published events deleted")
		n := r.cleanups.Load()
		testkit.Eventually(t, 30*time.Second, func() bool { return r.cleanups.Load() > n+2 }, "more cleanup passes")
		if e.count(t, "dead_lettered_at IS NOT NULL") != 1 {
			t.Fatal("a dead letter was deleted without RetainDeadLettered")
		}
		r2 := e.newRelay(t, rec, Config{RetainDeadLettered: time.Microsecond, CleanupInterval: time.Hour})
		start(t, r2)
		testkit.Eventually(t, 30*time.Second, func() bool { return e.count(t, "1 = 1") == 0 }, "dead letter deleted")
	})
}

func TestConfigRejectsBadCleanupAndNames(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Config{
		"RetainPublished":    {RetainPublished: -1},
		"RetainDeadLettered": {RetainDeadLettered: -time.Hour},
		"CleanupInterval":    {CleanupInterval: -1},
		"Name":               {Name: "relay\x00one"},
		"Topics[1]":          {Topics: []string{"a", "b\xff"}},
		"ExcludeTopics[0]":   {ExcludeTopics: []string{"\x00*"}},
	} {
		_, err := c.withDefaults().validate()
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A Filter topic with NUL or invalid UTF-8 would reach PostgreSQL as a
// bind argument it refuses; it is an ErrValidation naming the entry.
func TestRetryDeadLetteredRejectsUnstorableTopics(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		r := e.newRelay(t, &recorder{}, Config{})
		for _, bad := range []string{"a\x00", "b\xff*"} {
			_, err := r.RetryDeadLettered(context.Background(), Filter{Topics: []string{"ok", bad}})
			if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), "Filter.Topics[1]") {
				t.Fatalf("%q: %v", bad, err)
			}
		}
	})
}

// Regression (issue 12 item 2), as reproduced on PostgreSQL: the lease
// statement waits behind LOCK TABLE … EXCLUSIVE for longer than the Lease,
// so the lease it writes has run out when it returns. Relay B polls while
// A delivers (A's delivery waits for B's poll): before the fix A delivered
// under the run-out lease and B leased and delivered the same event too.
func TestLeaseStatementBlockedLongerThanTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	const lease = 900 * time.Millisecond
	ev := e.enqueue(t, msg("t", "k", 1))[0]
	var deliveries atomic.Int32
	aDelivering, bPolled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := e.newRelay(t, deliveryFunc(func(ctx context.Context, _ *envelope.Event) error {
		deliveries.Add(1)
		once.Do(func() { close(aDelivering) })
		select {
		case <-bPolled:
		case <-ctx.Done():
		}
		return nil
	}), Config{Name: "a", Lease: lease, DeliveryTimeout: lease - 100*time.Millisecond})
	b := e.newRelay(t, deliveryFunc(func(context.Context, *envelope.Event) error { deliveries.Add(1); return nil }),
		Config{Name: "b", Lease: lease, DeliveryTimeout: lease - 100*time.Millisecond})
	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`LOCK TABLE ` + e.tableName() + ` IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() { _, err := a.poll(ctx); aDone <- err }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		var n int
		err := e.db.QueryRow(`SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted`, e.tableName()).Scan(&n)
		return err == nil && n > 0
	}, "A's lease statement waiting for the table lock")
	blocked := time.Now()
	// The lease A's statement will write runs out while it waits: the
	// condition here is time itself.
	testkit.Eventually(t, 10*time.Second, func() bool { return time.Since(blocked) > 2*lease }, "the lease time passed")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var aErr error
	select {
	case <-aDelivering:
	case aErr = <-aDone:
		aDone <- aErr
	}
	if _, err := b.poll(ctx); err != nil {
		t.Fatal(err)
	}
	close(bPolled)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		if deliveries.Load() < 1 {
			_, _ = b.poll(ctx)
		}
		return e.row(t, ev.ID).PublishedAt != nil
	}, "the event published")
	if n := deliveries.Load(); n != 1 {
		t.Fatalf("the event was delivered %d times: A under a lease that ran out during its statement, and B", n)
	}
}

type deliveryFunc func(ctx context.Context, e *envelope.Event) error

func (f deliveryFunc) Deliver(ctx context.Context, e *envelope.Event) error { return f(ctx, e) }
func (deliveryFunc) Close() error                                           { return nil }

// An Observer that panics (a nil map in a metrics hook) is logged; the
// relay goes on delivering.
func TestPanickingObserverDoesNotStopTheRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	logs := &logRecords{}
	rec := &recorder{fail: func(ev *envelope.Event) error {
		if ev.Topic == "fail" {
			return errors.New("no")
		}
		return nil
	}}
	var counts map[string]int // nil: every write panics
	obs := ObserverFuncs{
		OnDelivered:    func(context.Context, Delivered) { counts["delivered"]++ },
		OnFailed:       func(context.Context, Failed) { counts["failed"]++ },
		OnDeadLettered: func(context.Context, DeadLettered) { counts["dead"]++ },
	}
	r := e.newRelay(t, rec, Config{MaxAttempts: 2, Observer: obs, Logger: slog.New(logs)})
	e.enqueue(t, msg("ok", "", 1), msg("fail", "", 2))
	start(t, r)
	testkit.Eventually(t, 20*time.Second, func() bool { return e.count(t, "dead_lettered_at IS NOT NULL") == 1 }, "dead-lettered")
	e.enqueue(t, msg("later", "", 3))
	testkit.Eventually(t, 20*time.Second, func() bool { return rec.count() == 2 }, "delivered after the Observer panicked")
	if !hasLog(logs, slog.LevelError, "Observer panicked") {
		t.Fatal("the Observer's panic was not logged")
	}
}

// Regression: a failure's backoff was counted by the relay from before its
// batch's marks, by PostgreSQL from the failure mark's now(). When the
// mark of the batch's delivered events took longer than the backoff (here
// a trigger makes it take a second), the relay woke for the retry before
// the database had it due, leased nothing, and then waited its poll
// interval — here MaxPollInterval, ten minutes — for a retry half a second
// away. Found as a webhook receiver's crash test spending most of its time
// idle (inbox/webhookinbox TestCrash: 5 s stalls, the default
// MaxPollInterval).
func TestRetryDueAfterASlowMark(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	for _, q := range []string{
		`CREATE FUNCTION herald_slow_mark() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(1); RETURN NEW; END$$`,
		`CREATE TRIGGER herald_slow_mark BEFORE UPDATE ON ` + e.tableName() +
			` FOR EACH ROW WHEN (OLD.published_at IS NULL AND NEW.published_at IS NOT NULL) EXECUTE FUNCTION herald_slow_mark()`,
	} {
		if _, err := e.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	// One batch of two events: one delivered (its mark takes a second),
	// one failed once (its mark follows, with a backoff of half a second).
	e.enqueue(t, msg("ok", "", 1), msg("fails once", "", 2))
	var failed atomic.Bool
	rec := &recorder{fail: func(e *envelope.Event) error {
		if e.Topic == "fails once" && failed.CompareAndSwap(false, true) {
			return errors.New("the first attempt fails")
		}
		return nil
	}}
	r := e.newRelay(t, rec, Config{RetryBase: 500 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		MinPollInterval: 10 * time.Millisecond, PollMultiplier: 1e12, MaxPollInterval: 10 * time.Minute})
	start(t, r)
	testkit.Eventually(t, time.Minute, func() bool { return rec.count() == 2 },
		"the retry, due half a second after its mark, was not delivered within a minute")
}

// Regression: the relay woke for the earliest retry its failures
// scheduled and forgot the others. The backoff's ±10% jitter spreads one
// batch's retries over a fifth of the backoff: those the wake found not
// yet due waited the poll interval — here MaxPollInterval, ten minutes.
// The loop now wakes at the first and at the last of each poll's retries.
func TestRetriesSpreadByJitterAllComeDue(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		const n = 50
		ms := make([]envelope.Message, n)
		for i := range ms {
			ms[i] = msg("fails once", "", i)
		}
		e.enqueue(t, ms...)
		rec := failingOnce("the first attempt fails")
		r := e.newRelay(t, rec, Config{RetryBase: time.Second, RetryMax: time.Second,
			MinPollInterval: 10 * time.Millisecond, PollMultiplier: 1e12, MaxPollInterval: 10 * time.Minute})
		start(t, r)
		testkit.Eventually(t, time.Minute, func() bool { return rec.count() == n },
			"the retries, due 0.9–1.1 s after their failure, were not all delivered within a minute")
	})
}
