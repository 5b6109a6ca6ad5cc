package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// writeEvents writes ms and returns the events.
func writeEvents(t *testing.T, db *sql.DB, d envelope.Dialect, ms ...envelope.Message) []*envelope.Event {
	t.Helper()
	w, err := envelope.NewWriter(d, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(context.Background(), db, ms)
	if err != nil {
		t.Fatal(err)
	}
	return res.Events
}

// kill makes events dead letters with lastError, as a relay out of
// attempts leaves them.
func kill(t *testing.T, db *sql.DB, d envelope.Dialect, lastError string, evs ...*envelope.Event) {
	t.Helper()
	for _, e := range evs {
		p := func(n int) string { return outbox.Placeholder(d, n) }
		if _, err := db.Exec(`UPDATE herald_outbox SET dead_lettered_at = created_at, attempts = 5, last_error = `+p(1)+` WHERE sequence = `+p(2),
			lastError, e.Sequence); err != nil {
			t.Fatal(err)
		}
	}
}

func killAll(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.Exec(`UPDATE herald_outbox SET dead_lettered_at = created_at, attempts = 5, last_error = 'receiver down'`); err != nil {
		t.Fatal(err)
	}
}

func countDead(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE dead_lettered_at IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func pageJSON(t *testing.T, env []string, args ...string) admin.Page {
	t.Helper()
	out := mustRun(t, env, append(args, "--json")...)
	var p admin.Page
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v --json: %v\n%s", args, err, out)
	}
	return p
}

func topicsOf(p admin.Page) string {
	var ts []string
	for _, e := range p.Events {
		ts = append(ts, e.Topic)
	}
	return strings.Join(ts, ",")
}

func testDeadCommands(t *testing.T, dsn string) {
	env := []string{"HERALD_DSN=" + dsn}
	mustRun(t, env, "migrate", "up")
	d := dialectOf(dsn)
	db, err := migrate.Open(d, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs := writeEvents(t, db, d,
		envelope.Message{Topic: "shop.order.placed", OrderingKey: "o1", Payload: map[string]any{"n": 1}},
		envelope.Message{Topic: "shop.order.placed", OrderingKey: "o1", Payload: map[string]any{"n": 2}},
		envelope.Message{Topic: "billing.invoice.created", Payload: map[string]any{"html": "<script>alert(1)</script>"}},
		envelope.Message{Topic: "shop.order.paid", Payload: map[string]any{"n": 4}},
	)
	kill(t, db, d, "timeout talking to shop", evs[0])
	kill(t, db, d, "503 from billing \x1b[31mred\x1b[0m", evs[2])
	kill(t, db, d, "timeout again", evs[3])

	// Listing: a table (control characters not passed to the terminal),
	// JSON, and each filter.
	table := mustRun(t, env, "dead", "list")
	if strings.Count(table, "\n") != 4 || !strings.Contains(table, "billing.invoice.created") || strings.Contains(table, "\x1b") {
		t.Fatalf("dead list:\n%q", table)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "shop.order.placed,billing.invoice.created,shop.order.paid"},
		{[]string{"--topics", "shop.*"}, "shop.order.placed,shop.order.paid"},
		{[]string{"--error", "timeout"}, "shop.order.placed,shop.order.paid"},
		{[]string{"--key", "o1"}, "shop.order.placed"},
		{[]string{"--since", "1h ago", "--until", "now"}, "shop.order.placed,billing.invoice.created,shop.order.paid"},
		{[]string{"--until", "24h ago"}, ""},
		{[]string{"--limit", "2"}, "shop.order.placed,billing.invoice.created"},
	} {
		if got := topicsOf(pageJSON(t, env, append([]string{"dead", "list"}, c.args...)...)); got != c.want {
			t.Errorf("dead list %v: %q, want %q", c.args, got, c.want)
		}
	}
	if p := pageJSON(t, env, "dead", "list", "--limit", "2"); p.Next == 0 {
		t.Errorf("dead list --limit 2: no next page")
	} else if got := topicsOf(pageJSON(t, env, "dead", "list", "--after", fmt.Sprint(p.Next))); got != "shop.order.paid" {
		t.Errorf("dead list --after %d: %q", p.Next, got)
	}
	if got := topicsOf(pageJSON(t, env, "events", "list", "--state", "pending")); got != "shop.order.placed" {
		t.Errorf("events list --state pending: %q", got)
	}
	if got := topicsOf(pageJSON(t, env, "events", "list")); strings.Count(got, ",") != 3 {
		t.Errorf("events list: %q, want all 4", got)
	}

	// show: the event, its error, what its key holds back.
	show := mustRun(t, env, "dead", "show", evs[0].ID.String())
	for _, want := range []string{"state:            dead", "timeout talking to shop", "holds back 1 later", evs[1].ID.String()} {
		if !strings.Contains(show, want) {
			t.Errorf("dead show: no %q in\n%s", want, show)
		}
	}
	var det admin.Detail
	if err := json.Unmarshal([]byte(mustRun(t, env, "events", "show", "--json", evs[0].ID.String())), &det); err != nil || det.HeldBack != 1 || det.State != admin.StateDead {
		t.Errorf("events show --json: %+v, %v", det, err)
	}
	if _, errOut, code := runHerald(t, env, "events", "show", "not-a-uuid"); code != 2 || !strings.Contains(errOut, "not an event id") {
		t.Errorf("events show not-a-uuid: exit %d, %q", code, errOut)
	}

	// retry and discard refuse without ids, filter or --all, and without
	// --yes when there is no terminal to ask on; nothing changes.
	if _, errOut, code := runHerald(t, env, "dead", "retry"); code != 2 || !strings.Contains(errOut, "--all") {
		t.Errorf("dead retry: exit %d, %q", code, errOut)
	}
	_, errOut, code := runHerald(t, append(env, "HERALD_YES=true"), "dead", "retry", "--topics", "shop.*")
	if code != 2 || !strings.Contains(errOut, "give --yes") || !strings.Contains(errOut, "2 dead letter(s) in herald_outbox match topics=shop.*") {
		t.Errorf("dead retry --topics shop.* without --yes: exit %d, %q", code, errOut)
	}
	if n := countDead(t, db); n != 3 {
		t.Fatalf("dead letters after a refused retry: %d, want 3", n)
	}
	var res map[string]int64
	if err := json.Unmarshal([]byte(mustRun(t, env, "dead", "retry", "--topics", "shop.*", "--yes", "--json")), &res); err != nil || res["matched"] != 2 || res["retried"] != 2 {
		t.Fatalf("dead retry --topics shop.* --yes --json: %v, %v", res, err)
	}
	if got := topicsOf(pageJSON(t, env, "dead", "list")); got != "billing.invoice.created" {
		t.Fatalf("dead letters after retrying shop.*: %q", got)
	}
	if out := mustRun(t, env, "dead", "discard", evs[2].ID.String(), "--yes"); !strings.HasPrefix(out, "discarded 1 dead letter(s)") {
		t.Fatalf("dead discard ID: %q", out)
	}
	if n := countDead(t, db); n != 0 {
		t.Fatalf("dead letters after discarding the last: %d", n)
	}

	// pause and resume.
	if out := mustRun(t, env, "pause", "shop.order.paid", "--reason", "receiver incident"); !strings.HasPrefix(out, "paused shop.order.paid") {
		t.Fatalf("pause: %q", out)
	}
	var reason string
	if err := db.QueryRow(`SELECT reason FROM herald_outbox_paused WHERE topic = 'shop.order.paid'`).Scan(&reason); err != nil || reason != "receiver incident" {
		t.Fatalf("the pause is not recorded: %q, %v", reason, err)
	}
	if out := mustRun(t, env, "resume", "shop.order.paid"); out != "resumed shop.order.paid\n" {
		t.Fatalf("resume: %q", out)
	}
	if out := mustRun(t, env, "resume", "shop.order.paid"); out != "shop.order.paid was not paused\n" {
		t.Fatalf("resume again: %q", out)
	}
	if _, errOut, code := runHerald(t, env, "pause"); code != 2 || !strings.Contains(errOut, "give one topic") {
		t.Fatalf("pause without a topic: exit %d, %q", code, errOut)
	}
}

func TestDeadCommandsSQLite(t *testing.T) {
	testDeadCommands(t, testkit.ModerncDSN(testkit.SQLitePath(t)))
}

func TestDeadCommandsPostgres(t *testing.T) {
	_, dsn := testkit.Postgres(t)
	testDeadCommands(t, dsn)
}

// TestDeadCommandsMySQL: the same commands on the machine's MariaDB, the
// DSN written mysql:// and go-sql-driver/mysql's own form.
func TestDeadCommandsMySQL(t *testing.T) {
	_, dsn := testkit.MySQL(t)
	testDeadCommands(t, "mysql://"+dsn)
}

// lines collects a pipe's lines as the process writes them.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) read(sc *bufio.Scanner) {
	for sc.Scan() {
		l.mu.Lock()
		l.all = append(l.all, sc.Text())
		l.mu.Unlock()
	}
}

