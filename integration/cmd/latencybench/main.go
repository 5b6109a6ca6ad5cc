// Command latencybench measures commit → receipt latency: a writer commits
// outbox events at a steady rate on PostgreSQL, a relay in another process
// (this program run with -role relay) delivers them, and the latency of
// each event is the time its delivery was called in the relay process
// minus the time COMMIT returned in the writer (one machine, one clock).
// It prints p50/p95/p99/max per wakeup as a Markdown table.
//
//	go run ./integration/cmd/latencybench                          # every wakeup and polling, 500 events/s, 20 s each
//	go run ./integration/cmd/latencybench -wakeups pgnotify -rate 500 -duration 30s
//	go run ./integration/cmd/latencybench -wakeups nats,redis -duration 15s   # the NATS wakeup beside Redis's
//	go run ./integration/cmd/latencybench -wakeups pgnotify -trace # where the time goes: wake, lease, deliver
//
// Wakeups: pgnotify (NOTIFY in the events' transaction), pgnotify-after
// (the same listener; writers NOTIFY after commit, pgnotify's AfterCommit), redis, amqp,
// kafka (an in-process kfake cluster started by the writer, or
// HERALD_KAFKA_BROKERS), poll (none: the relay's default polling) and
// poll10ms (polling every 10 ms). rawnotify is the floor, without herald's
// relay: the same transactions NOTIFY the event's number, and the other
// process's receipt is the notification arriving on a bare pgx LISTEN
// connection. HERALD_POSTGRES_DSN, HERALD_REDIS_URL
// and HERALD_AMQP_URL point it at servers; it works in a schema of its
// own, dropped at the end.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
	"github.com/heraldgo/herald/wakeup/amqpfanout"
	"github.com/heraldgo/herald/wakeup/kafkasignal"
	"github.com/heraldgo/herald/wakeup/natssignal"
	"github.com/heraldgo/herald/wakeup/pgnotify"
	"github.com/heraldgo/herald/wakeup/redispubsub"
)

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type flags struct {
	role     string
	wakeups  string
	rate     int
	duration time.Duration
	warmup   time.Duration
	writers  int
	keys     int
	dsn      string
	kafka    string
	channel  string
	trace    bool
	async    bool
}

