package river_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/heraldgo/herald/delivery"
	heraldriver "github.com/heraldgo/herald/delivery/river"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverytest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	testkit.Main(m)
}

// eventJob is the job of the tests: the event's id (River's unique key
// for NewAtLeastOnce), body and headers.
type eventJob struct {
	EventID string            `json:"event_id" river:"unique"`
	Body    []byte            `json:"body"`
	Headers map[string]string `json:"headers"`
}

func (eventJob) Kind() string { return "herald_event" }

func jobOf(e *envelope.Event) (river.JobArgs, *river.InsertOpts, error) {
	return eventJob{EventID: e.ID.String(), Body: delivery.Body(e), Headers: delivery.Headers(e)}, nil, nil
}

// schemaOf is the search_path of a testkit DSN.
func schemaOf(t testing.TB, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

// migrate creates River's tables in db's schema.
func migrate(t testing.TB, db *sql.DB) {
	t.Helper()
	m, err := rivermigrate.New(riverdatabasesql.New(db), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("River migrations: %v", err)
	}
}

// insertClient is an insert-only River client on db whose tables are in
// schema.
func insertClient(t testing.TB, db *sql.DB, schema string) *river.Client[*sql.Tx] {
	t.Helper()
	c, err := river.NewClient(riverdatabasesql.New(db), &river.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// jobs reads the jobs of schema's river_job in id order as messages, the
// queue as destination.
func jobs(t testing.TB, db *sql.DB, schema string) []deliverytest.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT queue, args::text FROM `+schema+`.river_job ORDER BY id`)
	if err != nil {
		t.Fatalf("read jobs: %v", err)
	}
	defer rows.Close()
	var out []deliverytest.Message
	for rows.Next() {
		var queue, args string
		if err := rows.Scan(&queue, &args); err != nil {
			t.Fatal(err)
		}
		var j eventJob
		if err := jsonUnmarshal(args, &j); err != nil {
			t.Fatal(err)
		}
		out = append(out, deliverytest.Message{Body: j.Body, Headers: j.Headers, Destination: queue})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// receiver is River in a schema of its own, in the outbox's database; Down
// renames river_job away, Stall holds an ACCESS EXCLUSIVE lock on it.
func receiver(t testing.TB, _ []string) *deliverytest.Receiver {
	db, dsn := testkit.Postgres(t)
	schema := schemaOf(t, dsn)
	migrate(t, db)
	client := insertClient(t, db, schema)
	var (
		mu   sync.Mutex
		lock *sql.Tx
	)
	exec := func(t testing.TB, q string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := heraldriver.New(heraldriver.Config{Client: client, Args: jobOf})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: func(t testing.TB) []deliverytest.Message { return jobs(t, db, schema) },
		Down:     func(t testing.TB) { exec(t, `ALTER TABLE `+schema+`.river_job RENAME TO river_job_away`) },
		Up:       func(t testing.TB) { exec(t, `ALTER TABLE `+schema+`.river_job_away RENAME TO river_job`) },
		Outage:   "river_job renamed away, then back",
		Stall: func(t testing.TB, on bool) {
			mu.Lock()
			defer mu.Unlock()
			if !on {
				if lock != nil {
					_ = lock.Rollback()
					lock = nil
				}
				return
			}
			tx, err := db.BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(`LOCK TABLE ` + schema + `.river_job IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			lock = tx
		},
	}
}

func TestConformance(t *testing.T) {
	deliverytest.Run(t, deliverytest.Suite{
		NewReceiver: func(t testing.TB) *deliverytest.Receiver { return receiver(t, nil) },
		AtDefaults:  receiver,
	})
}

const childEnv = "HERALD_RIVER_CHILD_DSN"

// blockingTx inserts through River in the relay's transaction, says so on
// stdout, and never returns: the transaction stays open until the process
// is killed.
type blockingTx struct{ *heraldriver.Delivery }