func (l *lines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.all {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// start runs the binary with its stdout and stderr read line by line.
func start(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, stdout, stderr *lines, done chan error) {
	t.Helper()
	cmd = exec.Command(herald(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	o, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	e, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, done = &lines{}, &lines{}, make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); stdout.read(bufio.NewScanner(o)) }()
	go func() { defer wg.Done(); stderr.read(bufio.NewScanner(e)) }()
	go func() { wg.Wait(); done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	return cmd, stdout, stderr, done
}

func exitOf(t *testing.T, done chan error) int {
	t.Helper()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(time.Minute):
		t.Fatal("the command did not end within a minute")
		return -1
	}
}

// TestDeadRetryInterruptedContinues interrupts `herald dead retry --all`
// in its second batch — a trigger holds the batch's first row on an
// advisory lock the test holds, then SIGINT — and checks that the first
// batch stays retried, the second is rolled back whole (exit 130), and the
// same command run again retries the rest.
func TestDeadRetryInterruptedContinues(t *testing.T) {
	db, dsn := testkit.Postgres(t)
	env := []string{"HERALD_DSN=" + dsn}
	mustRun(t, env, "migrate", "up")
	ms := make([]envelope.Message, 3000)
	for i := range ms {
		ms[i] = envelope.Message{Topic: fmt.Sprintf("shop.t%d", i%10), Payload: map[string]any{"n": i}}
	}
	evs := writeEvents(t, db, envelope.Postgres, ms...)
	killAll(t, db)
	lockKey := rand.Int64N(1 << 40)
	ctx := context.Background()
	if _, err := db.Exec(fmt.Sprintf(`CREATE FUNCTION hold_second_batch() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    IF OLD.sequence = %d THEN PERFORM pg_advisory_xact_lock(%d); END IF;
    RETURN NEW;
END $f$;
CREATE TRIGGER hold_second_batch BEFORE UPDATE ON herald_outbox FOR EACH ROW EXECUTE FUNCTION hold_second_batch()`,
		evs[1000].Sequence, lockKey)); err != nil {
		t.Fatal(err)
	}
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		t.Fatal(err)
	}

	cmd, _, stderr, done := start(t, env, "dead", "retry", "--all", "--yes", "--batch-size", "1000")
	testkit.Eventually(t, time.Minute, func() bool { return stderr.has("retried 1000 of 3000") }, "no progress line for the first batch:\n%s", stderr)
	// The second batch waits on the lock.
	testkit.Eventually(t, time.Minute, func() bool {
		var waiting bool
		err := db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
            AND ((classid::bigint << 32) | objid::bigint) = $1)`, lockKey).Scan(&waiting)
		return err == nil && waiting
	}, "the second batch never waited on the advisory lock:\n%s", stderr)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, done); code != 130 {
		t.Fatalf("exit %d after SIGINT, want 130\n%s", code, stderr)
	}
	if !stderr.has("interrupted after retried 1000 of 3000") || !stderr.has("run the same command again") {
		t.Fatalf("no interruption message:\n%s", stderr)
	}
	if n := countDead(t, db); n != 2000 {
		t.Fatalf("dead letters after the interrupted retry: %d, want 2000 (the first batch committed, the second rolled back)", n)
	}
	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, lockKey); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP TRIGGER hold_second_batch ON herald_outbox`); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runHerald(t, env, "dead", "retry", "--all", "--yes", "--batch-size", "1000")
	if code != 0 || !strings.HasPrefix(out, "retried 2000 dead letter(s)") || !strings.Contains(errOut, "retried 2000 of 2000") {
		t.Fatalf("the same command again: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := countDead(t, db); n != 0 {
		t.Fatalf("dead letters left: %d", n)
	}
}

// TestTailFollowsNewEvents: herald tail shows the events written after it
// started, not those before, and exits 0 on SIGTERM.
func TestTailFollowsNewEvents(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testTail(t, testkit.ModerncDSN(testkit.SQLitePath(t))) })
	t.Run("mysql", func(t *testing.T) { _, dsn := testkit.MySQL(t); testTail(t, "mysql://"+dsn) })
}

