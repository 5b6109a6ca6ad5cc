// Command mysqlbench measures herald's relay on MySQL or MariaDB: drain
// throughput of relays with a no-op delivery at several batch sizes and
// relay counts, beside a bare lease-and-mark loop on the same server and
// table (READ COMMITTED; SELECT … FOR UPDATE SKIP LOCKED of the oldest
// pending events, an UPDATE marking them published, COMMIT), the limit for
// the design. It prints a Markdown table for BENCHMARKS.md, with the
// machine's load average.
//
//	go run ./integration/cmd/mysqlbench                      # 10,000 events, 3 rounds
//	go run ./integration/cmd/mysqlbench -events 100000 -batch 1000 -relays 1,2
//	go run ./integration/cmd/mysqlbench -keys 0,16                 # unordered, then 16 ordering keys
//
// HERALD_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/, the machine's
// MariaDB) points it at a server; it works in a database of its own,
// dropped at the end.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

func main() {
	var (
		dsn     = flag.String("dsn", envOr("HERALD_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/"), "go-sql-driver/mysql DSN of the server")
		events  = flag.Int("events", 10000, "events per drain")
		rounds  = flag.Int("rounds", 3, "drains per configuration; the median is reported")
		batches = flag.String("batch", "100,1000", "batch sizes")
		relays  = flag.String("relays", "1,2", "relay (worker) counts")
		modes   = flag.String("modes", "bare,relay", "bare (the SQL loop), relay (herald's relay, delivery.Func no-op)")
		keys    = flag.String("keys", "0", "ordering keys the events are spread over, round-robin (0: unordered events)")
	)
	flag.Parse()
	ctx := context.Background()
	cfg, err := mysql.ParseDSN(*dsn)
	check(err)
	cfg.ParseTime = true
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	check(err)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "herald_bench_" + hex.EncodeToString(b)
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4")
	check(err)
	defer func() { _, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name) }()
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	check(err)
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	check(envelope.Migrate(ctx, db, envelope.MySQL, ""))
	var version string
	check(db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version))

	fmt.Printf("server %s, %d events per drain, median of %d, load average before: %s\n\n", version, *events, *rounds, loadavg())
	fmt.Println("| mode | keys | batch | relays | events/s |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, nk := range ints(*keys) {
		for _, bs := range ints(*batches) {
			for _, rc := range ints(*relays) {
				for _, mode := range strings.Split(*modes, ",") {
					var rates []float64
					for range *rounds {
						fill(ctx, db, *events, nk)
						start := time.Now()
						switch mode {
						case "bare":
							bare(ctx, db, bs, rc)
						case "relay":
							drainRelay(ctx, db, bs, rc, *events)
						default:
							log.Fatalf("unknown mode %q", mode)
						}
						rates = append(rates, float64(*events)/time.Since(start).Seconds())
						left := 0
						check(db.QueryRowContext(ctx, "SELECT count(*) FROM herald_outbox WHERE published_at IS NULL").Scan(&left))
						if left != 0 {
							log.Fatalf("%s: %d events left undelivered", mode, left)
						}
					}
					slices.Sort(rates)
					fmt.Printf("| %s | %d | %d | %d | %.0f |\n", mode, nk, bs, rc, rates[len(rates)/2])
				}
			}
		}
	}
	fmt.Printf("\nload average after: %s\n", loadavg())
}

// fill empties the table and writes n events: unordered, or spread
// round-robin over keys ordering keys.
func fill(ctx context.Context, db *sql.DB, n, keys int) {
	_, err := db.ExecContext(ctx, "TRUNCATE TABLE herald_outbox")
	check(err)
	w, err := envelope.NewWriter(envelope.MySQL, "")
	check(err)
	for i := 0; i < n; i += 1000 {
		var ms []envelope.Message
		for j := i; j < min(n, i+1000); j++ {
			m := envelope.Message{Topic: "bench.event", Payload: map[string]int{"i": j}}
			if keys > 0 {
				m.OrderingKey = "k" + strconv.Itoa(j%keys)
			}
			ms = append(ms, m)
		}
		_, err := w.Write(ctx, db, ms)
		check(err)
	}
}

// bare drains with workers lease-and-mark loops.
func bare(ctx context.Context, db *sql.DB, batch, workers int) {
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := bareOnce(ctx, db, batch)
				check(err)
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
}

func bareOnce(ctx context.Context, db *sql.DB, batch int) (int, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	seqs, err := leaseBare(ctx, tx, batch)
	if err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 0, tx.Commit()
	}
	j, _ := json.Marshal(seqs)
	if _, err := tx.ExecContext(ctx, `UPDATE herald_outbox t JOIN JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS j ON t.sequence = j.seq
SET t.published_at = UTC_TIMESTAMP(6)`, string(j)); err != nil {
		return 0, err
	}
	return len(seqs), tx.Commit()
}

// leaseBare selects and locks the next batch's sequences.
func leaseBare(ctx context.Context, tx *sql.Tx, batch int) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT sequence FROM herald_outbox
WHERE published_at IS NULL AND dead_lettered_at IS NULL ORDER BY sequence LIMIT ? FOR UPDATE SKIP LOCKED`, batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		seqs = append(seqs, s)
	}
	return seqs, rows.Err()
}

// drainRelay runs relays until the n events are published.
func drainRelay(ctx context.Context, db *sql.DB, batch, relays, n int) {
	done := make(chan struct{})
	var mu sync.Mutex
	got := 0
	d := delivery.Func(func(context.Context, *envelope.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got++
		if got == n {
			close(done)
		}
		return nil
	})
	var rs []*relay.Relay
	for i := range relays {
		r, err := relay.New(db, d, relay.Config{Name: "bench-" + strconv.Itoa(i), BatchSize: batch,
			MinPollInterval: time.Millisecond, MaxPollInterval: 50 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)})
		check(err)
		check(r.Start(ctx))
		rs = append(rs, r)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		log.Fatal("relay drain: not done in 10 minutes")
	}
	// The last batch's mark commits after its delivery: wait for it.
	for {
		left := 0
		check(db.QueryRowContext(ctx, "SELECT count(*) FROM herald_outbox WHERE published_at IS NULL").Scan(&left))
		if left == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for _, r := range rs {
		check(r.Stop(ctx))
	}
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

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
