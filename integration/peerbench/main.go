// Command peerbench measures herald beside its peers, in one run of
// interleaved rounds (every case once per round, the rounds one after the
// other), and writes Markdown tables: median and range of the rounds, the
// load average at the start of each round, the machine, the versions, the
// server's settings and the command. Sections (-sections):
//
//   - drain: a backlog of -events events delivered to a no-op handler by
//     herald's relay (defaults; batch 1000 with one relay, two relays, and
//     one relay on 1,000 ordering keys; batch 10,000; DeleteOnPublish at
//     batch 1000 and 10,000; LeaseByLock at the defaults, at batch 1000
//     with one relay and two, and with DeleteOnPublish), the bare
//     lease-and-mark loop of
//     integration/relaybench (batch 100 and 1000, one worker and two; batch
//     10,000; batch 1000 on 1,000 ordering keys), watermill-sql v4's subscriber and watermill's
//     forwarder (components/forwarder, reading the same SQL subscriber and
//     publishing to a no-op publisher), each at defaults (batch 100) and at
//     each of -watermill-batches (1,000 and 10,000; the fastest is its best
//     batch), and River (defaults; tuned);
//   - backlog: the relay at its defaults draining backlogs of each
//     -backlogs size (10,000, 100,000, 1,000,000), at the server's
//     settings (JIT on unless the DSN says otherwise; -stock for
//     autovacuum on): the rate should not fall with the size; beside each,
//     the bare lease-and-mark loop at batch 100 on the same backlog, the
//     floor of that fall (a larger table costs the bare loop too);
//   - producer: cost per write, each ÷ a plain GORM Create in its own
//     transaction: herald's captured Create, a Create of a model the
//     plugin does not capture on the plugin's *gorm.DB, and GORM Create +
//     herald Enqueue, + watermill Publish, + River InsertTx, + a
//     hand-written INSERT into herald's table (unordered, and keyed by
//     the row as a captured row's event is), each in the Create's
//     transaction;
//   - enqueue-many: events/s of batches of 1000 events per transaction:
//     herald's gormcapture.EnqueueMany, a bare unnest INSERT into herald's
//     table (its ids bound as strings, again returning each event's
//     sequence in message order as EnqueueMany must — and then with each
//     payload checked by json.Valid first —, and again with the ids bound
//     as a binary uuid[]),
//     watermill Publish of 1000 messages, River InsertManyTx and
//     InsertManyFastTx, alternated transaction by transaction;
//   - bulk: GORM Updates of -bulk-rows rows captured BeforeAndAfter,
//     against the hand-written floor (the same UPDATE … RETURNING and one
//     INSERT … SELECT of the events into herald's table) and the plain
//     Updates;
//   - latency: commit → delivery at -rate events/s for -latency-duration:
//     herald with the in-process wakeup, with the wakeup and
//     DeleteOnPublish, with the wakeup and AsyncCommit, polling only; the
//     floor beside them — the same writers and wakeup, and in place of the
//     relay relaybench's bare lease and mark (prepared by pgx, so they may
//     run generic plans; the relay plans at each execution); River
//     at defaults and tuned — p50 and p99 over the whole run, and p50/p99
//     of its first and last minute (first and last fifth for runs shorter
//     than two minutes) with the drift ratio, last ÷ first window's p99;
//     herald's writers and relay share one *sql.DB with -max-idle-conns
//     idle connections (16; 0 keeps database/sql's 2, which closes and
//     reopens connections at this rate), and the notes count the
//     connections it closed; in runs of two
//     minutes or more, herald's cases also print a table by minute: the
//     p99 of each span (the writer's transaction, commit → lease, lease →
//     delivery, delivery → mark), a control — a one-row autocommit UPDATE
//     of another table 20 times a second, what a plain commit of the same
//     server cost that minute — the WAL written and checkpoints, and
//     herald_outbox's tuples, autovacuums and index sizes;
//   - sqlite: herald alone (the peers do not write SQLite), through
//     mattn/go-sqlite3 with journal_mode=WAL, synchronous=NORMAL, plain GORM
//     and herald each on a database file of its own: the producer ratios
//     (captured Create in GORM's transaction and in a caller's, Create +
//     Enqueue, Create + a hand-written INSERT, each ÷ plain Create, with a
//     plain Create in a caller's transaction for reference) and the bulk
//     update (herald vs a hand-written SQLite floor — INSERT … SELECT of
//     the events with both images, then the UPDATE — vs plain).
//
// It is a module of its own so that herald's users never download the
// peers. Run from this directory:
//
//	go run . -out results.md
//
// HERALD_POSTGRES_DSN or -dsn (default postgres://postgres@127.0.0.1:5432/test)
// points it at a server; it works in a schema of its own, dropped at the
// end. With -stock it starts a private PostgreSQL cluster instead, with
// initdb's stock settings (autovacuum on, synchronous_commit on, …; the
// server binaries from HERALD_PG_BIN or /usr/lib/postgresql/*/bin, run as
// the OS user postgres when peerbench runs as root), runs the PostgreSQL
// sections against it, and removes it at the end; -dsn's query parameters
// (session settings such as jit=off) still apply. The report lists the
// server's autovacuum and commit settings and every setting taken from a
// configuration file.
//
// -only keeps the cases whose "section/name" matches a regular expression.
// A case that fails (a server missing or lost, a timeout: -case-timeout)
// is logged, listed under "Failures" in the report, and the run goes on;
// when PostgreSQL cannot be reached at the start, the PostgreSQL sections
// are skipped with that message and the SQLite section still runs.
// -cpuprofile writes a CPU profile of the whole run (the client side of
// herald and of its peers) for go tool pprof.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// unorderedIdx: see resetHerald.
var unorderedIdx bool

