package relaybench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

// payload is the body of every benchmark event: an envelope of a typical
// captured row (~250 bytes).
const payload = `{"model": "library.Loan", "operation": "updated", "pk": 7, "changed": ["status"], ` +
	`"before": {"id": 7, "status": "lent", "fee": "0.00", "reader_id": 3}, ` +
	`"after": {"id": 7, "status": "returned", "fee": "0.00", "reader_id": 3}, "occurred_at": "2026-10-06T12:00:00Z"}`

// Reset empties the outbox table (creating it if needed) and restarts its
// sequence, so every run starts from the same state.
func Reset(ctx context.Context, db *sql.DB, table string) error {
	if err := envelope.Migrate(ctx, db, envelope.Postgres, table); err != nil {
		return err
	}
	t, err := envelope.ParseTable(envelope.Postgres, table)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `TRUNCATE `+t.Quoted+` RESTART IDENTITY`)
	return err
}

// Fill inserts n events in one statement, then ANALYZEs the table. keys >
// 0 spreads them over that many ordering keys (round robin); 0 leaves
// them unordered.
func Fill(ctx context.Context, db *sql.DB, table string, n, keys int) error {
	t, err := envelope.ParseTable(envelope.Postgres, table)
	if err != nil {
		return err
	}
	key := "NULL"
	if keys > 0 {
		key = "'key-' || (i % " + strconv.Itoa(keys) + ")"
	}
	q := `INSERT INTO ` + t.Quoted + ` (id, topic, payload, headers, ordering_key, created_at)
SELECT gen_random_uuid(), 'library.loan.updated', $1::json, '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}', ` + key + `, now()
FROM generate_series(1, $2) AS s(i)`
	if _, err := db.ExecContext(ctx, q, payload, n); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE `+t.Quoted); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// DrainRelays starts relays relays with a no-op delivery (a plain
// delivery.Func, or a BatchDelivery when batch is true) on a table holding
// n pending events and returns how long they took to deliver and mark all
// of them.
func DrainRelays(ctx context.Context, db *sql.DB, table string, n, batchSize, relays int, batch bool) (time.Duration, error) {
	return DrainRelaysConfig(ctx, db, table, n, relays, batch, relay.Config{BatchSize: batchSize})
}

// DrainRelaysConfig is DrainRelays with more of the relays' Config (its
// Table, Dialect, Name, Observer and Logger are set here).
func DrainRelaysConfig(ctx context.Context, db *sql.DB, table string, n, relays int, batch bool, cfg relay.Config) (time.Duration, error) {
	var marked atomic.Int64
	done := make(chan struct{})
	obs := relay.ObserverFuncs{OnDelivered: func(context.Context, relay.Delivered) {
		if marked.Add(1) == int64(n) {
			close(done)
		}
	}}
	var d delivery.Delivery = delivery.Func(func(context.Context, *envelope.Event) error { return nil })
	if batch {
		d = noopBatch{}
	}
	var rs []*relay.Relay
	for i := range relays {
		c := cfg
		c.Table, c.Dialect, c.Name, c.Observer, c.Logger = table, envelope.Postgres, "bench-"+strconv.Itoa(i), obs, slog.New(slog.DiscardHandler)
		r, err := relay.New(db, d, c)
		if err != nil {
			return 0, err
		}
		rs = append(rs, r)
	}
	start := time.Now()
	for _, r := range rs {
		if err := r.Start(ctx); err != nil {
			return 0, err
		}
	}
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	elapsed := time.Since(start)
	for _, r := range rs {
		_ = r.Stop(context.Background())
	}
	return elapsed, err
}

type noopBatch struct{}

func (noopBatch) Deliver(context.Context, *envelope.Event) error { return nil }
func (noopBatch) DeliverBatch(context.Context, []*envelope.Event) []error {
	return nil
}
func (noopBatch) Close() error { return nil }

// The bare loop's statements: the relay's lease and mark, verbatim in
// substance (same predicates, same columns returned, same guards), with
// nothing around them.
const (
	bareLeaseSQL = `UPDATE {table} SET lease_until = $1, leased_by = $2
WHERE sequence = ANY(ARRAY(
    SELECT e.sequence FROM {table} e
    WHERE e.published_at IS NULL AND e.dead_lettered_at IS NULL
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= $3)
      AND (e.lease_until IS NULL OR e.lease_until < $3)
      AND (e.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM {table} p
            WHERE p.ordering_key = e.ordering_key AND p.published_at IS NULL AND p.sequence < e.sequence))
    ORDER BY e.sequence
    LIMIT $4
    FOR UPDATE SKIP LOCKED))