func (b blockingTx) DeliverTx(ctx context.Context, tx *sql.Tx, es []*envelope.Event) []error {
	if errs := b.Delivery.DeliverTx(ctx, tx, es); errs != nil {
		fmt.Println("FAILED", errs)
		return errs
	}
	fmt.Printf("INSERTED %d\n", len(es))
	select {}
}

// child is the relay TestRelayKilled SIGKILLs: it leases the outbox's
// events, inserts their jobs in its mark transaction and hangs there.
func child() int {
	dsn := os.Getenv(childEnv)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	c, err := river.NewClient(riverdatabasesql.New(db), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	d, err := heraldriver.New(heraldriver.Config{Client: c, Args: jobOf})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	r, err := relay.New(db, blockingTx{d}, relay.Config{Name: "child", Lease: 2 * time.Second, DeliveryTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	if err := r.Run(context.Background()); err != nil {
		fmt.Println("ERROR", err)
	}
	return 1
}

func count(t testing.TB, db *sql.DB, q string) int {
	t.Helper()
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// countingWorker works eventJobs and counts each event's runs.
type countingWorker struct {
	river.WorkerDefaults[eventJob]
	mu   sync.Mutex
	runs map[string]int
}

func (w *countingWorker) Work(_ context.Context, j *river.Job[eventJob]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.runs[j.Args.EventID]++
	return nil
}

func (w *countingWorker) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.runs))
	for k, v := range w.runs {
		out[k] = v
	}
	return out
}

// TestRelayKilled: a relay SIGKILLed with its insert transaction open
// leaves no job and no mark; a relay started afterwards leaves exactly
// one job per event, and River's own client works each exactly once.
func TestRelayKilled(t *testing.T) {
	const events = 50
	db, dsn := testkit.Postgres(t)
	if err := envelope.Migrate(context.Background(), db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	migrate(t, db)
	env := &deliverytest.Env{DB: db}
	w, err := envelope.NewWriter(envelope.Postgres, "")
	if err != nil {
		t.Fatal(err)
	}
	env.W = w
	ms := make([]envelope.Message, events)
	for i := range ms {
		ms[i] = envelope.Message{Topic: "shop.order.inserted", OrderingKey: fmt.Sprintf("order:%d", i%10), Payload: map[string]int{"n": i}}
	}
	es := env.Write(t, ms...)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dsn)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		if !strings.HasPrefix(l, "INSERTED") {
			t.Fatalf("child relay: %s", l)
		}
		t.Logf("child relay: %s, its transaction open", l)
	case <-time.After(time.Minute):
		t.Fatal("the child relay inserted nothing within a minute")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	// PostgreSQL rolls the killed relay's transaction back when its
	// connection drops: wait until no backend of it is left in a
	// transaction, then count.
	testkit.Eventually(t, 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND query LIKE '%river_job%'`) == 0
	}, "the killed relay's transaction still open")
	if n := count(t, db, `SELECT count(*) FROM river_job`); n != 0 {
		t.Fatalf("%d jobs after the relay was killed with its transaction open; want 0", n)
	}
	if n := count(t, db, `SELECT count(*) FROM herald_outbox WHERE published_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d events marked published after the kill; want 0", n)
	}

	// A relay started afterwards (once the dead one's lease ran out).
	d, err := heraldriver.New(heraldriver.Config{Client: insertClient(t, db, ""), Args: jobOf})
	if err != nil {
		t.Fatal(err)
	}
	cfg := deliverytest.RelayConfig()
	cfg.Lease, cfg.DeliveryTimeout = 2*time.Second, time.Second
	env.StartRelay(t, d, cfg)
	env.WaitPublished(t, time.Minute)
	if n := count(t, db, `SELECT count(*) FROM river_job`); n != events {
		t.Fatalf("%d jobs for %d events", n, events)
	}
	if n := count(t, db, `SELECT count(DISTINCT args->>'event_id') FROM river_job`); n != events {
		t.Fatalf("%d distinct events among the jobs; want %d", n, events)
	}

	// River's own client works them, each once.
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	worker := &countingWorker{runs: map[string]int{}}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:           workers,
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rc.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	testkit.Eventually(t, time.Minute, func() bool {
		return count(t, db, `SELECT count(*) FROM river_job WHERE state = 'completed'`) == events
	}, "River's client completed every job")
	runs := worker.snapshot()
	for _, e := range es {
		if runs[e.ID.String()] != 1 {
			t.Errorf("event %s worked %d times", e.ID, runs[e.ID.String()])
		}
	}
}

// Events whose Args fail are dead-lettered at once; the rest of the batch
// is inserted, and only their jobs exist.
func TestArgsErrorIsPermanent(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	if err := envelope.Migrate(context.Background(), db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	migrate(t, db)
	w, err := envelope.NewWriter(envelope.Postgres, "")
	if err != nil {
		t.Fatal(err)
	}
	env := &deliverytest.Env{DB: db, W: w}
	d, err := heraldriver.New(heraldriver.Config{Client: insertClient(t, db, ""), Args: func(e *envelope.Event) (river.JobArgs, *river.InsertOpts, error) {
		if e.Topic == "bad" {
			return nil, nil, errors.New("no job for this topic")
		}
		return jobOf(e)
	}})
	if err != nil {
		t.Fatal(err)
	}
	env.Write(t, envelope.Message{Topic: "good", OrderingKey: "k1", Payload: 1}, envelope.Message{Topic: "bad", OrderingKey: "k2", Payload: 2},
		envelope.Message{Topic: "good", OrderingKey: "k3", Payload: 3})
	env.StartRelay(t, d, deliverytest.RelayConfig())
	testkit.Eventually(t, 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM herald_outbox WHERE published_at IS NOT NULL`) == 2 &&
			count(t, db, `SELECT count(*) FROM herald_outbox WHERE dead_lettered_at IS NOT NULL`) == 1
	}, "two events published, one dead-lettered")
	if n := count(t, db, `SELECT count(*) FROM river_job`); n != 2 {
		t.Fatalf("%d jobs; want 2", n)
	}
}

// NewAtLeastOnce inserts with UniqueOpts.ByArgs: an event delivered again
// finds its job.
func TestAtLeastOnceUnique(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	migrate(t, db)
	d, err := heraldriver.NewAtLeastOnce(heraldriver.AtLeastOnceConfig{Client: insertClient(t, db, ""), Args: jobOf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e1 := &envelope.Event{ID: mustV7(t), Topic: "a", Payload: []byte(`1`)}
	e2 := &envelope.Event{ID: mustV7(t), Topic: "a", Payload: []byte(`2`)}
	for range 3 {
		if errs := d.DeliverBatch(ctx, []*envelope.Event{e1, e2}); errs != nil {
			t.Fatal(errs)
		}
	}
	if err := d.Deliver(ctx, e1); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM river_job`); n != 2 {
		t.Fatalf("%d jobs for two events delivered four and three times; want 2", n)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for want, fn := range map[string]func() error{
		"river.Config.Client": func() error { _, err := heraldriver.New(heraldriver.Config{Args: jobOf}); return err },
		"river.Config.Args": func() error {
			_, err := heraldriver.New(heraldriver.Config{Client: &river.Client[*sql.Tx]{}})
			return err
		},
		"river.AtLeastOnceConfig.Client": func() error {
			_, err := heraldriver.NewAtLeastOnce(heraldriver.AtLeastOnceConfig{Args: jobOf})
			return err
		},
		"river.AtLeastOnceConfig.Args": func() error {
			_, err := heraldriver.NewAtLeastOnce(heraldriver.AtLeastOnceConfig{Client: &river.Client[*sql.Tx]{}})
			return err
		},
	} {
		if err := fn(); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want ErrConfiguration naming %s", err, want)
		}
	}
}
