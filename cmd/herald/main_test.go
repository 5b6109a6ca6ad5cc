package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/kafkatest"
	"github.com/heraldgo/herald/internal/migrate"
	"github.com/heraldgo/herald/internal/promparse"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// herald builds the binary once per test run, with `go build`.
func herald(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "herald")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// runHerald runs the binary to its end and returns its output and exit code.
func runHerald(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, herald(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("herald %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// cleanEnv is the test's environment without HERALD_* variables (the
// test servers' HERALD_POSTGRES_DSN and the like would be read as flags).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") {
			env = append(env, kv)
		}
	}
	return env
}

func mustRun(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, errOut, code := runHerald(t, env, args...)
	if code != 0 {
		t.Fatalf("herald %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func enqueue(t *testing.T, db *sql.DB, d envelope.Dialect, topics ...string) {
	t.Helper()
	w, err := envelope.NewWriter(d, "")
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]envelope.Message, len(topics))
	for i, tp := range topics {
		ms[i] = envelope.Message{Topic: tp, Payload: map[string]any{"n": i, "topic": tp}}
	}
	if _, err := w.Write(context.Background(), db, ms); err != nil {
		t.Fatal(err)
	}
}

func backlogJSON(t *testing.T, env []string, args ...string) map[string]backlogRow {
	t.Helper()
	out := mustRun(t, env, append([]string{"backlog", "--json"}, args...)...)
	var rows []backlogRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("backlog --json: %v\n%s", err, out)
	}
	m := map[string]backlogRow{}
	for _, r := range rows {
		m[r.Topic] = r
	}
	return m
}

