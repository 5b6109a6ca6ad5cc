// Command peerbench measures herald beside its peers on one PostgreSQL, in
// one run of interleaved rounds, and writes Markdown tables (median and
// range of the rounds, load average recorded):
//
//   - drain: a backlog of N events delivered to a no-op handler by herald's
//     relay (defaults; tuned), the bare lease-and-mark loop of
//     integration/relaybench, watermill-sql's subscriber (defaults; batch
//     10,000) and River (defaults; tuned);
//   - producer cost per write, each ÷ a plain GORM Create in its own
//     transaction: herald's captured Create, GORM Create + herald Enqueue,
//   - watermill Publish, + River InsertTx, + a hand-written INSERT into
//     herald's table, all in the Create's transaction;
//   - bulk: GORM Updates of 10,000 rows captured BeforeAndAfter, against the
//     hand-written floor (the same UPDATE … RETURNING and one INSERT … SELECT
//     of the events into herald's table) and the plain Updates;
//   - latency from commit to delivery at a steady rate: herald with the
//     in-process wakeup, with the wakeup and DeleteOnPublish, polling only;
//     River at defaults and tuned — p50/p99 over the whole run and over its
//     first and last fifth (drift).
//
// It is a module of its own so that herald's users never download the
// peers. Run from this directory:
//
//	go run . -out results.md
//
// HERALD_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test)
// points it at a server; it works in a schema of its own, dropped at the end.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
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
}

// result is one case's figures over the rounds.
type result struct {
	section, name, unit string
	values              []float64
	extra               []string // per-round notes (latency windows)
}

func main() {
	var (
		dsn      = flag.String("dsn", envOr("HERALD_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN")
		rounds   = flag.Int("rounds", 3, "interleaved rounds")
		events   = flag.Int("events", 100000, "events per drain")
		writes   = flag.Int("writes", 1000, "writes per producer measurement")
		bulkRows = flag.Int("bulk-rows", 10000, "rows per bulk update")
		rate     = flag.Int("rate", 500, "events per second in the latency runs")
		latDur   = flag.Duration("latency-duration", 30*time.Second, "length of each latency run")
		sections = flag.String("sections", "drain,producer,bulk,latency", "what to measure")
		out      = flag.String("out", "peerbench-results.md", "Markdown file written")
	)
	flag.BoolVar(&unorderedIdx, "unordered-idx", true, "create herald_outbox_pending_unordered_idx (the next schema version) on herald's table")
	flag.Parse()
	ctx := context.Background()
	schema := "peerbench_" + randomHex(4)
	admin, err := sql.Open("pgx", *dsn)
	check(err)
	defer admin.Close()
	_, err = admin.ExecContext(ctx, `CREATE SCHEMA `+schema)
	check(err)
	defer func() { _, _ = admin.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) }()
	cfg := config{dsn: withParam(*dsn, "search_path", schema), events: *events, writes: *writes,
		bulkRows: *bulkRows, rate: *rate, latencyDur: *latDur}

	type kase struct {
		section, name, unit string
		run                 func(context.Context, config) (float64, string, error)
	}
	var cases []kase
	want := map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		want[s] = true
	}
	if want["drain"] {
		for _, c := range drainCases() {
			cases = append(cases, kase{"drain", c.name, "events/s", c.run})
		}
	}
	if want["producer"] {
		cases = append(cases, kase{"producer", "producer", "", nil}) // one case, several ratios per round
	}
	if want["bulk"] {
		cases = append(cases, kase{"bulk", "bulk", "", nil})
	}
	if want["latency"] {
		for _, c := range latencyCases() {
			cases = append(cases, kase{"latency", c.name, "ms", c.run})
		}
	}
	results := map[string]*result{}
	var order []string
	add := func(section, name, unit string, v float64, note string) {
		k := section + "/" + name
		r, ok := results[k]
		if !ok {
			r = &result{section: section, name: name, unit: unit}
			results[k] = r
			order = append(order, k)
		}
		r.values = append(r.values, v)
		if note != "" {
			r.extra = append(r.extra, note)
		}
	}
	var loads []string
	started := time.Now()
	for round := range *rounds {
		loads = append(loads, loadAvg())
		for _, c := range cases {
			log.Printf("round %d: %s %s", round+1, c.section, c.name)
			switch c.section {
			case "producer":
				rs, err := producerRound(ctx, cfg)
				check(err)
				for _, r := range rs {
					add("producer", r.name, r.unit, r.value, "")
				}
			case "bulk":
				rs, err := bulkRound(ctx, cfg)
				check(err)
				for _, r := range rs {
					add("bulk", r.name, r.unit, r.value, "")
				}
			case "latency":
				v, note, err := c.run(ctx, cfg)
				check(err)
				add(c.section, c.name+" p50", "ms", v, note)
			default:
				v, note, err := c.run(ctx, cfg)
				if err != nil {
					log.Printf("%s %s: %v", c.section, c.name, err)
					continue
				}
				add(c.section, c.name, c.unit, v, note)
			}
		}
	}
	loads = append(loads, loadAvg())

	var b strings.Builder
	fmt.Fprintf(&b, "# peerbench %s\n\n", started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Command: `go run . %s` (in integration/peerbench)\n\n", shellJoin(os.Args[1:]))
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %s; %s. Load average (1/5/15 min) at the start of each round and at the end: %s.\n\n",
		runtime.NumCPU(), cpuModel(), runtime.Version(), serverInfo(ctx, admin), strings.Join(loads, " → "))
	fmt.Fprintf(&b, "Versions: %s.\n\n", versions())
	fmt.Fprintf(&b, "%d interleaved rounds; median and range (min–max) of the rounds. herald_outbox_pending_unordered_idx created: %v. Session settings from the DSN: %s.\n\n",
		*rounds, unorderedIdx, dsnParams(*dsn))
	for _, sec := range []string{"drain", "producer", "bulk", "latency"} {
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
	check(os.WriteFile(*out, []byte(b.String()), 0o644))
	fmt.Print(b.String())
}

