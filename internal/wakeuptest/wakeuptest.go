// Package wakeuptest holds the behaviour every cross-process wakeup must
// show, run against real servers: a committed write wakes an idle relay
// that polls once a minute, a rollback signals nothing, and a listener
// whose connection is killed reconnects and wakes the relay again, and
// while a listener's link is cut or stalled its relays poll.
// testkit.Proxy cuts and stalls connections for the transports that have
// no kill command of their own.
package wakeuptest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

// Loan is the captured model of the tests: its inserts are
// "lib.loan.inserted".
type Loan struct {
	ID   uint
	Book string
}

// ChangeCapture declares Loan captured.
func (Loan) ChangeCapture() envelope.Options { return envelope.Options{Namespace: "lib"} }

// Recorder listens on a wakeup and records every call.
type Recorder struct {
	mu     sync.Mutex
	topics map[string]int
	nils   int
}

// Fn is the listener function.
func (r *Recorder) Fn(topics []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if topics == nil {
		r.nils++
		return
	}
	if r.topics == nil {
		r.topics = map[string]int{}
	}
	for _, t := range topics {
		r.topics[t]++
	}
}

// Count returns how many signals named topic.
func (r *Recorder) Count(topic string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topics[topic]
}

// Nils returns how many poll requests (nil topics) arrived.
func (r *Recorder) Nils() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nils
}

// Probe wraps a Wakeup to record what its listener is told.
type Probe struct {
	wakeup.Wakeup
	Rec Recorder
}

// Listen records, then passes on.
func (p *Probe) Listen(ctx context.Context, fn func([]string)) error {
	return p.Wakeup.Listen(ctx, func(ts []string) { p.Rec.Fn(ts); fn(ts) })
}

// Env is a PostgreSQL outbox with a captured GORM model whose plugin
// signals Writer, and a relay (started by Relay) listening on another
// wakeup value, as a relay in another process would.
type Env struct {
	SQL *sql.DB
	DB  *gorm.DB
}

// NewEnv opens the outbox and installs the capture plugin signalling w.
func NewEnv(t *testing.T, w wakeup.Wakeup) *Env {
	t.Helper()
	sqlDB, _ := testkit.Postgres(t)
	if err := envelope.Migrate(context.Background(), sqlDB, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(gormcapture.New(gormcapture.Config{Models: []any{&Loan{}}, Wakeup: w})); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Loan{}); err != nil {
		t.Fatal(err)
	}
	return &Env{SQL: sqlDB, DB: db}
}

// Relay starts a relay that polls once a minute, listening on w, and
// returns a counter of delivered events and the probe on w.
func (e *Env) Relay(t *testing.T, w wakeup.Wakeup) (*atomic.Int32, *Probe) {
	t.Helper()
	var n atomic.Int32
	probe := &Probe{Wakeup: w}
	d := delivery.Func(func(context.Context, *envelope.Event) error { n.Add(1); return nil })
	r, err := relay.New(e.SQL, d, relay.Config{Wakeup: probe, MinPollInterval: time.Minute, MaxPollInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return &n, probe
}

// WakesIdleRelay: after the relay's listener subscribed (up reports it),
// committed captured writes and Enqueue are delivered long before the
// relay's one-minute poll, because the wakeup signalled them.
func WakesIdleRelay(t *testing.T, e *Env, delivered *atomic.Int32, probe *Probe, up func() bool) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, up, "the listener never subscribed")
	testkit.Eventually(t, 30*time.Second, func() bool { return probe.Rec.Nils() > 0 }, "no subscription notice")
	base := delivered.Load()
	if err := e.DB.Create(&Loan{Book: "Dune"}).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := gormcapture.Enqueue(e.DB, envelope.Message{Topic: "lib.custom", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return delivered.Load() >= base+2 },
		"committed events not delivered by an idle relay (delivered %d)", delivered.Load()-base)
	testkit.Eventually(t, 20*time.Second, func() bool {
		return probe.Rec.Count("lib.loan.inserted") > 0 && probe.Rec.Count("lib.custom") > 0
	}, "the relay's wakeup did not see both topics")
}