func testMigrateAndBacklog(t *testing.T, dsn string) {
	// The DSN from the environment, the table from a flag.
	env := []string{"HERALD_DSN=" + dsn}
	d := dialectOf(dsn)
	latest := envelope.LatestVersionFor(d)
	if got := mustRun(t, env, "migrate", "up"); got != fmt.Sprintf("herald_outbox at version %d\n", latest) {
		t.Fatalf("migrate up: %q", got)
	}
	if got, want := mustRun(t, env, "migrate", "status"), fmt.Sprintf("version %d (latest %d)\n", latest, latest); got != want {
		t.Fatalf("migrate status: %q, want %q", got, want)
	}
	db, err := migrate.Open(d, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	enqueue(t, db, d, "billing.invoice.created", "billing.invoice.created", "shop.order.placed")
	bl := backlogJSON(t, env)
	if len(bl) != 2 || bl["billing.invoice.created"].Pending != 2 || bl["shop.order.placed"].Pending != 1 || bl["shop.order.placed"].DeadLettered != 0 {
		t.Fatalf("backlog --json: %+v, want billing.invoice.created 2 and shop.order.placed 1 pending", bl)
	}
	if bl := backlogJSON(t, env, "--topics", "shop.*"); len(bl) != 1 || bl["shop.order.placed"].Pending != 1 {
		t.Fatalf("backlog --json --topics shop.*: %+v", bl)
	}
	table := mustRun(t, env, "backlog")
	if !regexp.MustCompile(`(?m)^billing\.invoice\.created\s+2\s+\S+\s+0\s+-$`).MatchString(table) {
		t.Fatalf("backlog table:\n%s", table)
	}
	// migrate down goes one version below the current one; up again.
	if latest == 1 { // MySQL's own history has one version: down refuses to drop the table
		if _, errOut, code := runHerald(t, env, "migrate", "down"); code != 2 || !strings.Contains(errOut, "nothing below it") {
			t.Fatalf("migrate down at version 1: exit %d, %q", code, errOut)
		}
	} else if got := mustRun(t, env, "migrate", "down"); got != fmt.Sprintf("herald_outbox at version %d\n", latest-1) {
		t.Fatalf("migrate down: %q", got)
	}
	mustRun(t, env, "migrate", "up")
	// --inbox: the inbox table's own versions.
	if got := mustRun(t, env, "migrate", "up", "--inbox"); got != fmt.Sprintf("herald_inbox at version %d\n", inbox.LatestVersion) {
		t.Fatalf("migrate up --inbox: %q", got)
	}
	if got := mustRun(t, env, "migrate", "down", "--inbox"); got != "herald_inbox at version 1\n" {
		t.Fatalf("migrate down --inbox: %q", got)
	}
	if got, want := mustRun(t, env, "migrate", "status", "--inbox"), fmt.Sprintf("version 1 (latest %d)\n", inbox.LatestVersion); got != want {
		t.Fatalf("migrate status --inbox: %q, want %q", got, want)
	}
	if got := mustRun(t, env, "migrate", "print", "--inbox", "--version", "2"); !strings.Contains(got, "herald_inbox_keys") {
		t.Fatalf("migrate print --inbox --version 2:\n%s", got)
	}
}

func TestMigrateAndBacklogSQLite(t *testing.T) {
	testMigrateAndBacklog(t, testkit.ModerncDSN(testkit.SQLitePath(t)))
}

func TestMigrateAndBacklogPostgres(t *testing.T) {
	_, dsn := testkit.Postgres(t)
	testMigrateAndBacklog(t, dsn)
}

// TestMigrateAndBacklogMySQL: the same on the machine's MariaDB, with a
// mysql:// DSN (go-sql-driver/mysql's DSN after the scheme).
func TestMigrateAndBacklogMySQL(t *testing.T) {
	_, dsn := testkit.MySQL(t)
	testMigrateAndBacklog(t, "mysql://"+dsn)
}

func TestMigratePrintMatchesHeraldMigrate(t *testing.T) {
	var want bytes.Buffer
	if err := migrate.Print(&want, envelope.Postgres, "", 0, false); err != nil {
		t.Fatal(err)
	}
	if got := mustRun(t, nil, "migrate", "print", "--dialect", "postgres"); got != want.String() {
		t.Fatalf("migrate print:\n%s\nwant\n%s", got, want.String())
	}
}

func TestUsageErrors(t *testing.T) {
	// A DSN nothing listens on: each error must come before connecting.
	const dsn = "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, nil, "no command given"},
		{nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{nil, []string{"migrate"}, "give a subcommand"},
		{nil, []string{"migrate", "sideways"}, `unknown subcommand "sideways"`},
		{nil, []string{"migrate", "up"}, "--dsn (or HERALD_DSN) is required"},
		{nil, []string{"relay", "--dsn", dsn}, "no delivery"},
		{nil, []string{"relay", "--dsn", dsn, "--batch-size", "x", "--webhook-url", "http://x"}, "-batch-size"},
		{[]string{"HERALD_BATCH_SIZE=x"}, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x"}, "HERALD_BATCH_SIZE"},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--wakeup", "bogus"}, `--wakeup "bogus"`},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--redis-url", "redis://127.0.0.1:1"}, "--route"},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--route", "a.*=kafka"}, `no delivery "kafka"`},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--route", "a.*"}, "pattern=name"},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "ftp://x"}, "--webhook-url"},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--lease", "1s", "--delivery-timeout", "2s"}, "DeliveryTimeout"},
		{nil, []string{"relay", "--dsn", "app.db", "--webhook-url", "http://x", "--wakeup", "pgnotify"}, "needs a PostgreSQL --dsn"},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--admin-addr", "nope"}, "--admin-addr"},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--admin-password", "x"}, "--admin-password needs --admin-addr"},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--wakeup", "redis"}, "--wakeup redis needs --wakeup-url or --redis-url"},
		{nil, []string{"relay", "--dsn", dsn, "--webhook-url", "http://x", "--wakeup-url", "redis://x"}, "--wakeup-url needs --wakeup"},
	} {
		_, errOut, code := runHerald(t, c.env, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("herald %v (env %v): exit %d, stderr %q; want exit 2 and %q", c.args, c.env, code, errOut, c.want)
		}
	}
	// help is not an error.
	if out := mustRun(t, nil, "help"); !strings.Contains(out, "relay") || !strings.Contains(out, "migrate") {
		t.Fatalf("help: %s", out)
	}
}

// relayProc is a running `herald relay`.
type relayProc struct {
	cmd    *exec.Cmd
	admin  string // http://host:port
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan error
}