func sectionNote(sec string, cfg config) string {
	switch sec {
	case "drain":
		return fmt.Sprintf("Drain of %d pending events (~250-byte JSON payload) to a no-op handler, timed from start until the last event is acknowledged/marked. Each drain starts from a freshly filled table.", cfg.events)
	case "producer":
		return fmt.Sprintf("Time per write of %d writes, each in its own transaction, ÷ the time of a plain GORM Create of the same row in its own transaction, alternated write by write.", cfg.writes)
	case "bulk":
		return fmt.Sprintf("GORM `Updates` with a `Where` matching %d rows, in GORM's default transaction.", cfg.bulkRows)
	case "latency":
		return fmt.Sprintf("One event per transaction at %d ev/s for %s; commit → delivery handler. Notes: p99 of the whole run, and p50/p99 of the first and last fifth of it.", cfg.rate, cfg.latencyDur)
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
	if len(s) == 0 {
		return 0
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
			"github.com/jackc/pgx/v5", "gorm.io/gorm", "gorm.io/driver/postgres":
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

func serverInfo(ctx context.Context, db *sql.DB) string {
	var v, av, sc, sb string
	_ = db.QueryRowContext(ctx, `SELECT current_setting('server_version'), current_setting('autovacuum'),
		current_setting('synchronous_commit'), current_setting('shared_buffers')`).Scan(&v, &av, &sc, &sb)
	return fmt.Sprintf("PostgreSQL %s (autovacuum %s, synchronous_commit %s, shared_buffers %s)", v, av, sc, sb)
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

// dsnParams lists the DSN's query parameters other than sslmode (session
// settings such as jit=off).
func dsnParams(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "?"
	}
	q := u.Query()
	q.Del("sslmode")
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
