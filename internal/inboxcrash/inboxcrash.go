// Package inboxcrash is the crash test every inbox adapter runs: events
// written to a PostgreSQL outbox go through a real relay and transport to
// a consumer process that SIGKILLs itself before the handler, inside it
// (before the commit) or after the commit (before the transport's ack),
// again and again; the test restarts it until every event is processed,
// then counts each id's effects: exactly one in transactional mode, at
// most one in non-transactional mode (HandleOnce).
//
// HERALD_CRASH_EVENTS (default DefaultEvents, 40, what `go test ./...` and
// CI run) sets the events per mode, HERALD_CRASH_KILL_EVERY (default
// DefaultKillEvery, 10) the mean number of messages a consumer process
// handles before it dies: about four kills per mode at the defaults. The
// large variant, the former default (three times the events, each process
// living three times as long, several minutes an adapter):
//
//	HERALD_CRASH_EVENTS=120 HERALD_CRASH_KILL_EVERY=30 go test -count=1 -run 'TestCrash$' ./inbox/...
package inboxcrash

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// The environment of the test and of its child processes.
const (
	EnvEvents    = "HERALD_CRASH_EVENTS"
	EnvKillEvery = "HERALD_CRASH_KILL_EVERY"
	envDSN       = "HERALD_CRASH_CHILD_DSN"
	envMode      = "HERALD_CRASH_CHILD_MODE"
	envTarget    = "HERALD_CRASH_CHILD_TARGET"
)

// The defaults of EnvEvents and EnvKillEvery: small enough for CI, large
// enough that every mode's consumer is killed several times.
const (
	DefaultEvents    = 40
	DefaultKillEvery = 10
)

// Consumer is the inbox consumer name every child uses.
const Consumer = "crash"

// Topic is every crash event's topic.
const Topic = "crash.event"

// Mode is where the consumer dies, and whether it is transactional.
type Mode struct {
	Name  string
	Tx    bool   // Handle (effect in the transaction) or HandleOnce (effect after the id's commit)
	Point string // "before" the handler, "inside" it (before the commit / before the effect), "after" the commit (before the ack)
}

// Modes are the cases every adapter runs.
var Modes = []Mode{
	{"tx-before", true, "before"},
	{"tx-inside", true, "inside"},
	{"tx-after", true, "after"},
	{"once-inside", false, "inside"},
	{"once-after", false, "after"},
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// Parent is what an adapter's crash test gives Run.
type Parent struct {
	// Delivery returns the relay's delivery to target (a stream, a topic,
	// a queue, a URL), fresh for each mode.
	Delivery func(t *testing.T, target string) delivery.Delivery
	// ChildTest names the adapter's child test function, which calls
	// ChildFromEnv and consumes target with Child.Process.
	ChildTest string
	// Target returns the mode's target name; nil = "herald-crash-<mode>-<random>".
	Target func(t *testing.T, mode Mode) string
	// Env adds variables to the child's environment (a broker address).
	Env []string
	// Concurrent: the consumer handles several messages at once (an HTTP
	// server), so one kill also ends the others in flight, and in
	// non-transactional mode each of those whose id had committed loses
	// its effect even when the kill point is "after".
	Concurrent bool
	// Relay adjusts the relay's configuration (a receiver that is down
	// between kills needs more attempts).
	Relay func(*relay.Config)
}

// Run runs every mode and reports the figures with t.Logf.
func Run(t *testing.T, p Parent) {
	if testing.Short() {
		t.Skip("crash test: needs PostgreSQL and the transport; skipped with -short")
	}
	n, every := envInt(EnvEvents, DefaultEvents), envInt(EnvKillEvery, DefaultKillEvery)
	for _, mode := range Modes {
		t.Run(mode.Name, func(t *testing.T) {
			db, dsn := testkit.Postgres(t)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
				t.Fatal(err)
			}
			if err := inbox.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `CREATE TABLE effects (id TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			target := fmt.Sprintf("herald-crash-%s-%d", mode.Name, rand.Uint32())
			if p.Target != nil {
				target = p.Target(t, mode)
			}
			w, err := envelope.NewWriter(envelope.Postgres, "")
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i += 500 {
				var ms []envelope.Message
				for j := i; j < min(n, i+500); j++ {
					ms = append(ms, envelope.Message{Topic: Topic, Payload: map[string]int{"i": j}})
				}
				if _, err := w.Write(ctx, db, ms); err != nil {
					t.Fatal(err)
				}
			}
			rc := relay.Config{Dialect: envelope.Postgres, Name: "crash-relay", Logger: slog.New(slog.DiscardHandler)}
			if p.Relay != nil {
				p.Relay(&rc)
			}
			r, err := relay.New(db, p.Delivery(t, target), rc)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.Stop(context.Background()) }()

			kills, starts := 0, 0
			for {
				starts++
				// A child that hangs gets SIGQUIT after 3 minutes: its
				// goroutines' stacks end up in the failure's output.
				childCtx, childCancel := context.WithTimeout(ctx, time.Duration(envInt("HERALD_CRASH_CHILD_TIMEOUT_S", 180))*time.Second)
				cmd := exec.CommandContext(childCtx, os.Args[0], "-test.run=^"+p.ChildTest+"$", "-test.count=1", "-test.v")
				cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
				dieWithParent(cmd)
				cmd.Env = append(os.Environ(), envDSN+"="+dsn, envMode+"="+mode.Name, envTarget+"="+target,
					EnvEvents+"="+strconv.Itoa(n), EnvKillEvery+"="+strconv.Itoa(every))
				cmd.Env = append(cmd.Env, p.Env...)
				began := time.Now()
				out, err := cmd.CombinedOutput()
				childCancel()
				if os.Getenv("HERALD_CRASH_TRACE") != "" {
					var rec int
					_ = db.QueryRowContext(ctx, `SELECT count(*) FROM herald_inbox`).Scan(&rec)
					t.Logf("process %d: %s, %v, %d recorded", starts, time.Since(began).Round(time.Millisecond), err, rec)
				}
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
						kills++
						continue
					}
				}
				if err != nil {
					var published, failed int
					var lastErr string
					_ = db.QueryRowContext(ctx, `SELECT count(published_at), count(*) FILTER (WHERE attempts > 0), coalesce(max(last_error), '') FROM herald_outbox`).Scan(&published, &failed, &lastErr)
					t.Fatalf("consumer process %d (%d of %d events published, %d failed at least once: %s): %v\n%s", starts, published, n, failed, lastErr, err, out)
				}
				break
			}
			counts := effectCounts(ctx, t, db)
			var recorded int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM herald_inbox WHERE consumer = $1`, Consumer).Scan(&recorded); err != nil {
				t.Fatal(err)
			}
			twice := 0
			for _, c := range counts {
				if c > 1 {
					twice++
				}
			}
			t.Logf("%s: %d events, %d consumer processes, %d SIGKILLs, %d ids with an effect, %d with more than one, %d ids recorded",
				mode.Name, n, starts, kills, len(counts), twice, recorded)
			if twice > 0 {
				t.Errorf("%d ids took effect more than once", twice)
			}
			if recorded != n {
				t.Errorf("%d ids recorded; want %d", recorded, n)
			}
			if (mode.Tx || (mode.Point == "after" && !p.Concurrent)) && len(counts) != n {
				t.Errorf("%d ids took effect; want all %d", len(counts), n)
			}
			if kills == 0 && n >= 2*every {
				t.Errorf("no consumer process was killed")
			}
		})
	}
}