func (p *relayProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

var adminRE = regexp.MustCompile(`herald relay: admin listening" addr=(\S+)`)

func startRelay(t *testing.T, env []string, args ...string) *relayProc {
	t.Helper()
	p := &relayProc{done: make(chan error, 1)}
	p.cmd = exec.Command(herald(t), append([]string{"relay", "--admin-addr", "127.0.0.1:0"}, args...)...)
	p.cmd.Env = append(cleanEnv(), env...)
	pr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := adminRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	select {
	case a := <-addr:
		p.admin = "http://" + a
	case err := <-p.done:
		t.Fatalf("herald relay exited early: %v\n%s", err, p.log())
	case <-time.After(time.Minute):
		t.Fatalf("herald relay: no admin address within a minute\n%s", p.log())
	}
	return p
}

func (p *relayProc) get(path string) (int, string) {
	resp, err := http.Get(p.admin + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends SIGTERM and checks the relay exits 0 within a bound.
func (p *relayProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("herald relay after SIGTERM: %v\n%s", err, p.log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("herald relay still running 30s after SIGTERM\n%s", p.log())
	}
	if !strings.Contains(p.log(), "herald relay: stopped") {
		t.Fatalf("no graceful stop in the log:\n%s", p.log())
	}
}

// receiver is a webhook endpoint that records the bodies it got.
type receiver struct {
	mu     sync.Mutex
	bodies []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, string(b))
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...)
}

// TestRelayDeliversToEachTransport runs `herald relay` as a process on
// PostgreSQL with a pgnotify wakeup, four deliveries and routes (webhook,
// Redis Streams, Kafka on an in-process kfake, RabbitMQ), configured
// through both flags and HERALD_* variables, and stops it with SIGTERM.
func TestRelayDeliversToEachTransport(t *testing.T) {
	db, dsn := testkit.Postgres(t)
	redisURL := testkit.RedisURL(t)
	kafkaTopic := testkit.Name("herald_cli_")
	brokers := kafkatest.Brokers(t, kfake.SeedTopics(1, kafkaTopic))
	stream := testkit.Name("herald-cli-")
	rec := &receiver{}
	hook := httptest.NewServer(rec)
	defer hook.Close()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	defer rdb.Del(context.Background(), stream)

	// RabbitMQ: the default exchange routes by queue name, and the routing
	// key is the event's aggregate (its topic less the operation).
	amqpURL := testkit.AMQPURL(t)
	ops := testkit.Name("herald_cli_")
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(ops+".job", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	amqpMsgs, err := ch.Consume(ops+".job", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	mustRun(t, []string{"HERALD_DSN=" + dsn}, "migrate", "up")
	// Written before the relay starts: delivered at its first poll.
	enqueue(t, db, envelope.Postgres, "billing.invoice.created", "shop.order.placed")

	p := startRelay(t, []string{
		"HERALD_DSN=" + dsn,
		"HERALD_REDIS_URL=" + redisURL,
		"HERALD_REDIS_STREAM=" + stream,
		// A list variable: comma-separated, the same as repeated flags.
		"HERALD_ROUTE=shop.*=redis,billing.*=webhook,audit.*=kafka," + ops + ".*=amqp",
		"HERALD_AMQP_URL=" + amqpURL,
		"HERALD_BATCH_SIZE=abc", // the flag below wins
	},
		"--batch-size", "50", "--concurrency", "4",
		"--webhook-url", hook.URL, "--webhook-allow-networks", "127.0.0.0/8",
		"--kafka-brokers", strings.Join(brokers, ","), "--kafka-topic", kafkaTopic,
		"--wakeup", "pgnotify", "--max-poll-interval", "1m",
	)
	if code, body := p.get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	// Ready: the database answers and the pgnotify listener is subscribed.
	testkit.Eventually(t, 30*time.Second, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK },
		"/readyz never 200:\n%s", p.log())

	// Written while the relay waits up to a minute between polls: the
	// wakeup brings them.
	enqueue(t, db, envelope.Postgres, "billing.invoice.paid", "shop.order.shipped", "audit.login", "audit.logout", ops+".job.inserted")

	testkit.Eventually(t, 30*time.Second, func() bool { return len(rec.got()) == 2 }, "webhook got %d of 2 events\n%s", len(rec.got()), p.log())
	for _, b := range rec.got() {
		if !strings.Contains(b, "billing.invoice.") {
			t.Fatalf("webhook got an event not routed to it: %s", b)
		}
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		n, err := rdb.XLen(context.Background(), stream).Result()
		return err == nil && n == 2
	}, "Redis stream %s never held 2 entries\n%s", stream, p.log())
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(kafkaTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var kafkaGot []string
	deadline := time.Now().Add(30 * time.Second)
	for len(kafkaGot) < 2 && time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { kafkaGot = append(kafkaGot, string(r.Value)) })
		cancel()
	}
	if len(kafkaGot) != 2 || !strings.Contains(strings.Join(kafkaGot, " "), "audit.login") {
		t.Fatalf("Kafka got %q, want the two audit.* events\n%s", kafkaGot, p.log())
	}

	select {
	case m := <-amqpMsgs:
		if !strings.Contains(string(m.Body), ops+".job.inserted") {
			t.Fatalf("RabbitMQ got %s, want the %s.job.inserted event", m.Body, ops)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("RabbitMQ queue %s.job got nothing within 30s\n%s", ops, p.log())
	}

	// The relay counts a delivery once its mark has committed, a moment
	// after the receiver has it: scrape until the counts are there.
	var metrics string
	sent := map[string]float64{}
	testkit.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, metrics = p.get("/metrics")
		fams, err := promparse.Parse(metrics)
		if code != http.StatusOK || err != nil {
			t.Fatalf("/metrics: %d, %v\n%s", code, err, metrics)
		}
		clear(sent)
		if f := fams["messaging_client_sent_messages_total"]; f != nil {
			for _, s := range f.Samples {
				sent[s.Labels["messaging_destination_name"]] += s.Value
			}
		}
		return sent["billing.invoice.paid"] == 1 && sent["audit.login"] == 1
	}, "/metrics: messaging_client_sent_messages_total by topic %v (a map: as it was last)", sent)
	testkit.Eventually(t, 30*time.Second, func() bool { return len(backlogJSON(t, []string{"HERALD_DSN=" + dsn})) == 0 }, "backlog not empty after delivery")
	p.stop(t)
}

