// Command relaybench measures herald's relay on PostgreSQL, in one run on
// one table: drain throughput of relays with a no-op delivery at several
// batch sizes and relay counts, the same drain by a bare SQL
// lease-and-mark loop (the limit for the design), the share of HOT
// updates, and the statements an idle relay issues per hour with and
// without a wakeup. It prints Markdown tables for BENCHMARKS.md.
//
//	go run ./integration/cmd/relaybench                     # defaults
//	go run ./integration/cmd/relaybench -events 200000 -rounds 5
//	go run ./integration/cmd/relaybench -ddl default,first -batch 1000 -relays 1 -modes bare,relay
//	go run ./integration/cmd/relaybench -exec-modes cache_statement,exec -batch 1000 -relays 1
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
	"errors"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/integration/relaybench"
	"github.com/heraldgo/herald/relay"
)

// ddlVariants change the outbox table after envelope.Migrate, to try what
// keeps lease-and-mark cheap. "default" is envelope's DDL as is:
// fillfactor 50, the topic index partial on published_at IS NULL, the
// idempotency key's unique index partial, no index on id.
var ddlVariants = map[string][]string{
	"default": nil,
	// The lease's unordered candidates' index (schema version 3, not yet
	// created by envelope.Migrate).
	"unordered-idx": {relaybench.UnorderedIndexDDL},
	"ff100":         {`ALTER TABLE herald_outbox SET (fillfactor = 100)`},
	"ff85":          {`ALTER TABLE herald_outbox SET (fillfactor = 85)`},
	"ff70":          {`ALTER TABLE herald_outbox SET (fillfactor = 70)`},
	// The topic index over every row: a mark adds an entry to it.
	"topic-full": topicFull,
	// Unique constraints over every row on id and idempotency_key (NULLs
	// included), as first designed.
	"unique-full": uniqueFull,
	// The first DDL: fillfactor 85, both of the above.
	"first": append(append([]string{`ALTER TABLE herald_outbox SET (fillfactor = 85)`}, topicFull...), uniqueFull...),
}

var (
	topicFull = []string{
		`DROP INDEX IF EXISTS herald_outbox_topic_idx`,
		`CREATE INDEX herald_outbox_topic_idx ON herald_outbox (topic, sequence)`,
	}
	uniqueFull = []string{
		`DROP INDEX herald_outbox_idempotency_key_idx`,
		`ALTER TABLE herald_outbox ADD CONSTRAINT herald_outbox_idempotency_key_key UNIQUE (idempotency_key)`,
		`ALTER TABLE herald_outbox ADD CONSTRAINT herald_outbox_id_key UNIQUE (id)`,
	}
)

