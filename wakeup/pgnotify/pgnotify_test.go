package pgnotify_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"github.com/heraldgo/herald/internal/wakeuptest"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
	"github.com/heraldgo/herald/wakeup/pgnotify"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type Loan struct {
	ID   uint
	Book string
}

func (Loan) ChangeCapture() envelope.Options { return envelope.Options{Namespace: "lib"} }

// recorder listens on a wakeup and records every call.
type recorder struct {
	mu     sync.Mutex
	topics map[string]int
	nils   int
}

func (r *recorder) fn(topics []string) {
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

func (r *recorder) count(topic string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topics[topic]
}

func (r *recorder) nilCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nils
}

// counting wraps a Wakeup and counts the calls writers make.
type counting struct {
	*pgnotify.Wakeup
	tx, after atomic.Int32
}

func (c *counting) SignalTx(ctx context.Context, q envelope.Querier, topics []string) error {
	c.tx.Add(1)
	return c.Wakeup.SignalTx(ctx, q, topics)
}

func (c *counting) Signal(ctx context.Context, topics []string) error {
	c.after.Add(1)
	return c.Wakeup.Signal(ctx, topics)
}

type fixture struct {
	sqlDB *sql.DB
	dsn   string
	db    *gorm.DB
	w     *pgnotify.Wakeup
	wrap  *counting
}

func setup(t *testing.T, cfg pgnotify.Config) *fixture {
	t.Helper()
	sqlDB, dsn := testkit.Postgres(t)
	if cfg.Channel == "" {
		cfg.Channel = testkit.Name("herald_t_")
	}
	cfg.ConnString = dsn
	w, err := pgnotify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	ctx := context.Background()
	if err := envelope.Migrate(ctx, sqlDB, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	wrap := &counting{Wakeup: w}
	if err := db.Use(gormcapture.New(gormcapture.Config{Models: []any{&Loan{}}, Wakeup: wrap})); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Loan{}); err != nil {
		t.Fatal(err)
	}
	return &fixture{sqlDB: sqlDB, dsn: dsn, db: db, w: w, wrap: wrap}
}

// listen runs w.Listen into a recorder until the test ends.
func listen(t *testing.T, w wakeup.Wakeup) *recorder {
	t.Helper()
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Listen(ctx, rec.fn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	})
	return rec
}

func waitUp(t *testing.T, w *pgnotify.Wakeup) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, w.Up, "the listening connection never subscribed")
}

// TestCommitWakesIdleRelay: a relay in another "process" (its own Wakeup
// value, its own connection) that polls once a minute delivers a captured
// write and an enqueued event at once: NOTIFY woke it.
func TestCommitWakesIdleRelay(t *testing.T) {
	t.Parallel()
	f := setup(t, pgnotify.Config{})
	relayWake, err := pgnotify.New(pgnotify.Config{ConnString: f.dsn, Channel: f.w.Channel()})
	if err != nil {
		t.Fatal(err)
	}
	defer relayWake.Close()

	var mu sync.Mutex
	var got []string
	d := delivery.Func(func(_ context.Context, e *envelope.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, e.Topic)
		return nil
	})
	probe := &probeWakeup{Wakeup: relayWake, rec: &recorder{}}
	r, err := relay.New(f.sqlDB, d, relay.Config{Wakeup: probe, MinPollInterval: time.Minute, MaxPollInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(ctx) }()
	waitUp(t, relayWake)
	testkit.Eventually(t, 30*time.Second, func() bool { return probe.rec.nilCount() > 0 }, "no subscription notice")

	if err := f.db.Create(&Loan{Book: "Dune"}).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := gormcapture.Enqueue(f.db, envelope.Message{Topic: "lib.custom", Payload: map[string]int{"n": 1}}); err != nil {
		t.Fatal(err)
	}
	// Both were signalled and delivered long before the one-minute poll.
	testkit.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(got, "lib.loan.inserted") && slices.Contains(got, "lib.custom")
	}, "committed events not delivered by an idle relay: got %v", got)
	// The second NOTIFY may reach the listener after the poll the first
	// one caused has delivered both events: wait for it.
	if !testkit.WaitFor(10*time.Second, func() bool {
		return probe.rec.count("lib.loan.inserted") > 0 && probe.rec.count("lib.custom") > 0
	}) {
		t.Fatalf("the relay's wakeup saw %v", probe.rec.topics)
	}
	if n := f.wrap.after.Load(); n != 0 {
		t.Fatalf("writers called Signal after commit %d times; want SignalTx inside the transaction only", n)
	}
	if n := f.wrap.tx.Load(); n < 2 {
		t.Fatalf("SignalTx called %d times, want one per transaction (2)", n)
	}
}