func testTail(t *testing.T, dsn string) {
	env := []string{"HERALD_DSN=" + dsn}
	mustRun(t, env, "migrate", "up")
	d := dialectOf(dsn)
	db, err := migrate.Open(d, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	writeEvents(t, db, d, envelope.Message{Topic: "before.tail", Payload: 1})
	cmd, stdout, stderr, done := start(t, env, "tail", "--json", "--interval", "20ms", "--topics", "shop.*")
	testkit.Eventually(t, time.Minute, func() bool { return stderr.has("herald tail: following herald_outbox") }, "tail did not start:\n%s", stderr)
	writeEvents(t, db, d,
		envelope.Message{Topic: "shop.order.placed", OrderingKey: "o1", Payload: 2},
		envelope.Message{Topic: "mail.sent", Payload: 3},
		envelope.Message{Topic: "shop.order.paid", OrderingKey: "o1", Payload: 4})
	testkit.Eventually(t, time.Minute, func() bool { return stdout.has("shop.order.paid") }, "tail did not show the new events:\n%s\n%s", stdout, stderr)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, done); code != 0 {
		t.Fatalf("tail exit %d after SIGTERM\n%s", code, stderr)
	}
	var got []string
	for _, l := range strings.Split(stdout.String(), "\n") {
		var e admin.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("tail --json line %q: %v", l, err)
		}
		got = append(got, e.Topic)
	}
	if strings.Join(got, ",") != "shop.order.placed,shop.order.paid" {
		t.Fatalf("tail showed %v, want the two new shop.* events", got)
	}
}

// TestBacklogShowsPausedTopics: herald backlog marks a paused topic, and
// lists one with nothing pending while it is paused.
func TestBacklogShowsPausedTopics(t *testing.T) {
	dsn := testkit.ModerncDSN(testkit.SQLitePath(t))
	env := []string{"HERALD_DSN=" + dsn}
	mustRun(t, env, "migrate", "up")
	mustRun(t, env, "pause", "idle.topic")
	if bl := backlogJSON(t, env); len(bl) != 1 || !bl["idle.topic"].Paused || bl["idle.topic"].Pending != 0 {
		t.Fatalf("backlog --json with idle.topic paused: %+v", bl)
	}
	if table := mustRun(t, env, "backlog"); !strings.Contains(table, "idle.topic") || !strings.Contains(table, "paused") {
		t.Fatalf("backlog table:\n%s", table)
	}
	mustRun(t, env, "resume", "idle.topic")
	if bl := backlogJSON(t, env); len(bl) != 0 {
		t.Fatalf("backlog --json after resume: %+v", bl)
	}
}
