// Command relayprof drains a backlog with one relay on PostgreSQL and
// shows where its polls go: every statement the relay's connections run
// is timed (a pgx tracer on the relay's *sql.DB — the relay sees pgx's
// own driver, so it plans its statements as in production), grouped by
// what it is (BEGIN, SET LOCAL jit, lease, mark, the mark carried into a
// lease, COMMIT, …), and printed as a Markdown table beside the drain's
// wall time. With -explain f it also runs the relay's last lease
// statement under EXPLAIN (ANALYZE, BUFFERS) — in a transaction with jit
// off that it rolls back — once a fraction f of the backlog is delivered.
//
//	go run ./integration/cmd/relayprof -n 100000
//	go run ./integration/cmd/relayprof -n 1000000 -explain 0.5
//	go run ./integration/cmd/relayprof -n 100000 -batch 1000 -keys 1000
//	go run ./integration/cmd/relayprof -n 100000 -explain 0.5 -plans 40
//	go run ./integration/cmd/relayprof -n 100000 -batch 1000 -replay
//
// With -plans k (and -explain) it also prepares that lease statement and
// runs it k times under EXPLAIN (ANALYZE, SUMMARY), each in a transaction
// it rolls back, alternating a custom plan (planned at each execution, as
// the relay runs it) and PostgreSQL's generic plan, and prints the
// minimum and median planning and execution times the server reports —
// a figure of the statement alone, less exposed to the client's load than
// the drain's.
//
// It also prints the drain's share of HOT updates (heap-only: no new
// index entries). With -analyze it runs ANALYZE on the filled table
// before the drain, as autovacuum would have, so the planner plans with
// statistics.
//
// HERALD_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test)
// points it at a server; it works in a schema of its own, dropped at the
// end.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/integration/relaybench"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