// Child is a consumer process's side of the test.
type Child struct {
	DB     *sql.DB
	Inbox  *inbox.Inbox
	Mode   Mode
	Target string // what to consume
	n      int
	left   atomic.Int64 // messages this process handles before it dies (a webhook receiver counts from concurrent requests)
}

// ChildFromEnv returns the child's setup, or skips t when it is not a
// crash test's child.
func ChildFromEnv(t *testing.T) *Child {
	dsn := os.Getenv(envDSN)
	if dsn == "" {
		t.Skip("a crash test's consumer process; run by the crash test")
	}
	c := &Child{Target: os.Getenv(envTarget), n: envInt(EnvEvents, DefaultEvents)}
	for _, m := range Modes {
		if m.Name == os.Getenv(envMode) {
			c.Mode = m
		}
	}
	every := envInt(EnvKillEvery, DefaultKillEvery)
	c.left.Store(int64(1 + rand.IntN(2*every)))
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	c.DB = db
	c.Inbox, err = inbox.New(context.Background(), db, inbox.Config{Consumer: Consumer, Dialect: envelope.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Die kills the process when point is the mode's and its count ran out.
func (c *Child) Die(point string) {
	if c.Mode.Point == point && c.left.Load() <= 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// Tick counts a message toward this process's death. Only new ids count:
// a transport that redelivers many already-processed messages after each
// restart (a Kafka poll whose offsets were not committed) would otherwise
// kill every process before it reached a new one.
func (c *Child) Tick(ctx context.Context, id string) {
	if seen, err := c.Inbox.Seen(ctx, []string{id}); err == nil && !seen[id] {
		c.left.Add(-1)
	}
}

// Process handles one message the mode's way, dying at the mode's point
// when this process's count runs out. An adapter's handler calls it; the
// adapter acks after it returns.
func (c *Child) Process(ctx context.Context, m inbox.Message) (inbox.Outcome, error) {
	c.Tick(ctx, m.ID)
	c.Die("before")
	var out inbox.Outcome
	var err error
	if c.Mode.Tx {
		out, err = c.Inbox.Handle(ctx, m, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES ($1)`, m.ID); err != nil {
				return err
			}
			c.Die("inside")
			return nil
		})
	} else {
		out, err = c.Inbox.HandleOnce(ctx, m, func(ctx context.Context) error {
			c.Die("inside") // the id is committed, the effect not yet done
			// Not cancelled with ctx (the child's end cancels it): an
			// error must mean the effect did not happen, since HandleOnce
			// then releases the id for a redelivery.
			_, err := c.DB.ExecContext(context.WithoutCancel(ctx), `INSERT INTO effects (id) VALUES ($1)`, m.ID)
			return err
		})
	}
	if err == nil {
		c.Die("after")
	}
	return out, err
}

// Done reports whether every event's id is recorded: the child exits.
func (c *Child) Done(ctx context.Context) bool {
	var n int
	err := c.DB.QueryRowContext(ctx, `SELECT count(*) FROM herald_inbox WHERE consumer = $1`, Consumer).Scan(&n)
	return err == nil && n >= c.n
}

// WaitDone returns when Done, polling every 100ms, or when ctx ends.
func (c *Child) WaitDone(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !c.Done(ctx) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// effectCounts is the number of effects of each id.
func effectCounts(ctx context.Context, t *testing.T, db *sql.DB) map[string]int {
	counts := map[string]int{}
	rows, err := db.QueryContext(ctx, `SELECT id, count(*) FROM effects GROUP BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var c int
		if err := rows.Scan(&id, &c); err != nil {
			t.Fatal(err)
		}
		counts[id] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return counts
}