// TestRelaySQLiteWebhook runs the relay on SQLite, without a wakeup: /readyz
// needs only the database.
func TestRelaySQLiteWebhook(t *testing.T) {
	dsn := testkit.ModerncDSN(testkit.SQLitePath(t))
	rec := &receiver{}
	hook := httptest.NewServer(rec)
	defer hook.Close()
	mustRun(t, nil, "migrate", "up", "--dsn", dsn)
	db, err := migrate.Open(envelope.SQLite, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := startRelay(t, []string{"HERALD_WEBHOOK_URL=" + hook.URL, "HERALD_WEBHOOK_ALLOW_NETWORKS=127.0.0.0/8",
		"HERALD_ROUTE=shop.*=kafka"}, // would be exit 2 (no kafka delivery): the --route flags win
		"--dsn", dsn, "--min-poll-interval", "20ms", "--max-poll-interval", "200ms",
		"--route", "shop.order.placed=webhook", "--route", "*=webhook",
		"--admin-password", "s3cret")
	testkit.Eventually(t, 30*time.Second, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK },
		"/readyz never 200:\n%s", p.log())
	enqueue(t, db, envelope.SQLite, "shop.order.placed", "shop.order.paid", "shop.order.shipped")
	testkit.Eventually(t, 30*time.Second, func() bool { return len(rec.got()) == 3 }, "webhook got %d of 3 events\n%s", len(rec.got()), p.log())

	// The admin page and its API, behind HTTP Basic authentication.
	if code, _ := p.get("/admin/api/backlog"); code != http.StatusUnauthorized {
		t.Fatalf("/admin/api/backlog without credentials: %d, want 401", code)
	}
	for _, path := range []string{"/admin/api/backlog", "/admin/"} {
		req, _ := http.NewRequest(http.MethodGet, p.admin+path, nil)
		req.SetBasicAuth("herald", "s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s with credentials: %d %s", path, resp.StatusCode, b)
		}
	}
	p.stop(t)
}