func main() {
	var (
		dsn     = flag.String("dsn", envOr("HERALD_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN")
		n       = flag.Int("n", 100000, "events in the backlog")
		batch   = flag.Int("batch", relay.DefaultBatchSize, "the relay's BatchSize")
		keys    = flag.Int("keys", 0, "spread the events over this many ordering keys (0: unordered)")
		explain = flag.Float64("explain", 0, "when this fraction of the backlog is delivered, EXPLAIN (ANALYZE, BUFFERS) the relay's last lease (0: never)")
		async   = flag.Bool("async-commit", false, "the relay's AsyncCommit")
		byLock  = flag.Bool("lease-by-lock", false, "the relay's LeaseByLock")
		plans   = flag.Int("plans", 0, "with -explain: run the lease this many times with a custom and a generic plan each and report the server's planning and execution times")
		replay  = flag.Bool("replay", false, "after the drain, drain the same backlog again with the relay's own lease and carried mark statements replayed in a bare loop (rows read as raw bytes, no Events, no delivery): the statements' share of the relay's rate")
		cpuprof = flag.String("cpuprofile", "", "write a CPU profile of the relay's drain to this file")
		relays  = flag.Int("relays", 1, "relays draining the backlog side by side (statement times are summed over them; their shares are of the relays' time, the drain's × relays)")
		analyze = flag.Bool("analyze", false, "ANALYZE the filled table before the drain, as autovacuum would have (the planner then plans with statistics)")
	)
	flag.Parse()
	ctx := context.Background()
	schema := "relayprof_" + randomHex(4)
	admin, err := sql.Open("pgx", *dsn)
	check(err)
	defer admin.Close()
	_, err = admin.ExecContext(ctx, `CREATE SCHEMA `+schema)
	check(err)
	defer func() { _, _ = admin.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) }()
	base := withParam(*dsn, "search_path", schema)

	setup, err := sql.Open("pgx", base)
	check(err)
	defer setup.Close()
	check(relaybench.Reset(ctx, setup, "herald_outbox"))
	check(relaybench.Fill(ctx, setup, "herald_outbox", *n, *keys))
	if *analyze {
		_, err = setup.ExecContext(ctx, `ANALYZE herald_outbox`)
		check(err)
	}
	_, err = setup.ExecContext(ctx, `CHECKPOINT`)
	check(err)

	cc, err := pgx.ParseConfig(base)
	check(err)
	tr := &tracer{stats: map[string]*stat{}}
	cc.Tracer = tr
	db := stdlib.OpenDB(*cc)
	defer db.Close()

	var delivered atomic.Int64
	done := make(chan struct{})
	explainAt := int64(*explain * float64(*n))
	var plan string
	var explainWG sync.WaitGroup
	obs := relay.ObserverFuncs{OnDelivered: func(context.Context, relay.Delivered) {
		d := delivered.Add(1)
		if explainAt > 0 && d == explainAt {
			explainWG.Go(func() {
				plan = explainLease(ctx, setup, tr)
				if *plans > 0 {
					plan += timePlans(ctx, setup, tr, *plans)
				}
			})
		}
		if d == int64(*n) {
			close(done)
		}
	}}
	if *relays < 1 || *relays > 1 && *replay {
		check(fmt.Errorf("relayprof: -relays %d: at least 1, and 1 with -replay (it replays one relay's statements)", *relays))
	}
	rs := make([]*relay.Relay, *relays)
	for i := range rs {
		r, err := relay.New(db, delivery.Func(func(context.Context, *envelope.Event) error { return nil }), relay.Config{
			Dialect: envelope.Postgres, Name: fmt.Sprintf("relayprof-%d", i), BatchSize: *batch, AsyncCommit: *async, LeaseByLock: *byLock,
			Observer: obs, Logger: slog.New(slog.DiscardHandler),
		})
		check(err)
		rs[i] = r
	}
	tr.reset()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		check(err)
		check(pprof.StartCPUProfile(f))
	}
	cpu0 := testkit.ProcessCPU()
	start := time.Now()
	for _, r := range rs {
		check(r.Start(ctx))
	}
	<-done
	for _, r := range rs {
		check(r.Stop(ctx)) // writes a mark still carried
	}
	wall := time.Since(start)
	cpu := testkit.ProcessCPU() - cpu0
	if *cpuprof != "" {
		pprof.StopCPUProfile()
	}
	explainWG.Wait()
	hot, err := relaybench.HOTRatio(ctx, setup, schema+".herald_outbox")
	check(err)

	var version string
	_ = admin.QueryRowContext(ctx, `SELECT current_setting('server_version')`).Scan(&version)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("# relayprof %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("PostgreSQL %s; load average %s; %d events (%s), BatchSize %d, %s, a no-op delivery\n\n",
		version, strings.Join(strings.Fields(string(load))[:3], " "), *n, ordered(*keys), *batch, relayCount(*relays))
	relayTime := wall * time.Duration(*relays)
	fmt.Printf("drain: %s, %.0f events/s; %d polls of %.1f ms; this process's CPU %.2f ms per 1,000 events\n\n", wall.Round(time.Millisecond), float64(*n)/wall.Seconds(),
		tr.polls(), float64(relayTime.Microseconds())/1000/float64(max(tr.polls(), 1)), cpu.Seconds()*1e6/float64(*n))
	fmt.Printf("HOT updates (heap only, no new index entries): %.0f%% of the drain's updates\n\n", 100*hot)
	fmt.Println("| statement | count | per poll | total ms | mean µs | share of the drain |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	var sum time.Duration
	for _, k := range tr.kinds() {
		s := tr.stats[k]
		sum += s.total
		fmt.Printf("| %s | %d | %.2f | %.0f | %.0f | %.1f%% |\n", k, s.count, float64(s.count)/float64(max(tr.polls(), 1)),
			float64(s.total.Microseconds())/1000, float64(s.total.Microseconds())/float64(s.count), 100*s.total.Seconds()/relayTime.Seconds())
	}
	fmt.Printf("| outside statements (delivery, Go) | | | %.0f | | %.1f%% |\n", float64((relayTime-sum).Microseconds())/1000, 100*(relayTime-sum).Seconds()/relayTime.Seconds())
	if *replay {
		check(relaybench.Reset(ctx, setup, "herald_outbox"))
		check(relaybench.Fill(ctx, setup, "herald_outbox", *n, *keys))
		_, err = setup.ExecContext(ctx, `CHECKPOINT`)
		check(err)
		fmt.Println()
		fmt.Print(replayDrain(ctx, base, tr, *n, *batch, wall))
	}
	if plan != "" {
		fmt.Printf("\nEXPLAIN (ANALYZE, BUFFERS) of the relay's lease with %d of %d events delivered:\n\n```\n%s```\n", explainAt, *n, plan)
	}
}

