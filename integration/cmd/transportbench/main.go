// Command transportbench measures how fast a relay drains an outbox table
// on PostgreSQL into Kafka (franz-go's in-process kfake cluster) and into
// Redis Streams (the machine's Redis), as a fraction of the same drain
// into a no-op BatchDelivery. Each drain into a transport is paired with a
// no-op drain just before it, and the ratio is taken per pair, so drift in
// the machine's load between pairs cancels out; the median of the pairs'
// ratios is reported. It prints a Markdown table for BENCHMARKS.md.
//
//	go run ./integration/cmd/transportbench                        # defaults
//	go run ./integration/cmd/transportbench -events 20000 -rounds 7 -batch 100,1000
//	go run ./integration/cmd/transportbench -targets noop,nats,river,redis   # NATS JetStream, River jobs
//
// HERALD_POSTGRES_DSN and HERALD_REDIS_URL point it at servers
// (defaults: the machine's); it works in a schema of its own, dropped at
// the end, and a stream of its own, deleted after each drain.
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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/delivery/redisstream"
	"github.com/heraldgo/herald/integration/relaybench"
)

// topic is the Kafka topic of the events relaybench.Fill writes
// (library.loan.updated): the delivery's default, their aggregate
// (delivery.ByAggregate).
const topic = "library.loan"

func main() {
	var (
		dsn        = flag.String("dsn", envOr("HERALD_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN")
		redisURL   = flag.String("redis", envOr("HERALD_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL")
		events     = flag.Int("events", 50000, "events per drain")
		rounds     = flag.Int("rounds", 5, "pairs of drains (no-op, transport) per target and batch size")
		batches    = flag.String("batch", "100,1000", "relay batch sizes")
		keyCount   = flag.Int("keys", 0, "spread events over this many ordering keys (0 = unordered)")
		targets    = flag.String("targets", "noop,kafka,redis", "what the relay delivers to: noop, kafka, redis, nats (JetStream), river (jobs in the outbox's database)")
		natsURL    = flag.String("nats", envOr("HERALD_NATS_URL", "nats://127.0.0.1:4222"), "NATS URL (a server with JetStream)")
		partitions = flag.Int("partitions", 6, "partitions of the kfake topic")
	)
	flag.Parse()
	ctx := context.Background()
	schema := "transportbench_" + randomHex(4)
	admin, err := sql.Open("pgx", *dsn)
	check(err)
	defer admin.Close()
	_, err = admin.ExecContext(ctx, `CREATE SCHEMA `+schema)
	check(err)
	defer func() { _, _ = admin.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) }()
	db, err := sql.Open("pgx", withParam(*dsn, "search_path", schema))
	check(err)
	defer db.Close()

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(*partitions), topic))
	check(err)
	defer cluster.Close()
	kd, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs()})
	check(err)
	defer kd.Close()
	opt, err := redis.ParseURL(*redisURL)
	check(err)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	stream := "transportbench-" + randomHex(4)
	defer rdb.Del(context.Background(), stream)
	rd, err := redisstream.New(redisstream.Config{Client: rdb, Stream: stream})
	check(err)

	deliveries := map[string]delivery.Delivery{"noop": relaybench.NoopBatch{}, "kafka": kd, "redis": rd}
	names := strings.Split(*targets, ",")
	// After each drain into it, a target's destination is emptied.
	reset := map[string]func(){"redis": func() { check(rdb.Del(ctx, stream).Err()) }}
	if slices.Contains(names, "nats") {
		nd, purge, closeNATS := natsTarget(ctx, *natsURL, "transportbench-"+randomHex(4))
		defer closeNATS()
		deliveries["nats"], reset["nats"] = nd, purge
	}
	if slices.Contains(names, "river") {
		deliveries["river"], reset["river"] = riverTarget(ctx, db)
	}
	for _, n := range names {
		if deliveries[n] == nil {
			log.Fatalf("unknown target %q (have noop, kafka, redis, nats, river)", n)
		}
	}

	fmt.Printf("# transportbench %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("machine: %d CPUs, GOMAXPROCS %d, %s; kfake in process (%d partitions), Redis at %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), *partitions, opt.Addr)
	fmt.Printf("events per drain: %d (%s), one relay, %d pairs (no-op drain, then the transport's) per row, each drain on a freshly filled table\n\n", *events, orderedness(*keyCount), *rounds)
	fmt.Println("| batch | target | events/s (median) | no-op events/s (median of its pairs) | ratio to no-op (median of pairs) | ratios of all pairs |")
	fmt.Println("|---:|---|---:|---:|---:|---|")
	drain := func(b int, d delivery.Delivery) float64 {
		check(relaybench.Reset(ctx, db, "herald_outbox"))
		check(relaybench.Fill(ctx, db, "herald_outbox", *events, *keyCount))
		_, err := db.ExecContext(ctx, `CHECKPOINT`)
		check(err)
		elapsed, err := relaybench.DrainWith(ctx, db, "herald_outbox", *events, b, 1, d)
		check(err)
		return float64(*events) / elapsed.Seconds()
	}
	for _, b := range ints(*batches) {
		rates, base, ratios := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for range *rounds {
			for _, n := range names {
				if n == "noop" {
					continue
				}
				r0 := drain(b, relaybench.NoopBatch{})
				r := drain(b, deliveries[n])
				if f := reset[n]; f != nil {
					f()
				}
				rates[n] = append(rates[n], r)
				base[n] = append(base[n], r0)
				ratios[n] = append(ratios[n], r/r0)
			}
		}
		for _, n := range names {
			if n == "noop" {
				continue
			}
			fmt.Printf("| %d | %s | %.0f | %.0f | **%.2f** | %s |\n", b, n, median(rates[n]), median(base[n]), median(ratios[n]), spread2(ratios[n]))
		}
	}
}

func spread2(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(parts, ", ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
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

func orderedness(keys int) string {
	if keys == 0 {
		return "unordered"
	}
	return fmt.Sprintf("over %d ordering keys", keys)
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