// TestRelayReadyzFollowsTheDatabase: /readyz is 503, naming the database,
// while the database cannot be reached, and 200 again once it can; the
// process stays up (/healthz) and still stops cleanly on SIGTERM.
func TestRelayReadyzFollowsTheDatabase(t *testing.T) {
	_, dsn := testkit.Postgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testkit.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	rec := &receiver{}
	hook := httptest.NewServer(rec)
	defer hook.Close()
	mustRun(t, nil, "migrate", "up", "--dsn", dsn)
	p := startRelay(t, nil, "--dsn", u.String(), "--webhook-url", hook.URL, "--webhook-allow-networks", "127.0.0.0/8")
	testkit.Eventually(t, 30*time.Second, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK },
		"/readyz never 200:\n%s", p.log())

	proxy.SetDown(true)
	var body string
	testkit.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, body = p.get("/readyz")
		return code == http.StatusServiceUnavailable
	}, "/readyz still 200 with the database down:\n%s", p.log())
	if !strings.Contains(body, "database:") {
		t.Fatalf("/readyz with the database down: %q, want the database named", body)
	}
	if code, _ := p.get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with the database down: %d, want 200 (the process is up)", code)
	}
	proxy.SetDown(false)
	testkit.Eventually(t, 30*time.Second, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK },
		"/readyz not 200 again after the database came back:\n%s", p.log())
	p.stop(t)
}

// TestRelayReadyzNeedsTheWakeup: with a wakeup that cannot subscribe (its
// Redis does not answer), /readyz is 503 naming the wakeup while /healthz
// is 200, and the relay still stops cleanly.
func TestRelayReadyzNeedsTheWakeup(t *testing.T) {
	dsn := testkit.ModerncDSN(testkit.SQLitePath(t))
	ru, err := url.Parse(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testkit.NewProxy(t, ru.Host)
	proxy.SetDown(true)
	mustRun(t, nil, "migrate", "up", "--dsn", dsn)
	p := startRelay(t, nil, "--dsn", dsn, "--webhook-url", "http://127.0.0.1:1/", "--webhook-allow-networks", "127.0.0.0/8",
		"--wakeup", "redis", "--wakeup-url", "redis://"+proxy.Addr()+ru.Path)
	code, body := p.get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "wakeup: not listening") {
		t.Fatalf("/readyz with the wakeup's Redis refusing: %d %q, want 503 naming the wakeup", code, body)
	}
	if code, _ := p.get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	proxy.SetDown(false)
	testkit.Eventually(t, 30*time.Second, func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK },
		"/readyz not 200 once the wakeup's Redis answers:\n%s", p.log())
	p.stop(t)
}

// TestRelayUnroutedEventIsDeadLettered: with routes and no '*' route, an
// event no route takes is dead-lettered at its first attempt, and herald
// backlog shows it.
func TestRelayUnroutedEventIsDeadLettered(t *testing.T) {
	dsn := testkit.ModerncDSN(testkit.SQLitePath(t))
	rec := &receiver{}
	hook := httptest.NewServer(rec)
	defer hook.Close()
	env := []string{"HERALD_DSN=" + dsn}
	mustRun(t, env, "migrate", "up")
	db, err := migrate.Open(envelope.SQLite, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	enqueue(t, db, envelope.SQLite, "shop.order.placed", "other.thing.happened")
	p := startRelay(t, env, "--webhook-url", hook.URL, "--webhook-allow-networks", "127.0.0.0/8",
		"--route", "shop.*=webhook", "--min-poll-interval", "20ms", "--max-poll-interval", "200ms")
	testkit.Eventually(t, 30*time.Second, func() bool {
		bl := backlogJSON(t, env)
		return len(bl) == 1 && bl["other.thing.happened"].DeadLettered == 1 && bl["other.thing.happened"].Pending == 0
	}, "other.thing.happened not dead-lettered: %+v\n%s", backlogJSON(t, env), p.log())
	if got := rec.got(); len(got) != 1 || !strings.Contains(got[0], "shop.order.placed") {
		t.Fatalf("webhook got %q, want only shop.order.placed", got)
	}
	p.stop(t)
	if !strings.Contains(p.log(), "other.thing.happened") {
		t.Fatalf("the dead letter is not in the log:\n%s", p.log())
	}
}