// stat is the time spent in one kind of statement.
type stat struct {
	count int
	total time.Duration
}

// tracer times every statement of the relay's connections (pgx.QueryTracer).
type tracer struct {
	mu        sync.Mutex
	stats     map[string]*stat
	lastLease string
	leaseArgs []any
	// plainLease, unorderedLease and fusedMark are the first plain lease
	// (no key walk, no runs), lease of unordered events and carried mark
	// the relay ran, for -replay.
	plainLease, unorderedLease, fusedMark string
	markedLease                           string // the lease of unordered events with the carried mark
}

type startKey struct{}

type started struct {
	at   time.Time
	kind string
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	k := kind(d.SQL)
	if strings.HasPrefix(k, "lease") {
		var args []any
		for _, a := range d.Args {
			if _, ok := a.(pgx.QueryExecMode); !ok {
				args = append(args, a)
			}
		}
		t.mu.Lock()
		t.lastLease, t.leaseArgs = d.SQL, args
		if k == "lease" && t.plainLease == "" {
			t.plainLease = d.SQL
		}
		if k == kindUnorderedLease && t.unorderedLease == "" {
			t.unorderedLease = d.SQL
		}
		if k == kindMarkedLease && t.markedLease == "" {
			t.markedLease = d.SQL
		}
		t.mu.Unlock()
	}
	if k == kindFusedMark {
		t.mu.Lock()
		if t.fusedMark == "" {
			t.fusedMark = d.SQL
		}
		t.mu.Unlock()
	}
	return context.WithValue(ctx, startKey{}, started{time.Now(), k})
}

func (t *tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s, ok := ctx.Value(startKey{}).(started)
	if !ok {
		return
	}
	took := time.Since(s.at)
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stats[s.kind]
	if st == nil {
		st = &stat{}
		t.stats[s.kind] = st
	}
	st.count++
	st.total += took
}

func (t *tracer) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats = map[string]*stat{}
}

// polls is the number of leases run.
func (t *tracer) polls() int {
	n := 0
	for k, s := range t.stats {
		if strings.HasPrefix(k, "lease") {
			n += s.count
		}
	}
	return n
}

func (t *tracer) kinds() []string {
	var ks []string
	for k := range t.stats {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int { return int(t.stats[b].total - t.stats[a].total) })
	return ks
}

// kindFusedMark is the kind of the mark the relay carries into the next
// lease's transaction.
const kindFusedMark = "mark, carried into the lease's transaction"

// kindUnorderedLease is the kind of the lease of unordered events alone,
// which the relay runs while it drains a backlog of them;
// kindMarkedLease the same lease with the last batch's mark carried into
// the statement.
const (
	kindUnorderedLease = "lease (unordered events)"
	kindMarkedLease    = "lease (unordered events) with the carried mark, one statement"
)

// kindSuccessorsLease is the lease of the next events of the keys the last
// batch delivered, with that batch's mark, in one statement.
const kindSuccessorsLease = "lease (successors of the keys delivered) with the carried mark, one statement"