type config struct {
	dsn        string // with search_path set to the run's schema
	events     int
	writes     int
	bulkRows   int
	rate       int
	latencyDur time.Duration
	maxIdle    int    // SetMaxIdleConns of herald's pool in the latency runs; 0 = database/sql's default (2)
	sqliteDir  string // a temporary directory for the SQLite files
}

// figure is one measured value of a case in one round.
type figure struct {
	name, unit string
	value      float64
	note       string // per-round note (latency windows)
	detail     string // a Markdown block printed after the sections (herald's latency, by minute)
}

// kase is one case of a section; run returns its figures for one round.
type kase struct {
	section, name string
	postgres      bool // needs the PostgreSQL server
	run           func(context.Context, config) ([]figure, error)
}

// result is one figure's values over the rounds.
type result struct {
	section, name, unit string
	values              []float64
	extra               []string
}

// cleanups run at exit, including a fatal one (the private cluster).
var cleanups []func()

func fatalf(format string, args ...any) {
	log.Printf(format, args...)
	runCleanups()
	os.Exit(1)
}

func runCleanups() {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
}

var allSections = []string{"drain", "backlog", "producer", "enqueue-many", "bulk", "latency", "sqlite"}

func main() {
	var (
		dsn         = flag.String("dsn", envOr("HERALD_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN (with -stock: only its query parameters are used)")
		stock       = flag.Bool("stock", false, "run the PostgreSQL sections on a private cluster at stock settings (initdb defaults: autovacuum on), started and removed by peerbench")
		rounds      = flag.Int("rounds", 3, "interleaved rounds")
		events      = flag.Int("events", 100000, "events per drain, and per enqueue-many measurement (in transactions of 1000)")
		writes      = flag.Int("writes", 1000, "writes per producer measurement (PostgreSQL and SQLite)")
		bulkRows    = flag.Int("bulk-rows", 10000, "rows per bulk update (PostgreSQL and SQLite)")
		rate        = flag.Int("rate", 500, "events per second in the latency runs")
		latDur      = flag.Duration("latency-duration", 30*time.Second, "length of each latency run")
		maxIdle     = flag.Int("max-idle-conns", 16, "SetMaxIdleConns of the *sql.DB herald's writers and relay share in the latency runs; 0 keeps database/sql's default, 2, which closes and reopens connections at 500 events/s")
		caseTimeout = flag.Duration("case-timeout", 15*time.Minute, "a case still running after this (plus -latency-duration for latency cases) fails")
		sections    = flag.String("sections", strings.Join(allSections, ","), "what to measure")
		only        = flag.String("only", "", "run only the cases whose \"section/name\" matches this regular expression")
		out         = flag.String("out", "peerbench-results.md", "Markdown file written")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the whole run (herald's and its peers' client side) to this file")
	)
	wmBatches := flag.String("watermill-batches", "1000,10000", "SubscribeBatchSizes of the tuned watermill subscriber and forwarder drains, comma-separated (their default, 100, is measured too)")
	flag.BoolVar(&unorderedIdx, "unordered-idx", true, "create herald_outbox_pending_unordered_idx if the migrations did not (schema version 3 does)")
	backlogs := flag.String("backlogs", "10000,100000,1000000", "backlog sizes of the backlog section's drains, comma-separated")
	flag.Parse()
	backlogSizes = nil
	for _, f := range strings.Split(*backlogs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fatalf("peerbench: -backlogs: %q is not a positive size", f)
		}
		backlogSizes = append(backlogSizes, n)
	}
	watermillBatches = nil
	for _, f := range strings.Split(*wmBatches, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fatalf("peerbench: -watermill-batches: %q is not a positive batch size", f)
		}
		watermillBatches = append(watermillBatches, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer runCleanups()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fatalf("peerbench: -cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("peerbench: -cpuprofile: %v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}

	want := map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allSections, s) {
			fatalf("peerbench: unknown section %q in -sections (known: %s)", s, strings.Join(allSections, ", "))
		}
		want[s] = true
	}
	var onlyRE *regexp.Regexp
	if *only != "" {
		var err error
		if onlyRE, err = regexp.Compile(*only); err != nil {
			fatalf("peerbench: -only: %v", err)
		}
	}

	baseDSN := *dsn
	server := "the PostgreSQL server at " + redact(*dsn)
	if *stock {
		pg, err := startStockCluster()
		if err != nil {
			fatalf("peerbench: -stock: %v", err)
		}
		cleanups = append(cleanups, pg.stop)
		baseDSN = pg.dsn(*dsn)
		log.Printf("peerbench: private cluster at stock settings started in %s, listening on 127.0.0.1:%d", pg.dir, pg.port)
		server = "a private cluster at stock settings (initdb " + pg.version + ", started by peerbench in " + pg.dir + ")"
	}
	baseDSN = withDefaultParam(baseDSN, "connect_timeout", "5")

	sqliteDir, err := os.MkdirTemp("", "peerbench-sqlite-")
	if err != nil {
		fatalf("peerbench: %v", err)
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(sqliteDir) })

	// PostgreSQL: reachable? Otherwise its sections are skipped, loudly.
	var admin *sql.DB
	var pgErr error
	schema := "peerbench_" + randomHex(4)
	if admin, pgErr = sql.Open("pgx", baseDSN); pgErr == nil {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		pgErr = admin.PingContext(pctx)
		if pgErr == nil {
			_, pgErr = admin.ExecContext(pctx, `CREATE SCHEMA `+schema)
		}
		cancel()
	}
	if pgErr != nil {
		log.Printf("peerbench: cannot use %s: %v — the PostgreSQL sections (drain, producer, enqueue-many, bulk, latency) are skipped; "+
			"start the server, or point -dsn / HERALD_POSTGRES_DSN at one, or use -stock", server, pgErr)
	} else {
		cleanups = append(cleanups, func() { _ = admin.Close() })
		cleanups = append(cleanups, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := admin.ExecContext(dctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
				log.Printf("peerbench: drop schema %s: %v", schema, err)
			}
		})
	}
	var settings string // read before the run, while the server is surely there
	if pgErr == nil {
		settings = serverInfo(ctx, admin)
	}
	cfg := config{dsn: withParam(baseDSN, "search_path", schema), events: *events, writes: *writes,
		bulkRows: *bulkRows, rate: *rate, latencyDur: *latDur, maxIdle: *maxIdle, sqliteDir: sqliteDir}

	var cases, skipped []kase
	for _, sec := range allSections {
		if !want[sec] {
			continue
		}
		for _, c := range sectionCases(sec) {
			switch {
			case onlyRE != nil && !onlyRE.MatchString(c.section+"/"+c.name):
			case c.postgres && pgErr != nil:
				skipped = append(skipped, c)
			default:
				cases = append(cases, c)
			}
		}
	}
	if len(cases) == 0 {
		fatalf("peerbench: no case to run (-sections %q, -only %q; PostgreSQL: %v)", *sections, *only, errOr(pgErr, "reachable"))
	}

	results := map[string]*result{}
	var order []string
	add := func(section string, f figure) {
		k := section + "/" + f.name
		r, ok := results[k]
		if !ok {
			r = &result{section: section, name: f.name, unit: f.unit}
			results[k] = r
			order = append(order, k)
		}
		r.values = append(r.values, f.value)
		if f.note != "" {
			r.extra = append(r.extra, f.note)
		}
	}
	var details []string
	var failures []string
	if len(skipped) > 0 {
		names := make([]string, len(skipped))
		for i, c := range skipped {
			names[i] = c.section + " / " + c.name
		}
		failures = append(failures, fmt.Sprintf("not run, %s unreachable (%v): %s", server, pgErr, strings.Join(names, "; ")))
	}
	var loads []string
	started := time.Now()
	for round := range *rounds {
		loads = append(loads, loadAvg())
		for _, c := range cases {
			if ctx.Err() != nil {
				break
			}
			log.Printf("round %d: %s / %s", round+1, c.section, c.name)
			timeout := *caseTimeout
			if c.section == "latency" {
				timeout += *latDur
			}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			fs, err := c.run(cctx, cfg)
			if err == nil && cctx.Err() != nil {
				err = cctx.Err()
			}
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					err = fmt.Errorf("%w (-case-timeout %s)", err, timeout)
				}
				msg := fmt.Sprintf("round %d, %s / %s: %v", round+1, c.section, c.name, err)
				log.Printf("FAILED %s", msg)
				failures = append(failures, msg)
				continue
			}
			for _, f := range fs {
				add(c.section, f)
				if f.detail != "" {
					details = append(details, fmt.Sprintf("### %s, round %d, by minute\n\n%s", c.name, round+1, f.detail))
				}
			}
		}
	}
	loads = append(loads, loadAvg())
	if ctx.Err() != nil {
		failures = append(failures, "interrupted: the report holds the rounds run so far")
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# peerbench %s\n\n", started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Command: `go run . %s` (in integration/peerbench); %s.\n\n", shellJoin(os.Args[1:]), time.Since(started).Round(time.Second))
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %s. Load average (1/5/15 min) at the start of each round and at the end: %s.\n\n",
		runtime.NumCPU(), cpuModel(), runtime.Version(), strings.Join(loads, " → "))
	if pgErr == nil {
		fmt.Fprintf(&b, "PostgreSQL: %s: %s\n\n", server, settings)
	} else {
		fmt.Fprintf(&b, "PostgreSQL: not reachable (%v); its sections were skipped.\n\n", pgErr)
	}
	fmt.Fprintf(&b, "Versions: %s.\n\n", versions())
	fmt.Fprintf(&b, "%d interleaved rounds; median and range (min–max) of the rounds. herald_outbox_pending_unordered_idx ensured: %v. Session settings from the DSN: %s.\n\n",
		*rounds, unorderedIdx, dsnParams(baseDSN))
	for _, sec := range allSections {
		var seen bool
		for _, k := range order {
			r := results[k]
			if r.section != sec {
				continue
			}
			if !seen {
				fmt.Fprintf(&b, "## %s\n\n%s\n\n| case | median | range | unit | notes |\n|---|---:|---|---|---|\n", sec, sectionNote(sec, cfg))
				seen = true
			}
			fmt.Fprintf(&b, "| %s | %s | %s–%s | %s | %s |\n", r.name, fmtv(median(r.values)), fmtv(slices.Min(r.values)),
				fmtv(slices.Max(r.values)), r.unit, strings.Join(r.extra, "; "))
		}
		if seen {
			b.WriteString("\n")
		}
	}
	for _, d := range details {
		b.WriteString(d + "\n")
	}
	if len(failures) > 0 {
		b.WriteString("## Failures\n\n")
		for _, f := range failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		log.Printf("peerbench: %v", err)
	}
	fmt.Print(b.String())
	if len(results) == 0 {
		runCleanups()
		os.Exit(1)
	}
}