// RollbackSendsNothing: a rolled-back transaction signals nothing; a
// committed one of five inserts signals its topic (once per transaction;
// a broker may merge it with others, never split it).
func RollbackSendsNothing(t *testing.T, e *Env, rec *Recorder) {
	t.Helper()
	errRollback := errors.New("roll back")
	err := e.DB.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Loan{Book: "A"}).Error; err != nil {
			return err
		}
		if _, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "lib.rolledback", Payload: 1}); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	err = e.DB.Transaction(func(tx *gorm.DB) error {
		for range 5 {
			if err := tx.Create(&Loan{Book: "B"}).Error; err != nil {
				return err
			}
		}
		_, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "lib.committed", Payload: 1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Signals are published in order by one goroutine: once the
	// committed transaction's arrived, a rollback's would have too.
	testkit.Eventually(t, 20*time.Second, func() bool { return rec.Count("lib.committed") > 0 }, "commit not signalled")
	if n := rec.Count("lib.loan.inserted"); n != 1 {
		t.Fatalf("lib.loan.inserted signalled %d times; want once (the rollback must send nothing, the commit one signal)", n)
	}
	if rec.Count("lib.rolledback") != 0 {
		t.Fatal("a rolled-back Enqueue was signalled")
	}
}

// SurvivesKill: kill() cuts the listener's connection; with notice, the
// listener must re-subscribe (a new nil notice: signals sent meanwhile are
// lost); without (Kafka, whose consumer resumes at its offset and loses
// nothing) it may reconnect unseen. Either way commits after the kill
// still wake the idle relay.
func SurvivesKill(t *testing.T, e *Env, delivered *atomic.Int32, probe *Probe, up func() bool, notice bool, kill func()) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, up, "the listener never subscribed")
	testkit.Eventually(t, 30*time.Second, func() bool { return probe.Rec.Nils() > 0 }, "no subscription notice")
	nils := probe.Rec.Nils()
	kill()
	if notice {
		// A reconnect or a poll request while down is a nil notice.
		testkit.Eventually(t, 60*time.Second, func() bool { return probe.Rec.Nils() > nils && up() },
			"the listener did not notice the kill and come back")
	}
	for i := range 3 {
		want := delivered.Load() + 1
		if err := e.DB.Create(&Loan{Book: "after"}).Error; err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool { return delivered.Load() >= want }, "commit %d after the kill not delivered", i)
	}
	if probe.Rec.Count("lib.loan.inserted") == 0 {
		t.Fatal("no signal after the kill")
	}
}

// DownThenBack: with the listener's server unreachable (setDown(true)),
// the relay is told to poll again and again, and the logs (read by logs)
// carry an ERROR once five attempts in a row failed; once reachable
// again the listener comes back and commits wake the idle relay.
func DownThenBack(t *testing.T, e *Env, delivered *atomic.Int32, probe *Probe, up func() bool, logs func() string, setDown func(bool)) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, up, "the listener never subscribed")
	setDown(true)
	nils := probe.Rec.Nils()
	testkit.Eventually(t, 60*time.Second, func() bool {
		return strings.Contains(logs(), "level=ERROR") && probe.Rec.Nils() >= nils+5
	}, "no ERROR after five failures in a row, or the relay was not told to poll (%d poll requests); logs:\n%s",
		probe.Rec.Nils()-nils, logs())
	if !strings.Contains(logs(), "failures_in_a_row=5") {
		t.Fatalf("logs:\n%s", logs())
	}
	setDown(false)
	testkit.Eventually(t, 60*time.Second, up, "the listener did not come back")
	want := delivered.Load() + 1
	if err := e.DB.Create(&Loan{Book: "back"}).Error; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return delivered.Load() >= want }, "commit after the outage not delivered")
}

// PollsWhileCut: with the listener's link broken by breakLink(true) —
// connections cut and refused (testkit.Proxy.SetDown) or kept open and
// silent (testkit.Proxy.Stall) — the relay is told to poll, so a commit
// made meanwhile (its signal cannot arrive) is delivered within within,
// long before the relay's one-minute poll; once the link is back
// (breakLink(false)) the listener comes back and commits wake the idle
// relay again.
func PollsWhileCut(t *testing.T, e *Env, delivered *atomic.Int32, probe *Probe, up func() bool, within time.Duration, breakLink func(bool)) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, up, "the listener never subscribed")
	testkit.Eventually(t, 30*time.Second, func() bool { return probe.Rec.Nils() > 0 }, "no subscription notice")
	nils := probe.Rec.Nils()
	breakLink(true)
	want := delivered.Load() + 1
	start := time.Now()
	if err := e.DB.Create(&Loan{Book: "during the cut"}).Error; err != nil {
		t.Fatal(err)
	}
	// The relay is told to poll (a poll it had under way when the link
	// broke may deliver the commit sooner, so both are waited for).
	if !testkit.WaitFor(within, func() bool { return delivered.Load() >= want && probe.Rec.Nils() > nils }) {
		t.Fatalf("within %s of the listener's link breaking: %d poll requests, the commit made meanwhile delivered: %v; "+
			"want the relays told to poll and the commit delivered", within, probe.Rec.Nils()-nils, delivered.Load() >= want)
	}
	t.Logf("told to poll and delivered %s after the break", time.Since(start).Round(time.Millisecond))
	breakLink(false)
	testkit.Eventually(t, 60*time.Second, up, "the listener did not come back")
	for i := range 3 {
		want := delivered.Load() + 1
		if err := e.DB.Create(&Loan{Book: "after the cut"}).Error; err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool { return delivered.Load() >= want }, "commit %d after the link came back not delivered", i)
	}
}

// Logs is a concurrency-safe log sink for a text slog handler.
type Logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was logged.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
