// Command lockskip measures what a lease by lock (relay.Config.LeaseByLock)
// pays to step over a batch that another relay holds: the relay's lease
// of unordered events by lock, 1,000 rows, run 30 times in a rolled-back
// transaction on a table of 20,000 pending events whose first 1,000 are
// free ("none"), leased by a written lease_until ("leased": the predicate
// steps over them), or locked by another open transaction ("locked": SKIP
// LOCKED tries each row's lock first). It prints each case's median and
// 10th and 90th percentiles; the cases alternate, twice each.
//
//	go run ./integration/cmd/lockskip
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/heraldgo/herald/integration/relaybench"
)

const table = "lockskip.herald_outbox"

// lockSQL is the relay's lease of unordered events by lock in substance:
// the same predicates, order, limit and locking clause.
const lockSQL = `SELECT sequence, id, topic, payload, headers FROM lockskip.herald_outbox e
WHERE e.published_at IS NULL AND e.ordering_key IS NULL AND e.dead_lettered_at IS NULL
  AND (e.lease_until IS NULL OR e.lease_until < now())
  AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= now())
  AND e.sequence >= 0
ORDER BY e.sequence LIMIT 1000 FOR UPDATE OF e SKIP LOCKED`

func main() {
	dsn := flag.String("dsn", envOr("HERALD_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN")
	flag.Parse()
	ctx := context.Background()
	db, err := sql.Open("pgx", *dsn)
	check(err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS lockskip`)
	check(err)
	defer func() { _, _ = db.ExecContext(ctx, `DROP SCHEMA lockskip CASCADE`) }()
	for _, mode := range []string{"none", "leased", "locked", "none", "leased", "locked"} {
		check(relaybench.Reset(ctx, db, table))
		check(relaybench.Fill(ctx, db, table, 20000, 0))
		var holder *sql.Tx
		switch mode {
		case "leased":
			_, err := db.ExecContext(ctx, `UPDATE lockskip.herald_outbox SET lease_until = now() + interval '1 hour', leased_by = 'a' WHERE sequence <= 1000`)
			check(err)
		case "locked":
			holder, err = db.BeginTx(ctx, nil)
			check(err)
			if n := lease(ctx, holder); n != 1000 {
				log.Fatalf("the holder locked %d rows, want 1000", n)
			}
		}
		var ms []float64
		for range 30 {
			tx, err := db.BeginTx(ctx, nil)
			check(err)
			t0 := time.Now()
			n := lease(ctx, tx)
			ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
			check(tx.Rollback())
			if n != 1000 {
				log.Fatalf("%s: the lease locked %d rows, want 1000", mode, n)
			}
		}
		if holder != nil {
			check(holder.Rollback())
		}
		slices.Sort(ms)
		fmt.Printf("%-6s median %.2f ms, p10 %.2f, p90 %.2f\n", mode, ms[15], ms[3], ms[27])
	}
}

func lease(ctx context.Context, tx *sql.Tx) int {
	rows, err := tx.QueryContext(ctx, lockSQL)
	check(err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	check(rows.Err())
	return n
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