RETURNING ` + envelope.EventColumns
	bareMarkSQL = `UPDATE {table} SET published_at = $1
WHERE sequence = ANY($2::bigint[]) AND leased_by = $3 AND published_at IS NULL`
)

// BareStatements returns the bare loop's lease and mark for table. The
// lease's arguments are the lease's end, the lessee's name, now and the
// batch's size, and it returns envelope.EventColumns; the mark's are now,
// the leased sequences as a bigint[] literal and the lessee's name.
func BareStatements(table string) (lease, mark string, err error) {
	t, err := envelope.ParseTable(envelope.Postgres, table)
	if err != nil {
		return "", "", err
	}
	return strings.ReplaceAll(bareLeaseSQL, "{table}", t.Quoted), strings.ReplaceAll(bareMarkSQL, "{table}", t.Quoted), nil
}

// DrainBare drains n pending events with workers goroutines each running
// the bare lease-and-mark loop (lease a batch, read its rows, mark them
// published) until a lease comes back empty, and returns how long it took.
func DrainBare(ctx context.Context, db *sql.DB, table string, n, batchSize, workers int) (time.Duration, error) {
	return DrainBareAsync(ctx, db, table, n, batchSize, workers, false, false)
}

// asyncCond is appended to a statement's WHERE clause to run its
// transaction with synchronous_commit off (set_config(…, true) is SET
// LOCAL), as relay.Config.AsyncCommit does.
const asyncCond = "\n  AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL"

// DrainBareAsync is DrainBare with the lease's and/or the mark's
// transactions run with synchronous_commit off.
func DrainBareAsync(ctx context.Context, db *sql.DB, table string, n, batchSize, workers int, asyncLease, asyncMark bool) (time.Duration, error) {
	lease, mark, err := BareStatements(table)
	if err != nil {
		return 0, err
	}
	if asyncLease {
		lease = strings.Replace(lease, "\nRETURNING", asyncCond+"\nRETURNING", 1)
	}
	if asyncMark {
		mark += asyncCond
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			name := "bare-" + strconv.Itoa(w)
			var seqs strings.Builder
			for {
				k, err := LeaseBare(ctx, db, lease, name, batchSize, &seqs, nil)
				if err != nil {
					errs[w] = err
					return
				}
				if k == 0 {
					if total.Load() >= int64(n) {
						return
					}
					continue // another worker's rows are still leased
				}
				if _, err := db.ExecContext(ctx, mark, time.Now(), seqs.String(), name); err != nil {
					errs[w] = err
					return
				}
				total.Add(int64(k))
			}
		})
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// LeaseBare runs lease (the bare loop's, BareStatements) once as lessee
// name for up to batchSize events and reads its rows: the sequence
// scanned, the other columns as raw bytes. It writes the leased sequences
// to seqs as a bigint[] literal and, when ids is not nil, appends the
// events' ids to it. It returns how many events it leased once the lease
// has committed (its rows closed).
func LeaseBare(ctx context.Context, db *sql.DB, lease, name string, batchSize int, seqs *strings.Builder, ids *[]uuid.UUID) (int, error) {
	now := time.Now()
	rows, err := db.QueryContext(ctx, lease, now.Add(time.Minute), name, now, batchSize)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols := make([]any, 15)
	raw := make([]sql.RawBytes, 14)
	seqs.Reset()
	seqs.WriteByte('{')
	k := 0
	for rows.Next() {
		var s int64
		cols[0] = &s
		for i := range raw {
			cols[i+1] = &raw[i]
		}
		if err := rows.Scan(cols...); err != nil {
			return 0, err
		}
		if ids != nil {
			var id uuid.UUID
			if err := id.Scan([]byte(raw[0])); err != nil { // the id column
				return 0, fmt.Errorf("relaybench: event %d: id: %w", s, err)
			}
			*ids = append(*ids, id)
		}
		if k > 0 {
			seqs.WriteByte(',')
		}
		seqs.WriteString(strconv.FormatInt(s, 10))
		k++
	}
	seqs.WriteByte('}')
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return k, rows.Close()
}

// HOTRatio returns the share of the table's updates that were HOT (heap
// only: no new index entries), from pg_stat_user_tables, after waiting
// for the statistics to be flushed.
func HOTRatio(ctx context.Context, db *sql.DB, table string) (float64, error) {
	if _, err := db.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return 0, err
	}
	var upd, hot int64
	err := db.QueryRowContext(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE relid = to_regclass($1)`, table).Scan(&upd, &hot)
	if err != nil || upd == 0 {
		return 0, err
	}
	return float64(hot) / float64(upd), nil
}