func sectionCases(sec string) []kase {
	var out []kase
	switch sec {
	case "drain":
		for _, c := range drainCases() {
			out = append(out, kase{"drain", c.name, true, one(c.name, "events/s", c.run)})
		}
	case "backlog":
		for _, c := range backlogCases(backlogSizes) {
			out = append(out, kase{"backlog", c.name, true, one(c.name, "events/s", c.run)})
		}
	case "producer":
		out = append(out, kase{"producer", "producer", true, producerRound}) // several ratios per round
	case "enqueue-many":
		out = append(out, kase{"enqueue-many", "enqueue-many", true, enqueueManyRound})
	case "bulk":
		out = append(out, kase{"bulk", "bulk", true, bulkRound})
	case "latency":
		for _, c := range latencyCases() {
			out = append(out, kase{"latency", c.name, true, c.run})
		}
	case "sqlite":
		out = append(out,
			kase{"sqlite", "producer", false, sqliteProducerRound},
			kase{"sqlite", "bulk", false, sqliteBulkRound})
	}
	return out
}

// one adapts a case measuring one value.
func one(name, unit string, run func(context.Context, config) (float64, string, error)) func(context.Context, config) ([]figure, error) {
	return func(ctx context.Context, cfg config) ([]figure, error) {
		v, note, err := run(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return []figure{{name: name, unit: unit, value: v, note: note}}, nil
	}
}

func sectionNote(sec string, cfg config) string {
	switch sec {
	case "drain":
		return fmt.Sprintf("Drain of %d pending events (~250-byte JSON payload) to a no-op handler, timed from start until the last event is acknowledged/marked. Each drain starts from a freshly filled table. Notes, per round, for herald's relay and the bare loop: the CPU time the drain took per 1,000 events, on the client (this process: the relays or the loop's workers) and on the server (every postgres process on this machine; only when the server runs here), and how busy this machine's cores were (all of them, whatever ran on them).", cfg.events)
	case "backlog":
		return "Drains of backlogs of each -backlogs size with the relay at its defaults (batch 100, one relay, delivery.Func), each from a freshly filled table, at the server's settings as listed above (JIT as configured there): the rate should not fall with the size. Beside each, the bare lease-and-mark loop (batch 100, 1 worker) drains the same backlog: what a larger table costs a loop with nothing else in it. Notes: each drain's CPU per 1,000 events and the cores' busy share, as in the drain section."
	case "producer":
		return fmt.Sprintf("Time per write of %d writes, each in its own transaction, ÷ the time of a plain GORM Create of the same row in its own transaction, alternated write by write with that case alone (one case after the other, each with plain Creates of its own), on one pool shared by plain GORM and herald.", cfg.writes)
	case "enqueue-many":
		return fmt.Sprintf("%d events (~250-byte JSON payload) per case, in transactions of %d events, the cases alternated transaction by transaction; timed: building the batch, BEGIN, the insert, COMMIT.", cfg.events, manyPerTx)
	case "bulk":
		return fmt.Sprintf("GORM `Updates` with a `Where` matching %d rows, in GORM's default transaction.", cfg.bulkRows)
	case "latency":
		idle := "database/sql's default idle pool (2 connections)"
		if cfg.maxIdle > 0 {
			idle = fmt.Sprintf("SetMaxIdleConns(%d)", cfg.maxIdle)
		}
		return fmt.Sprintf("One event per transaction at %d ev/s for %s; commit → delivery handler; herald's writers (GORM, 4 goroutines) and relay share one *sql.DB with %s. p50 and p99 of the whole run; the drift row is the last %s's p99 ÷ the first's; notes: p50/p99 of the first and last %s (and each minute's p99 in runs of two minutes or more), per round; runs of two minutes or more add a table by minute for herald's cases (below the sections).",
			cfg.rate, cfg.latencyDur, idle, windowName(cfg.latencyDur), windowName(cfg.latencyDur))
	case "sqlite":
		return fmt.Sprintf("herald alone on SQLite (mattn/go-sqlite3, journal_mode=WAL, synchronous=NORMAL, foreign keys on, two database files per round — plain GORM's and herald's, as herald's own SQLite benchmarks — in %s): producer — %d writes each ÷ a plain GORM Create of the same row in its own transaction, alternated write by write; bulk — GORM `Updates` matching %d rows.",
			os.TempDir(), cfg.writes, cfg.bulkRows)
	}
	return ""
}

func fmtv(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch {
	case len(s) == 0:
		return 0
	case len(s)%2 == 0:
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func versions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var parts []string
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/ThreeDotsLabs/watermill", "github.com/ThreeDotsLabs/watermill-sql/v4", "github.com/riverqueue/river",
			"github.com/jackc/pgx/v5", "gorm.io/gorm", "gorm.io/driver/postgres", "gorm.io/driver/sqlite", "github.com/mattn/go-sqlite3":
			parts = append(parts, d.Path+" "+d.Version)
		}
	}
	parts = append(parts, "herald (this checkout, via replace)")
	return strings.Join(parts, ", ")
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], "/")
}