// kind names a statement of the relay by its text.
func kind(q string) string {
	l := strings.ToLower(strings.TrimSpace(q))
	switch {
	case l == "begin" || strings.HasPrefix(l, "begin "):
		return "BEGIN"
	case l == "commit":
		return "COMMIT"
	case l == "rollback":
		return "ROLLBACK"
	case strings.HasPrefix(l, "explain"):
		return "EXPLAIN (the JIT guard's estimate)"
	case strings.HasPrefix(l, "set local jit"):
		return "SET LOCAL jit = off"
	case strings.Contains(l, "herald_marked") && strings.Contains(l, "cross join lateral"):
		return kindSuccessorsLease
	case strings.Contains(l, "herald_marked") && strings.Contains(l, "set lease_until"):
		return kindMarkedLease
	case strings.Contains(l, "herald_marked"):
		return kindFusedMark
	case strings.Contains(l, "set published_at"):
		return "mark"
	case strings.HasPrefix(l, "delete") && strings.Contains(l, "leased_by"):
		return "mark (delete)"
	case strings.Contains(l, "set attempts"):
		return "mark failed"
	case strings.Contains(l, "set lease_until = coalesce($4"):
		return "renewal"
	case strings.Contains(l, "set lease_until = null"):
		return "release"
	case strings.Contains(l, "where e.published_at is null and e.ordering_key is null and e.dead_lettered_at is null"):
		return kindUnorderedLease
	case strings.Contains(l, "returning") && strings.Contains(l, "leased_by = $2"), strings.Contains(l, "with heads as"):
		switch {
		case strings.Contains(l, "with heads as") && strings.Contains(l, "recursive walk"):
			return "lease (runs, key walk)"
		case strings.Contains(l, "with heads as"):
			return "lease (runs)"
		case strings.Contains(l, "recursive walk"):
			return "lease (key walk)"
		}
		return "lease"
	}
	return "other: " + cut(strings.Join(strings.Fields(q), " "), 40)
}

