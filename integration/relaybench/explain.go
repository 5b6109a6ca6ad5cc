package relaybench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// Cost is what one statement did, from EXPLAIN (ANALYZE, BUFFERS, WAL):
// unlike a throughput it does not depend on what else the machine runs.
type Cost struct {
	WALRecords int64
	WALBytes   int64
	Buffers    int64 // shared blocks hit or read
	Time       time.Duration
}

// LeaseAndMarkCost leases and marks batches of batchSize on a table of
// pending events (at least 3 batches of them) with the bare loop's
// statements under EXPLAIN ANALYZE, and returns the cost of the third
// lease and mark: a steady state, past the first pages.
func LeaseAndMarkCost(ctx context.Context, db *sql.DB, table string, batchSize int) (lease, mark Cost, err error) {
	t, err := envelope.ParseTable(envelope.Postgres, table)
	if err != nil {
		return lease, mark, err
	}
	// Plain text (no placeholders) so EXPLAIN needs no parameter types; the
	// times are the same as bound ones.
	leaseQ := strings.ReplaceAll(bareLeaseSQL, "{table}", t.Quoted)
	markQ := strings.ReplaceAll(bareMarkSQL, "{table}", t.Quoted)
	conn, err := db.Conn(ctx)
	if err != nil {
		return lease, mark, err
	}
	defer conn.Close()
	for i := range 3 {
		now := time.Now().UTC().Format(time.RFC3339Nano)
		lq := strings.NewReplacer("$1", "'"+now+"'::timestamptz + interval '1 minute'", "$2", "'bench'",
			"$3", "'"+now+"'::timestamptz", "$4", strconv.Itoa(batchSize)).Replace(leaseQ)
		lease, err = explain(ctx, conn, lq)
		if err != nil {
			return lease, mark, err
		}
		lo, hi := int64(i*batchSize+1), int64((i+1)*batchSize)
		mq := strings.NewReplacer("$1", "'"+now+"'::timestamptz", "$2",
			fmt.Sprintf("ARRAY(SELECT generate_series(%d::bigint, %d::bigint))", lo, hi), "$3", "'bench'").Replace(markQ)
		mq = strings.Replace(mq, "::bigint[]", "", 1)
		mark, err = explain(ctx, conn, mq)
		if err != nil {
			return lease, mark, err
		}
	}
	return lease, mark, nil
}

func explain(ctx context.Context, conn *sql.Conn, q string) (Cost, error) {
	var out string
	if err := conn.QueryRowContext(ctx, `EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) `+q).Scan(&out); err != nil {
		return Cost{}, fmt.Errorf("explain: %w\n%s", err, q)
	}
	return parseExplain(out)
}

func parseExplain(out string) (Cost, error) {
	var plans []struct {
		Plan struct {
			WALRecords int64 `json:"WAL Records"`
			WALBytes   int64 `json:"WAL Bytes"`
			Hit        int64 `json:"Shared Hit Blocks"`
			Read       int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
		Execution float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) == 0 {
		return Cost{}, fmt.Errorf("explain output: %w", err)
	}
	p := plans[0]
	return Cost{WALRecords: p.Plan.WALRecords, WALBytes: p.Plan.WALBytes, Buffers: p.Plan.Hit + p.Plan.Read,
		Time: time.Duration(p.Execution * float64(time.Millisecond))}, nil
}