// serverInfo names the server's version, the settings that matter most
// here, and every setting a configuration file sets.
func serverInfo(ctx context.Context, db *sql.DB) string {
	var v, av, avn, sc, fs, sb, jit string
	err := db.QueryRowContext(ctx, `SELECT current_setting('server_version'), current_setting('autovacuum'), current_setting('autovacuum_naptime'),
		current_setting('synchronous_commit'), current_setting('fsync'), current_setting('shared_buffers'), current_setting('jit')`).Scan(&v, &av, &avn, &sc, &fs, &sb, &jit)
	if err != nil {
		return fmt.Sprintf("settings not read: %v", err)
	}
	s := fmt.Sprintf("PostgreSQL %s; as peerbench's sessions see them: autovacuum %s, autovacuum_naptime %s, synchronous_commit %s, fsync %s, shared_buffers %s, jit %s", v, av, avn, sc, fs, sb, jit)
	rows, err := db.QueryContext(ctx, `SELECT name, current_setting(name) FROM pg_settings WHERE source = 'configuration file'
		AND name !~* '^(lc_|ssl|log_|datestyle$|timezone$|cluster_name$|external_pid_file$|unix_socket_directories$|dynamic_shared_memory_type$|default_text_search_config$|listen_addresses$|port$)'
		ORDER BY name`)
	if err != nil {
		return s
	}
	defer rows.Close()
	var conf []string
	for rows.Next() {
		var n, val string
		if rows.Scan(&n, &val) == nil {
			conf = append(conf, n+"="+val)
		}
	}
	if err := rows.Err(); err != nil {
		return s + fmt.Sprintf("; settings from configuration files not read: %v", err)
	}
	if len(conf) == 0 {
		return s + "; no other setting from a configuration file (locale, SSL, logging and where to listen aside)"
	}
	return s + "; from configuration files (locale, SSL, logging and where to listen aside): " + strings.Join(conf, ", ")
}

func cpuModel() string {
	out, err := exec.Command("sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func withParam(dsn, k, v string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		fatalf("peerbench: DSN: %v", err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

func withDefaultParam(dsn, k, v string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		fatalf("peerbench: DSN: %v", err)
	}
	if u.Query().Has(k) {
		return dsn
	}
	return withParam(dsn, k, v)
}

// redact hides a DSN's password.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dsnParams lists the DSN's query parameters other than sslmode and
// connect_timeout (session settings such as jit=off).
func dsnParams(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "?"
	}
	q := u.Query()
	q.Del("sslmode")
	q.Del("connect_timeout")
	if len(q) == 0 {
		return "none"
	}
	return q.Encode()
}

// shellJoin joins arguments for a shell, single-quoting those with
// characters a shell would interpret.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "&?;|<>()$`\"' *") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