// explainLease runs the relay's last lease statement under EXPLAIN
// (ANALYZE, BUFFERS) in a transaction with jit off, rolled back.
func explainLease(ctx context.Context, db *sql.DB, t *tracer) string {
	t.mu.Lock()
	q, args := t.lastLease, t.leaseArgs
	t.mu.Unlock()
	if q == "" {
		return "no lease seen yet\n"
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err.Error() + "\n"
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL jit = off`); err != nil {
		return err.Error() + "\n"
	}
	rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q, args...)
	if err != nil {
		return err.Error() + "\n"
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err.Error() + "\n"
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		return err.Error() + "\n"
	}
	return b.String()
}

// timePlans prepares the relay's last lease as a named statement and
// runs it k times under EXPLAIN (ANALYZE, SUMMARY) with each of
// plan_cache_mode force_custom_plan and force_generic_plan, alternating,
// each run in a transaction rolled back. It returns a Markdown table of
// the server's planning, execution and total times (minimum, median).
func timePlans(ctx context.Context, db *sql.DB, t *tracer, k int) string {
	t.mu.Lock()
	q, args := t.lastLease, t.leaseArgs
	t.mu.Unlock()
	if q == "" {
		return "no lease seen yet\n"
	}
	var lits []string
	for _, a := range args {
		switch v := a.(type) {
		case nil:
			lits = append(lits, "NULL")
		case int64:
			lits = append(lits, fmt.Sprint(v))
		case int:
			lits = append(lits, fmt.Sprint(v))
		case string:
			lits = append(lits, "'"+strings.ReplaceAll(v, "'", "''")+"'")
		default: // pgx's options (the relay's QueryExecMode, the tracer's formats) are not the statement's
			if strings.HasPrefix(fmt.Sprintf("%T", a), "pgx.") {
				continue
			}
			return fmt.Sprintf("cannot write the lease's argument %T as a literal\n", a)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err.Error() + "\n"
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET jit = off`); err != nil {
		return err.Error() + "\n"
	}
	if _, err := conn.ExecContext(ctx, `PREPARE relayprof_lease AS `+q); err != nil {
		return err.Error() + "\n"
	}
	exec := "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON) EXECUTE relayprof_lease(" + strings.Join(lits, ", ") + ")"
	modes := []string{"force_custom_plan", "force_generic_plan"}
	times := map[string][3][]float64{}
	for range k {
		for _, m := range modes {
			if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = `+m); err != nil {
				return err.Error() + "\n"
			}
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				return err.Error() + "\n"
			}
			plan, exe, err := explainTimes(ctx, tx, exec)
			_ = tx.Rollback()
			if err != nil {
				return err.Error() + "\n"
			}
			ts := times[m]
			ts[0], ts[1], ts[2] = append(ts[0], plan), append(ts[1], exe), append(ts[2], plan+exe)
			times[m] = ts
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe same lease prepared and run %d times per plan, alternating, each rolled back (the server's times, ms; min / median):\n\n", k)
	b.WriteString("| plan | planning | execution | total |\n|---|---:|---:|---:|\n")
	for _, m := range modes {
		ts := times[m]
		fmt.Fprintf(&b, "| %s |", strings.TrimSuffix(strings.TrimPrefix(m, "force_"), "_plan"))
		for _, xs := range ts {
			slices.Sort(xs)
			fmt.Fprintf(&b, " %.3f / %.3f |", xs[0], xs[len(xs)/2])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// explainTimes runs an EXPLAIN (ANALYZE, SUMMARY) statement and returns
// the planning and execution times it reports, in milliseconds.
func explainTimes(ctx context.Context, tx *sql.Tx, q string) (plan, exec float64, err error) {
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return 0, 0, err
		}
		if v, ok := strings.CutPrefix(line, "Planning Time: "); ok {
			_, err = fmt.Sscanf(v, "%f ms", &plan)
		} else if v, ok := strings.CutPrefix(line, "Execution Time: "); ok {
			_, err = fmt.Sscanf(v, "%f ms", &exec)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return plan, exec, rows.Err()
}

func relayCount(n int) string {
	if n == 1 {
		return "one relay"
	}
	return fmt.Sprintf("%d relays", n)
}

func ordered(keys int) string {
	if keys == 0 {
		return "unordered"
	}
	return fmt.Sprintf("%d ordering keys", keys)
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func withParam(dsn, k, v string) string {
	u, err := url.Parse(dsn)
	check(err)
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// replayDrain drains the backlog again with the relay's own statements —
// its plain lease, its lease of unordered events and its carried mark, as
// the tracer saw them — in a loop
// of the relay's shape (BEGIN, the last batch's mark, the lease, COMMIT;
// the lease's floor at the last full batch's lowest sequence, from the
// start after 16 full leases once 19 times the last lease from the start
// has passed since it ended (at most a second), as relay.leaseFloor
// does; planned at each
// execution, as the relay runs them on pgx), reading each row's columns
// as raw bytes: no Event is built and nothing is delivered. What the
// relay's drain takes beyond this loop is its own work in Go (decoding,
// delivery, observers, bookkeeping). Keyed backlogs are replayed with the
// plain lease too (no runs, no key walk): only unordered backlogs compare
// like with like.
func replayDrain(ctx context.Context, dsn string, t *tracer, n, batch int, relayWall time.Duration) string {
	t.mu.Lock()
	lease, unorderedLease, mark, marked := t.plainLease, t.unorderedLease, t.fusedMark, t.markedLease
	t.mu.Unlock()
	if lease == "" || mark == "" {
		return "replay: the relay ran no plain lease or no carried mark to replay\n"
	}
	db, err := sql.Open("pgx", dsn)
	check(err)
	defer db.Close()
	db.SetMaxIdleConns(2)
	mode := pgx.QueryExecModeCacheDescribe
	// A lease the relay ran prepared (its text ends with a plan epoch:
	// relay/plans.go) is replayed prepared, in pgx's statement cache.
	modeOf := func(q string) pgx.QueryExecMode {
		if strings.Contains(q, "/* herald plan ") {
			return pgx.QueryExecModeCacheStatement
		}
		return mode
	}
	const name = "relayprof-replay"
	var tLease, tMark, tCommit time.Duration
	var floor int64
	var prev string             // the last batch's sequences, for its mark
	var prevLow, prevHigh int64 // and their lowest and highest (the one-statement form's arguments)
	allUnordered := false
	polls, total, full := 0, 0, 0
	var fromStartCost time.Duration // the last lease from the start, and when it ended
	var fromStartEnd time.Time
	start := time.Now()
	for {
		var got int
		var lowest, highest int64
		var keyed bool
		var seqs string
		s := time.Now()
		switch {
		case floor > 0 && allUnordered && prev != "" && marked != "":
			// The relay's lease of unordered events with the carried
			// mark: one statement, no transaction around it.
			got, lowest, highest, keyed, seqs = replayLease(ctx, db, marked, modeOf(marked), name, batch, floor, prev, prevLow, prevHigh)
			tLease += time.Since(s)
		default:
			tx, err := db.BeginTx(ctx, nil)
			check(err)
			if prev != "" {
				var k int64
				var jit string
				check(tx.QueryRowContext(ctx, mark, mode, nil, prev, name).Scan(&k, &jit))
				tMark += time.Since(s)
			}
			q := lease
			if floor > 0 && unorderedLease != "" && allUnordered {
				q = unorderedLease // as the relay does after a full lease of unordered events
			}
			l := time.Now()
			got, lowest, highest, keyed, seqs = replayLease(ctx, tx, q, modeOf(q), name, batch, floor)
			tLease += time.Since(l)
			c := time.Now()
			check(tx.Commit())
			tCommit += time.Since(c)
			if floor == 0 {
				fromStartEnd = time.Now()
				fromStartCost = fromStartEnd.Sub(l)
			}
		}
		polls++
		total += got
		prev, prevLow, prevHigh = "", 0, 0
		if got > 0 {
			prev, prevLow, prevHigh = seqs, lowest, highest
		}
		floor = 0
		if got == batch {
			full++
			if full >= 16 && (fromStartEnd.IsZero() || time.Since(fromStartEnd) >= min(19*fromStartCost, time.Second)) {
				full = 0
			} else {
				floor = lowest
				if !keyed {
					floor = highest + 1 // as the relay's afterLease: the next lease leaves this batch out
				}
			}
		} else {
			full = 0
		}
		allUnordered = !keyed
		if total >= n {
			break
		}
		if got == 0 && time.Since(start) > time.Minute {
			return fmt.Sprintf("replay: stuck at %d of %d events\n", total, n)
		}
	}
	// The last batch's mark, on its own (as the relay's Stop writes it).
	s := time.Now()
	tx, err := db.BeginTx(ctx, nil)
	check(err)
	var k int64
	var jit string
	check(tx.QueryRowContext(ctx, mark, mode, nil, prev, name).Scan(&k, &jit))
	check(tx.Commit())
	tMark += time.Since(s)
	wall := time.Since(start)
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(polls) }
	var out strings.Builder
	fmt.Fprintf(&out, "replay of the relay's statements (its leases and carried mark, BEGIN … COMMIT, rows read as raw bytes, nothing delivered): %s, %.0f events/s; %d polls of %.1f ms (lease %.1f, carried mark %.1f, COMMIT %.1f ms)\n",
		wall.Round(time.Millisecond), float64(n)/wall.Seconds(), polls, per(wall), per(tLease), per(tMark), per(tCommit))
	fmt.Fprintf(&out, "\nthe relay's drain ÷ the replay's: %.2f\n", wall.Seconds()/relayWall.Seconds())
	return out.String()
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// replayLease runs one lease of replayDrain in tx and reads its rows as raw
// bytes: how many, the lowest and highest sequence, whether any was keyed,
// and the sequences as a bigint[] literal for the mark. mark holds the
// arguments of a carried mark in the statement.
func replayLease(ctx context.Context, tx querier, q string, mode pgx.QueryExecMode, name string, batch int, floor int64, mark ...any) (got int, lowest, highest int64, keyed bool, seqs string) {
	rows, err := tx.QueryContext(ctx, q, append([]any{mode, time.Minute.Microseconds(), name, nil, batch, floor}, mark...)...)
	check(err)
	defer rows.Close()
	cols, err := rows.Columns()
	check(err)
	raw := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range raw {
		dest[i] = &raw[i]
	}
	var b strings.Builder
	b.WriteByte('{')
	for rows.Next() {
		check(rows.Scan(dest...))
		seq, err := strconv.ParseInt(string(raw[0]), 10, 64)
		check(err)
		if got > 0 {
			b.WriteByte(',')
		}
		if got == 0 || seq < lowest {
			lowest = seq
		}
		highest = max(highest, seq)
		b.WriteString(string(raw[0]))
		if raw[5] != nil { // ordering_key
			keyed = true
		}
		got++
	}
	check(rows.Err())
	b.WriteByte('}')
	return got, lowest, highest, keyed, b.String()
}