type probeWakeup struct {
	wakeup.Wakeup
	rec *recorder
}

func (p *probeWakeup) Listen(ctx context.Context, fn func([]string)) error {
	return p.Wakeup.Listen(ctx, func(ts []string) { p.rec.fn(ts); fn(ts) })
}

// TestRollbackSendsNothing: the NOTIFYs of a rolled-back transaction, and
// of a rolled-back savepoint, never reach a listener; a transaction
// signals each topic once however many events it writes.
func TestRollbackSendsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, pgnotify.Config{})
	rec := listen(t, f.w)
	waitUp(t, f.w)

	errRollback := errors.New("roll back")
	err := f.db.Transaction(func(tx *gorm.DB) error {
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
	// A savepoint rolled back loses its NOTIFY; the same topic written
	// again later in the transaction is signalled.
	err = f.db.Transaction(func(tx *gorm.DB) error {
		_ = tx.Transaction(func(tx2 *gorm.DB) error {
			if _, err := gormcapture.Enqueue(tx2, envelope.Message{Topic: "lib.sp", Payload: 1}); err != nil {
				return err
			}
			return errRollback
		})
		if _, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "lib.sp.gone", Payload: 1}); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = f.db.Transaction(func(tx *gorm.DB) error {
		for i := range 5 {
			if err := tx.Create(&Loan{Book: fmt.Sprint(i)}).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Notifications arrive in commit order: once the last transaction's
	// is here, any earlier one would be too.
	testkit.Eventually(t, 20*time.Second, func() bool { return rec.count("lib.loan.inserted") > 0 }, "commit not signalled")
	if n := rec.count("lib.loan.inserted"); n != 1 {
		t.Fatalf("lib.loan.inserted signalled %d times by one transaction of 5 inserts", n)
	}
	if rec.count("lib.rolledback") != 0 || rec.count("lib.sp") != 0 {
		t.Fatalf("a rollback was signalled: %v", rec.topics)
	}
	if rec.count("lib.sp.gone") != 1 {
		t.Fatalf("the write after a rolled-back savepoint was not signalled: %v", rec.topics)
	}
}

// TestListenerSurvivesTerminate: the listening backend killed by
// pg_terminate_backend reconnects, and the next commit still wakes the
// idle relay.
func TestListenerSurvivesTerminate(t *testing.T) {
	t.Parallel()
	f := setup(t, pgnotify.Config{MinBackoff: 10 * time.Millisecond})
	var delivered atomic.Int32
	d := delivery.Func(func(context.Context, *envelope.Event) error { delivered.Add(1); return nil })
	probe := &probeWakeup{Wakeup: f.w, rec: &recorder{}}
	r, err := relay.New(f.sqlDB, d, relay.Config{Wakeup: probe, MinPollInterval: time.Minute, MaxPollInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(ctx) }()
	waitUp(t, f.w)

	listenerPID := func() int {
		var pid int
		err := f.sqlDB.QueryRow(`SELECT pid FROM pg_stat_activity WHERE query = $1`, `LISTEN "`+f.w.Channel()+`"`).Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	var old int
	testkit.Eventually(t, 10*time.Second, func() bool { old = listenerPID(); return old != 0 }, "listening backend not found")
	var ok bool
	if err := f.sqlDB.QueryRow(`SELECT pg_terminate_backend($1)`, old).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v %v", ok, err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		pid := listenerPID()
		return pid != 0 && pid != old && f.w.Up()
	}, "the listener did not reconnect")

	for i := range 3 { // and it keeps working
		want := int32(i + 1)
		if err := f.db.Create(&Loan{Book: "after"}).Error; err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool { return delivered.Load() >= want }, "commit %d after the kill not delivered", i)
	}
	if probe.rec.count("lib.loan.inserted") == 0 {
		t.Fatalf("no signal after reconnecting: %v", probe.rec.topics)
	}
}

// TestDownLogsErrorAndPolls: with the server unreachable, listeners are
// told to poll (fn(nil)) again and again, failures are WARNs, the fifth in
// a row an ERROR, and Listen keeps trying until ctx ends.
func TestDownLogsErrorAndPolls(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	logs := &syncBuffer{}
	w, err := pgnotify.New(pgnotify.Config{
		ConnString: "postgres://postgres@" + addr + "/test?sslmode=disable&connect_timeout=2",
		Logger:     slog.New(slog.NewTextHandler(logs, nil)),
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, PollWhileDown: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Listen(ctx, rec.fn) }()
	testkit.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(logs.String(), "level=ERROR") && rec.nilCount() >= 5
	}, "no ERROR after failures in a row, or no poll requests: %d polls, logs:\n%s", rec.nilCount(), logs)
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "failures_in_a_row=5") {
		t.Fatalf("logs:\n%s", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Listen while the server is down returned %v; want nil after ctx ended", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTransactionPoolerUnsupported: through PgBouncer in
// pool_mode=transaction LISTEN "succeeds" but nothing arrives; Listen says
// so with ErrUnsupported, and a relay on it keeps delivering by polling.
func TestTransactionPoolerUnsupported(t *testing.T) {
	t.Parallel()
	sqlDB, dsn := testkit.Postgres(t)
	bouncer := startPgBouncer(t)
	schemaDSN := strings.Replace(dsn, "127.0.0.1:5432", bouncer, 1)
	w, err := pgnotify.New(pgnotify.Config{ConnString: schemaDSN, ProbeTimeout: 2 * time.Second, Channel: testkit.Name("herald_t_")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Listen(context.Background(), func([]string) {})
	if !errors.Is(err, envelope.ErrUnsupported) || !strings.Contains(err.Error(), "transaction-pooling") {
		t.Fatalf("Listen through a transaction pooler = %v; want ErrUnsupported naming the cause", err)
	}

	// A relay on it polls meanwhile.
	if err := envelope.Migrate(context.Background(), sqlDB, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	var delivered atomic.Int32
	r, err := relay.New(sqlDB, delivery.Func(func(context.Context, *envelope.Event) error { delivered.Add(1); return nil }),
		relay.Config{Wakeup: w, MinPollInterval: 10 * time.Millisecond, // MaxPollInterval: the default with a wakeup, 1 min
			Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(ctx) }()
	wr, _ := envelope.NewWriter(envelope.Postgres, "")
	if _, err := wr.Write(ctx, sqlDB, []envelope.Message{{Topic: "t", Payload: 1}}); err != nil {
		t.Fatal(err)
	}
	// Not listening, the relay polls at least every relay.DefaultMaxPollInterval.
	testkit.Eventually(t, 30*time.Second, func() bool { return delivered.Load() == 1 }, "relay did not poll")
}

// startPgBouncer runs a private PgBouncer in transaction pooling mode in
// front of the test server and returns its address.
func startPgBouncer(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			t.Fatalf("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does): %v", err)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "herald-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	_ = os.Chmod(dir, 0o777)
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=5432 user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
ignore_startup_parameters = extra_float_digits,search_path,application_name
logfile = %s
`, port, filepath.Join(dir, "pgbouncer.log"))
	cfg := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{cfg}
	if os.Geteuid() == 0 {
		args = []string{"-u", "postgres", cfg} // it refuses to run as root
	}
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	testkit.Eventually(t, 10*time.Second, func() bool {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited: %s\n%s", out.String(), log)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, "pgbouncer did not start")
	return addr
}

// TestConfigErrors: bad options fail at New, naming the option.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		dsn  string
		cfg  pgnotify.Config
		want string
	}{
		{"postgres://127.0.0.1/x", pgnotify.Config{Channel: strings.Repeat("c", 64)}, "pgnotify.Config.Channel"},
		{"postgres://127.0.0.1/x", pgnotify.Config{Channel: "a\x00b"}, "pgnotify.Config.Channel"},
		{"postgres://127.0.0.1/x", pgnotify.Config{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, "pgnotify.Config.MaxBackoff"},
		{"host=127.0.0.1 port=notaport", pgnotify.Config{}, "pgnotify.Config.ConnString"},
		{"", pgnotify.Config{}, "pgnotify.Config.ConnString"},
	} {
		c.cfg.ConnString = c.dsn
		_, err := pgnotify.New(c.cfg)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q, %+v) = %v; want ErrConfiguration naming %s", c.dsn, c.cfg, err, c.want)
		}
	}
}

// TestCloseEndsListen: Close returns the Listen calls running; Signal and
// Listen afterwards return wakeup.ErrClosed.
func TestCloseEndsListen(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.Postgres(t)
	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: testkit.Name("herald_t_")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Listen(context.Background(), func([]string) {}) }()
	waitUp(t, w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Listen after Close = %v, want nil", err)
	}
	if err := w.Signal(context.Background(), []string{"t"}); !errors.Is(err, wakeup.ErrClosed) {
		t.Fatalf("Signal after Close = %v", err)
	}
	if err := w.Listen(context.Background(), func([]string) {}); !errors.Is(err, wakeup.ErrClosed) {
		t.Fatalf("Listen after Close = %v", err)
	}
}

// TestSignalOutsideTransaction: Signal (RetryDeadLettered, a write the
// capture could not see inside a transaction) NOTIFYs from the Wakeup's
// own connection.
func TestSignalOutsideTransaction(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.Postgres(t)
	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: testkit.Name("herald_t_")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := listen(t, w)
	waitUp(t, w)
	testkit.Eventually(t, 20*time.Second, func() bool {
		_ = w.Signal(context.Background(), []string{"a.b", strings.Repeat("x", pgnotify.MaxPayload+1)})
		return rec.count("a.b") > 0 && rec.nilCount() > 1
	}, "Signal not heard (a topic too long for NOTIFY must wake every relay: a nil call)")
}

// TestOneConnectionPerProcess: every Listen call of one Wakeup (every
// relay of the process) shares one listening connection, and each hears
// each signal.
func TestOneConnectionPerProcess(t *testing.T) {
	t.Parallel()
	sqlDB, dsn := testkit.Postgres(t)
	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: testkit.Name("herald_t_")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	recs := []*recorder{listen(t, w), listen(t, w), listen(t, w)}
	waitUp(t, w)
	testkit.Eventually(t, 20*time.Second, func() bool {
		_ = w.Signal(context.Background(), []string{"t"})
		for _, r := range recs {
			if r.count("t") == 0 {
				return false
			}
		}
		return true
	}, "not every listener heard the signal")
	var n int
	if err := sqlDB.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE query = $1`, `LISTEN "`+w.Channel()+`"`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d listening connections for three Listen calls, want 1", n)
	}
}

// TestAfterCommit: writers given w.AfterCommit() signal after commit, and
// still wake an idle relay listening on w; a rollback signals nothing.
func TestAfterCommit(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.Postgres(t)
	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: testkit.Name("herald_t_")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writer := w.AfterCommit()
	if _, ok := writer.(wakeup.TxSignaler); ok {
		t.Fatal("AfterCommit() is a TxSignaler")
	}
	env := wakeuptest.NewEnv(t, writer)
	n, probe := env.Relay(t, w)
	wakeuptest.WakesIdleRelay(t, env, n, probe, w.Up)
	rec := &wakeuptest.Recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Listen(ctx, rec.Fn) }()
	testkit.Eventually(t, 10*time.Second, func() bool { return rec.Nils() > 0 }, "second listener not subscribed")
	wakeuptest.RollbackSendsNothing(t, env, rec)
}

// pgnotify on a MySQL database is a configuration error at relay.New:
// MySQL has no NOTIFY.
func TestMySQLRelayRefusesPgnotify(t *testing.T) {
	t.Parallel()
	w, err := pgnotify.New(pgnotify.Config{ConnString: testkit.PostgresDSN()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	db, _ := testkit.MySQL(t)
	for _, wk := range []wakeup.Wakeup{w, w.AfterCommit()} {
		_, err = relay.New(db, delivery.Func(func(context.Context, *envelope.Event) error { return nil }),
			relay.Config{Dialect: envelope.MySQL, Wakeup: wk})
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "NOTIFY") {
			t.Fatalf("relay on MySQL with pgnotify: %v, want ErrConfiguration", err)
		}
	}
	if err := w.CheckDialect(envelope.Postgres); err != nil {
		t.Fatal(err)
	}
}