func main() {
	var f flags
	flag.StringVar(&f.role, "role", "writer", "writer (runs everything) or relay (the child process)")
	flag.StringVar(&f.wakeups, "wakeups", "rawnotify,pgnotify,pgnotify-after,redis,amqp,kafka,poll,poll10ms", "comma-separated wakeups to measure (also: nats)")
	flag.IntVar(&f.rate, "rate", 500, "events committed per second")
	flag.DurationVar(&f.duration, "duration", 20*time.Second, "measured time per wakeup")
	flag.DurationVar(&f.warmup, "warmup", 2*time.Second, "unmeasured time first")
	flag.IntVar(&f.writers, "writers", 8, "writer goroutines (each commits one event per transaction)")
	flag.IntVar(&f.keys, "keys", 0, "ordering keys the events spread over; 0 = unordered events")
	flag.StringVar(&f.dsn, "dsn", "", "relay role: the schema's DSN")
	flag.StringVar(&f.kafka, "kafka", "", "relay role: Kafka brokers")
	flag.StringVar(&f.channel, "channel", "", "relay role: the wakeup channel/topic/exchange")
	flag.BoolVar(&f.trace, "trace", false, "print where the time of each event goes (wake, lease, deliver) as percentiles")
	flag.BoolVar(&f.async, "relay-async-commit", false, "open the relay's connections with synchronous_commit=off (its lease and mark commits do not wait for the WAL flush)")
	flag.Parse()
	var err error
	switch {
	case f.role == "relay" && f.wakeups == "rawnotify":
		err = runRawListen(f)
	case f.role == "relay":
		err = runRelay(f)
	default:
		err = runWriter(f)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// newWakeup builds the wakeup named kind on channel; nil for polling.
func newWakeup(kind, dsn, kafka, channel string) (wakeup.Wakeup, error) {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	switch kind {
	case "pgnotify":
		return pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: channel, Logger: quiet})
	case "pgnotify-after": // writers signal after commit (AfterCommit); the relay listens alike
		w, err := pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: channel, Logger: quiet})
		if err != nil {
			return nil, err
		}
		return w.AfterCommit(), nil
	case "redis":
		return redispubsub.New(redispubsub.Config{URL: env("HERALD_REDIS_URL", "redis://127.0.0.1:6379/0"), Channel: channel, Logger: quiet})
	case "amqp":
		return amqpfanout.New(amqpfanout.Config{URL: env("HERALD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), Exchange: channel, Logger: quiet})
	case "kafka":
		return kafkasignal.New(kafkasignal.Config{Brokers: strings.Split(kafka, ","), Topic: channel, Logger: quiet})
	case "nats":
		return natssignal.New(natssignal.Config{URL: env("HERALD_NATS_URL", "nats://127.0.0.1:4222"), Subject: strings.ReplaceAll(channel, ":", "."), Logger: quiet})
	case "poll", "poll10ms", "rawnotify":
		return nil, nil
	}
	return nil, fmt.Errorf("unknown wakeup %q", kind)
}

// ---- the relay process ----

// runRelay runs a relay whose delivery prints "<i> <unix ns>" per event;
// it prints "ready" once listening, and stops when stdin closes.
func runRelay(f flags) error {
	kind := f.wakeups
	w, err := newWakeup(kind, f.dsn, f.kafka, f.channel)
	if err != nil {
		return err
	}
	db, err := sql.Open("pgx", f.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	var mu sync.Mutex
	var lastWake atomic.Int64
	d := batchFunc(func(_ context.Context, es []*envelope.Event) []error {
		now := time.Now().UnixNano()
		mu.Lock()
		defer mu.Unlock()
		for _, e := range es {
			// i, receipt, the relay's last wake before it, batch size,
			// lease start (lease_until − the relay's Lease)
			var leased int64
			if e.LeaseUntil != nil {
				leased = e.LeaseUntil.Add(-relay.DefaultLease).UnixNano()
			}
			fmt.Fprintf(out, "%d %d %d %d %d\n", eventNumber(e), now, lastWake.Load(), len(es), leased)
		}
		_ = out.Flush()
		return make([]error, len(es))
	})
	cfg := relay.Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	// Called after the mark of the batch committed: "m <i> <unix ns>".
	cfg.Observer = relay.ObserverFuncs{OnDelivered: func(_ context.Context, d relay.Delivered) {
		now := time.Now().UnixNano()
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "m %d %d\n", eventNumber(d.Event), now)
		_ = out.Flush()
	}}
	ready := make(chan struct{})
	var once sync.Once
	switch kind {
	case "poll":
		once.Do(func() { close(ready) })
	case "poll10ms":
		cfg.MinPollInterval, cfg.MaxPollInterval = 10*time.Millisecond, 10*time.Millisecond
		once.Do(func() { close(ready) })
	default:
		cfg.Wakeup = &timedWakeup{Wakeup: w, last: &lastWake, subscribed: func() { once.Do(func() { close(ready) }) }}
	}
	r, err := relay.New(db, d, cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		return errors.New("relay: the wakeup did not subscribe within 30 s")
	}
	mu.Lock()
	fmt.Fprintln(out, "ready")
	_ = out.Flush()
	mu.Unlock()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the writer closes it
	err = r.Stop(ctx)
	if w != nil {
		_ = w.Close()
	}
	return err
}

// runRawListen prints "<i> <unix ns> 0 1" for each notification whose
// payload is an event number: NOTIFY's own latency, no relay.
func runRawListen(f flags) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{f.channel}.Sanitize()); err != nil {
		return err
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	fmt.Fprintln(out, "ready")
	_ = out.Flush()
	ctx, cancel := context.WithCancel(ctx)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }() // until the writer closes it
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now().UnixNano()
		fmt.Fprintf(out, "%s %d 0 1\n", n.Payload, now)
		_ = out.Flush()
	}
}

func eventNumber(e *envelope.Event) int64 {
	var p struct{ I int64 }
	_ = json.Unmarshal(e.Payload, &p)
	return p.I
}

type batchFunc func(ctx context.Context, es []*envelope.Event) []error

func (f batchFunc) Deliver(ctx context.Context, e *envelope.Event) error {
	return f(ctx, []*envelope.Event{e})[0]
}
func (f batchFunc) DeliverBatch(ctx context.Context, es []*envelope.Event) []error { return f(ctx, es) }
func (batchFunc) Close() error                                                     { return nil }

// timedWakeup records when the relay was last woken by a signal.
type timedWakeup struct {
	wakeup.Wakeup
	last       *atomic.Int64
	subscribed func()
}

func (t *timedWakeup) Listen(ctx context.Context, fn func([]string)) error {
	return t.Wakeup.Listen(ctx, func(topics []string) {
		if topics == nil {
			t.subscribed()
		} else {
			t.last.Store(time.Now().UnixNano())
		}
		fn(topics)
	})
}

// ---- the writer process ----