func main() {
	var (
		dsn       = flag.String("dsn", envOr("HERALD_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN")
		events    = flag.Int("events", 100000, "events per drain")
		rounds    = flag.Int("rounds", 3, "drains per configuration; the median is reported")
		batches   = flag.String("batch", "100,1000", "batch sizes")
		relays    = flag.String("relays", "1,2", "relay (worker) counts")
		modes     = flag.String("modes", "bare,relay,relay-batch", "what drains: bare (SQL loop), bare-asyncmark / bare-async (its mark / lease and mark with synchronous_commit off), relay (delivery.Func), relay-batch (a BatchDelivery), relay-async / relay-batch-async (the same with Config.AsyncCommit)")
		ddls      = flag.String("ddl", "default", "table variants: "+strings.Join(keys(ddlVariants), ","))
		execModes = flag.String("exec-modes", "", "pgx default_query_exec_mode values to compare (\"\" = pgx's default, cache_statement)")
		keyCount  = flag.Int("keys", 0, "spread events over this many ordering keys (0 = unordered)")
		idle      = flag.Bool("idle", true, "measure idle statements per hour")
		idleScale = flag.Float64("idle-scale", 100, "run the idle hour this many times faster (poll intervals divided by it)")
		costs     = flag.Bool("cost", true, "report WAL and buffers per leased-and-marked event of each table variant (EXPLAIN)")
		drains    = flag.Bool("drain", true, "measure drain throughput")
		params    = flag.String("set", "", "extra DSN parameters for the drains, k=v,k=v (e.g. synchronous_commit=off)")
		pollCost  = flag.String("poll-cost", "", "instead of the rest: per-poll cost on backlogs of these sizes (e.g. 10000,1000000)")
		pollKeys  = flag.String("poll-keys", "10,100000", "with -poll-cost: ordering keys the backlog is spread over")
		pollBatch = flag.Int("poll-batch", 100, "with -poll-cost: the relay's BatchSize")
		unordIdx  = flag.Bool("unordered-idx", true, "with -poll-cost: create {base}_pending_unordered_idx (schema version 3, not yet in envelope.Migrate)")
		history   = flag.String("history", "", "instead of the rest: lease cost after this many events were published (e.g. 0,50000,200000), marking them and deleting them (DeleteOnPublish)")
		oldScan   = flag.Duration("old-scan-timeout", 30*time.Second, "with -poll-cost: time one lease of the old sequence-order scan, up to this long (0 = skip)")
	)
	flag.Parse()
	ctx := context.Background()
	schema := "relaybench_" + randomHex(4)
	admin, err := sql.Open("pgx", *dsn)
	check(err)
	defer admin.Close()
	_, err = admin.ExecContext(ctx, `CREATE SCHEMA `+schema)
	check(err)
	defer func() { _, _ = admin.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) }()
	base := withParam(*dsn, "search_path", schema)
	drainDSN := base
	if *params != "" {
		for _, kv := range strings.Split(*params, ",") {
			k, v, _ := strings.Cut(kv, "=")
			drainDSN = withParam(drainDSN, k, v)
		}
		fmt.Printf("drain DSN parameters: %s\n\n", *params)
	}

	fmt.Printf("# relaybench %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("machine: %d CPUs (%s), GOMAXPROCS %d, %s; %s\n", runtime.NumCPU(), cpuModel(), runtime.GOMAXPROCS(0), runtime.Version(), serverVersion(ctx, admin))
	fmt.Printf("events per drain: %d (%s), median of %d drains, each on a freshly filled table\n\n", *events, orderedness(*keyCount), *rounds)

	if *history != "" {
		measureHistory(ctx, drainDSN, ints(*history))
		return
	}
	if *pollCost != "" {
		measurePollCost(ctx, drainDSN, ints(*pollCost), ints(*pollKeys), *pollBatch, *unordIdx, *oldScan)
		return
	}

	if *costs {
		fmt.Println("cost of lease and mark per event, batch 1000, from EXPLAIN (ANALYZE, BUFFERS, WAL) of the third batch:")
		fmt.Println()
		fmt.Println("| table | lease WAL records | lease WAL bytes | lease buffers | mark WAL records | mark WAL bytes | mark buffers | lease+mark µs |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, ddl := range strings.Split(*ddls, ",") {
			db, err := sql.Open("pgx", base)
			check(err)
			recreate(ctx, db, ddl)
			check(relaybench.Fill(ctx, db, "herald_outbox", 10000, *keyCount))
			l, m, err := relaybench.LeaseAndMarkCost(ctx, db, "herald_outbox", 1000)
			check(err)
			per := func(n int64) float64 { return float64(n) / 1000 }
			fmt.Printf("| %s | %.1f | %.0f | %.1f | %.1f | %.0f | %.1f | %.1f |\n", ddl, per(l.WALRecords), per(l.WALBytes), per(l.Buffers),
				per(m.WALRecords), per(m.WALBytes), per(m.Buffers), float64((l.Time+m.Time).Microseconds())/1000)
			_ = db.Close()
		}
		fmt.Println()
	}
	if !*drains {
		*ddls = ""
	}

	em := []string{""}
	if *execModes != "" {
		em = strings.Split(*execModes, ",")
	}
	fmt.Println("| table | exec mode | batch | workers | drain | events/s (median) | vs bare | all drains, events/s | HOT updates |")
	fmt.Println("|---|---|---:|---:|---|---:|---:|---|---:|")
	for _, ddl := range strings.Split(*ddls, ",") {
		if ddl == "" {
			continue
		}
		for _, mode := range em {
			d := drainDSN
			if mode != "" {
				d = withParam(base, "default_query_exec_mode", mode)
			}
			db, err := sql.Open("pgx", d)
			check(err)
			recreate(ctx, db, ddl)
			for _, b := range ints(*batches) {
				for _, w := range ints(*relays) {
					// Rounds interleave the modes, so drift in what else the
					// machine does spreads over all of them.
					ms := strings.Split(*modes, ",")
					rates := map[string][]float64{}
					hot := map[string]float64{}
					for range *rounds {
						for _, m := range ms {
							r, h := drain(ctx, db, m, *events, b, w, *keyCount)
							rates[m] = append(rates[m], r)
							hot[m] = h
						}
					}
					bare := 0.0
					for _, m := range ms {
						rate := median(rates[m])
						vs := "—"
						if m == "bare" {
							bare = rate
						} else if bare > 0 {
							vs = fmt.Sprintf("%.2f", rate/bare)
						}
						fmt.Printf("| %s | %s | %d | %d | %s | %.0f | %s | %s | %.0f%% |\n", ddl, orDefault(mode, "cache_statement"), b, w, m, rate, vs, spread(rates[m]), 100*hot[m])
					}
				}
			}
			_ = db.Close()
		}
	}

	if *idle {
		hour := time.Duration(float64(time.Hour) / *idleScale)
		fmt.Printf("\nidle relay, empty table, statements per hour (measured over %s with poll intervals divided by %.0f; model = the adaptive rule computed):\n\n", hour, *idleScale)
		fmt.Println("| relay | MinPollInterval | MaxPollInterval | measured / h | model, first hour | model, steady / h |")
		fmt.Println("|---|---:|---:|---:|---:|---:|")
		for _, wake := range []bool{false, true} {
			n, err := relaybench.IdleStatements(ctx, base, "herald_outbox", wake, *idleScale, hour)
			check(err)
			maxPoll, name := relay.DefaultMaxPollInterval, "no wakeup"
			if wake {
				maxPoll, name = relay.DefaultMaxPollIntervalWithWakeup, "with a wakeup"
			}
			first := relaybench.PollsIn(time.Hour, relay.DefaultMinPollInterval, maxPoll, relay.DefaultPollMultiplier)
			steady := float64(time.Hour) / float64(maxPoll)
			fmt.Printf("| %s | %s | %s | %d | %d | %.0f |\n", name, relay.DefaultMinPollInterval, maxPoll, n, first, steady)
		}
	}
}

// recreate creates the outbox table afresh in variant ddl.
func recreate(ctx context.Context, db *sql.DB, ddl string) {
	alter, ok := ddlVariants[ddl]
	if !ok {
		log.Fatalf("unknown -ddl %q (have %s)", ddl, strings.Join(keys(ddlVariants), ", "))
	}
	_, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS herald_outbox`)
	check(err)
	check(envelope.Migrate(ctx, db, envelope.Postgres, ""))
	for _, s := range alter {
		_, err := db.ExecContext(ctx, s)
		check(err)
	}
}

// drain fills the table, checkpoints (so every drain starts with the same
// full-page-write state), drains it once in mode and returns the rate
// (events/s) and the HOT share of the drain's updates.
func drain(ctx context.Context, db *sql.DB, mode string, n, batch, workers, keys int) (float64, float64) {
	check(relaybench.Reset(ctx, db, "herald_outbox"))
	check(relaybench.Fill(ctx, db, "herald_outbox", n, keys))
	_, err := db.ExecContext(ctx, `CHECKPOINT`)
	check(err)
	_, err = db.ExecContext(ctx, `SELECT pg_stat_reset_single_table_counters('herald_outbox'::regclass)`)
	check(err)
	var elapsed time.Duration
	switch mode {
	case "bare":
		elapsed, err = relaybench.DrainBare(ctx, db, "herald_outbox", n, batch, workers)
	case "bare-asyncmark":
		elapsed, err = relaybench.DrainBareAsync(ctx, db, "herald_outbox", n, batch, workers, false, true)
	case "bare-async":
		elapsed, err = relaybench.DrainBareAsync(ctx, db, "herald_outbox", n, batch, workers, true, true)
	case "relay-async", "relay-batch-async":
		elapsed, err = relaybench.DrainRelaysConfig(ctx, db, "herald_outbox", n, workers, mode == "relay-batch-async",
			relay.Config{BatchSize: batch, AsyncCommit: true})
	case "relay":
		elapsed, err = relaybench.DrainRelays(ctx, db, "herald_outbox", n, batch, workers, false)
	case "relay-batch":
		elapsed, err = relaybench.DrainRelays(ctx, db, "herald_outbox", n, batch, workers, true)
	default:
		log.Fatalf("unknown mode %q", mode)
	}
	check(err)
	// The pool's backends flush their statistics when they end, at most
	// once a second otherwise.
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(2)
	time.Sleep(1100 * time.Millisecond)
	hot, err := relaybench.HOTRatio(ctx, db, "herald_outbox")
	check(err)
	return float64(n) / elapsed.Seconds(), hot
}

func spread(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(parts, ", ")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		check(err)
		out = append(out, n)
	}
	return out
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func orderedness(keys int) string {
	if keys == 0 {
		return "unordered"
	}
	return fmt.Sprintf("over %d ordering keys", keys)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
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

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	if out, err := exec.Command("uname", "-m").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return runtime.GOARCH
}

func serverVersion(ctx context.Context, db *sql.DB) string {
	var v string
	if err := db.QueryRowContext(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "PostgreSQL ?"
	}
	return "PostgreSQL " + v
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func check(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// measurePollCost fills backlogs of each size on each key count and reports
// the relay's mean time per poll over 100 polls, next to one lease of the
// old sequence-order scan on the same table.
func measurePollCost(ctx context.Context, dsn string, sizes, keyCounts []int, batch int, unordIdx bool, oldTimeout time.Duration) {
	db, err := sql.Open("pgx", dsn)
	check(err)
	defer db.Close()
	fmt.Printf("per-poll cost, BatchSize %d, pending_unordered_idx %v; mean over 100 polls (lease + no-op delivery + mark)\n\n", batch, unordIdx)
	fmt.Println("| pending events | keys | events per poll | relay ms per poll | old scan, one lease ms |")
	fmt.Println("|---:|---:|---:|---:|---:|")
	for _, k := range keyCounts {
		for _, n := range sizes {
			check(relaybench.Reset(ctx, db, "herald_outbox"))
			if unordIdx {
				_, err := db.ExecContext(ctx, relaybench.UnorderedIndexDDL)
				check(err)
			}
			check(relaybench.Fill(ctx, db, "herald_outbox", n, k))
			_, err := db.ExecContext(ctx, `CHECKPOINT`)
			check(err)
			old := "skipped"
			if oldTimeout > 0 {
				d, err := relaybench.OldScanLease(ctx, db, "herald_outbox", batch, oldTimeout)
				check(err)
				old = fmt.Sprintf("%.1f", float64(d.Microseconds())/1000)
				if d >= oldTimeout {
					old = "> " + old
				}
			}
			per := min(k, batch)
			perPoll, err := relaybench.PollCost(ctx, db, "herald_outbox", 100*per, k, batch)
			check(err)
			fmt.Printf("| %d | %d | %d | %.2f | %s |\n", n, k, per, float64(perPoll.Microseconds())/1000, old)
		}
	}
}

// measureHistory reports the lease's cost on a table through which a
// history of events went, marked published or deleted on publish.
func measureHistory(ctx context.Context, dsn string, sizes []int) {
	db, err := sql.Open("pgx", dsn)
	check(err)
	defer db.Close()
	var horizon sql.NullString
	_ = db.QueryRowContext(ctx, `SELECT max(age(backend_xmin))::text FROM pg_stat_activity WHERE datname = current_database() AND backend_xmin IS NOT NULL`).Scan(&horizon)
	fmt.Printf("lease of 10 fresh events after a history of published events (EXPLAIN ANALYZE of the bare lease, run twice); oldest snapshot in the database at the start: %s transactions old\n\n", horizon.String)
	fmt.Println("| history events | on publish | lease buffers (1st run → 2nd) | lease ms (1st → 2nd) |")
	fmt.Println("|---:|---|---:|---:|")
	for _, n := range sizes {
		for _, del := range []bool{false, true} {
			c1, c, err := relaybench.LeaseAfterHistory(ctx, db, "herald_outbox", n, del)
			check(err)
			mode := "mark published"
			if del {
				mode = "delete (DeleteOnPublish)"
			}
			fmt.Printf("| %d | %s | %d → %d | %.2f → %.2f |\n", n, mode, c1.Buffers, c.Buffers,
				float64(c1.Time.Microseconds())/1000, float64(c.Time.Microseconds())/1000)
		}
	}
}