func runWriter(f flags) error {
	base := env("HERALD_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return err
	}
	defer admin.Close()
	var brokers string
	if strings.Contains(f.wakeups, "kafka") {
		brokers = os.Getenv("HERALD_KAFKA_BROKERS")
		if brokers == "" {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				return err
			}
			defer c.Close()
			brokers = strings.Join(c.ListenAddrs(), ",")
		}
	}
	fmt.Printf("commit → receipt at %d events/s, %s measured after %s warm-up, relay in another process, %d writer goroutines, %s%s\n\n",
		f.rate, f.duration, f.warmup, f.writers, map[bool]string{true: fmt.Sprintf("%d ordering keys", f.keys), false: "unordered events"}[f.keys > 0],
		map[bool]string{true: ", relay with synchronous_commit=off", false: ""}[f.async])
	fmt.Println("| wakeup | events | p50 | p95 | p99 | max | first ⅕ p50 / p99 | last ⅕ p50 / p99 |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	var traces []string
	for _, kind := range strings.Split(f.wakeups, ",") {
		res, trace, err := measure(f, admin, base, brokers, kind)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		// Drift: the first and the last fifth of the run, in commit order.
		fifth := len(res) / 5
		first := slices.Sorted(slices.Values(res[:fifth]))
		last := slices.Sorted(slices.Values(res[len(res)-fifth:]))
		slices.Sort(res)
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s / %s | %s / %s |\n", kind, len(res), ms(pct(res, 50)), ms(pct(res, 95)), ms(pct(res, 99)), ms(slices.Max(res)),
			ms(pct(first, 50)), ms(pct(first, 99)), ms(pct(last, 50)), ms(pct(last, 99)))
		if trace != "" {
			traces = append(traces, trace)
		}
	}
	for _, t := range traces {
		fmt.Println()
		fmt.Print(t)
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type receipt struct {
	at, wake, leased time.Time
	batch            int
}

// measure runs one wakeup: a fresh schema, a relay process, the writers.
func measure(f flags, admin *sql.DB, base, brokers, kind string) ([]time.Duration, string, error) {
	ctx := context.Background()
	schema := "herald_lat_" + randomHex(4)
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, "", err
	}
	defer func() { _, _ = admin.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE") }()
	u, err := url.Parse(base)
	if err != nil {
		return nil, "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, "", err
	}
	defer db.Close()
	db.SetMaxOpenConns(f.writers + 2)
	db.SetMaxIdleConns(f.writers + 2)
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		return nil, "", err
	}
	channel := "herald_lat_" + randomHex(4)
	w, err := newWakeup(kind, dsn, brokers, channel)
	if err != nil {
		return nil, "", err
	}
	if w != nil {
		defer w.Close()
	}

	// The relay process.
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	relayDSN := dsn
	if f.async {
		q.Set("synchronous_commit", "off")
		u.RawQuery = q.Encode()
		relayDSN = u.String()
	}
	cmd := exec.Command(self, "-role", "relay", "-wakeups", kind, "-dsn", relayDSN, "-kafka", brokers, "-channel", channel)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		return nil, "", fmt.Errorf("relay process did not start: %q %w", sc.Text(), sc.Err())
	}
	var rmu sync.Mutex
	receipts := map[int64]receipt{}
	marked := map[int64]time.Time{}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) == 3 && fs[0] == "m" {
				i, _ := strconv.ParseInt(fs[1], 10, 64)
				at, _ := strconv.ParseInt(fs[2], 10, 64)
				rmu.Lock()
				if _, dup := marked[i]; !dup {
					marked[i] = time.Unix(0, at)
				}
				rmu.Unlock()
				continue
			}
			if len(fs) != 5 {
				continue
			}
			i, _ := strconv.ParseInt(fs[0], 10, 64)
			at, _ := strconv.ParseInt(fs[1], 10, 64)
			wk, _ := strconv.ParseInt(fs[2], 10, 64)
			n, _ := strconv.Atoi(fs[3])
			ls, _ := strconv.ParseInt(fs[4], 10, 64)
			rmu.Lock()
			if _, dup := receipts[i]; !dup {
				receipts[i] = receipt{at: time.Unix(0, at), wake: time.Unix(0, wk), batch: n, leased: time.Unix(0, ls)}
			}
			rmu.Unlock()
		}
	}()

	// The writers: event i is due at start + i/rate.
	wr, err := envelope.NewWriter(envelope.Postgres, "")
	if err != nil {
		return nil, "", err
	}
	ts, isTx := w.(wakeup.TxSignaler)
	total := int64((f.warmup + f.duration).Seconds() * float64(f.rate))
	warm := int64(f.warmup.Seconds() * float64(f.rate))
	commits := make([]time.Time, total)
	interval := time.Second / time.Duration(f.rate)
	start := time.Now().Add(50 * time.Millisecond)
	var next atomic.Int64
	var wg sync.WaitGroup
	var werr atomic.Value
	var behind atomic.Int64
	for range f.writers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				due := start.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				} else if d < -10*time.Millisecond {
					behind.Add(1)
				}
				m := envelope.Message{Topic: "bench.latency", Payload: map[string]int64{"i": i}}
				if f.keys > 0 {
					m.OrderingKey = "k" + strconv.FormatInt(i%int64(f.keys), 10)
				}
				tx, err := db.BeginTx(ctx, nil)
				if err == nil {
					var res *envelope.WriteResult
					res, err = wr.Write(ctx, tx, []envelope.Message{m})
					if err == nil && isTx {
						err = ts.SignalTx(ctx, tx, res.Topics)
					}
					if err == nil && kind == "rawnotify" {
						_, err = tx.ExecContext(ctx, "SELECT pg_notify($1, $2)", channel, strconv.FormatInt(i, 10))
					}
					if err == nil {
						err = tx.Commit()
					} else {
						_ = tx.Rollback()
					}
				}
				commits[i] = time.Now()
				if err != nil {
					werr.Store(err)
					return
				}
				if w != nil && !isTx {
					_ = w.Signal(ctx, []string{"bench.latency"})
				}
			}
		})
	}
	wg.Wait()
	if err, _ := werr.Load().(error); err != nil {
		return nil, "", err
	}
	// Wait for every receipt (up to 30 s).
	deadline := time.Now().Add(30 * time.Second)
	for {
		rmu.Lock()
		n := len(receipts)
		rmu.Unlock()
		if int64(n) >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = stdin.Close()
	<-readDone
	rmu.Lock()
	defer rmu.Unlock()
	var lat []time.Duration
	var toWake, wakeToRecv, toLease, leaseToRecv, recvToMark []time.Duration
	batches := map[int]int{}
	for i := warm; i < total; i++ {
		r, ok := receipts[i]
		if !ok {
			return nil, "", fmt.Errorf("event %d never received (%d of %d)", i, len(receipts), total)
		}
		lat = append(lat, r.at.Sub(commits[i]))
		if f.trace && r.wake.UnixNano() > 0 {
			toWake = append(toWake, r.wake.Sub(commits[i]))
			wakeToRecv = append(wakeToRecv, r.at.Sub(r.wake))
		}
		if f.trace && r.leased.UnixNano() > 0 {
			toLease = append(toLease, r.leased.Sub(commits[i]))
			leaseToRecv = append(leaseToRecv, r.at.Sub(r.leased))
		}
		if m, ok := marked[i]; f.trace && ok {
			recvToMark = append(recvToMark, m.Sub(r.at))
		}
		batches[r.batch]++
	}
	// lat stays in commit order: runWriter compares the first and the last
	// fifth of the run (drift) before it sorts.
	if b := behind.Load(); b > total/100 {
		fmt.Fprintf(os.Stderr, "latencybench: %s: %d of %d commits started more than 10 ms late: the writers did not keep the rate\n", kind, b, total)
	}
	trace := ""
	if f.trace {
		slices.Sort(toWake)
		slices.Sort(wakeToRecv)
		var b strings.Builder
		fmt.Fprintf(&b, "%s: where the time goes (the relay's last wake before the receipt)\n\n", kind)
		fmt.Fprintln(&b, "| span | p50 | p95 | p99 |")
		fmt.Fprintln(&b, "|---|---:|---:|---:|")
		if len(toWake) > 0 {
			fmt.Fprintf(&b, "| COMMIT returned → relay woken | %s | %s | %s |\n", ms(pct(toWake, 50)), ms(pct(toWake, 95)), ms(pct(toWake, 99)))
			fmt.Fprintf(&b, "| woken → delivery called (poll: lease + scan) | %s | %s | %s |\n", ms(pct(wakeToRecv, 50)), ms(pct(wakeToRecv, 95)), ms(pct(wakeToRecv, 99)))
		}
		for _, sp := range []struct {
			name string
			ds   []time.Duration
		}{
			{"COMMIT returned → lease started (waiting for a wake and for the relay's cycle in progress)", toLease},
			{"lease started → delivery called (the lease statement and scan)", leaseToRecv},
			{"delivery called → marked (delivery and the mark statement: the rest of the cycle)", recvToMark},
		} {
			if len(sp.ds) > 0 {
				slices.Sort(sp.ds)
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", sp.name, ms(pct(sp.ds, 50)), ms(pct(sp.ds, 95)), ms(pct(sp.ds, 99)))
			}
		}
		fmt.Fprintf(&b, "| COMMIT returned → delivery called | %s | %s | %s |\n", ms(pct(lat, 50)), ms(pct(lat, 95)), ms(pct(lat, 99)))
		sizes := make([]int, 0, len(batches))
		for s := range batches {
			sizes = append(sizes, s)
		}
		slices.Sort(sizes)
		fmt.Fprintf(&b, "\nevents by the size of the batch that delivered them:")
		for _, s := range sizes {
			fmt.Fprintf(&b, " %d:%d", s, batches[s])
		}
		fmt.Fprintln(&b)
		trace = b.String()
	}
	return lat, trace, nil
}
