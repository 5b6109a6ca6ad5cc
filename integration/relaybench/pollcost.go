package relaybench

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

// UnorderedIndexDDL is the partial index the relay's lease reads its
// unordered candidates from ({base}_pending_unordered_idx). envelope.Migrate
// does not create it yet (it is planned as the next schema version); the
// benchmark creates it on its own table when asked to, so that the lease is
// measured as it will run.
const UnorderedIndexDDL = `CREATE INDEX IF NOT EXISTS herald_outbox_pending_unordered_idx ON herald_outbox (sequence)
WHERE published_at IS NULL AND ordering_key IS NULL`

// PollCost starts one relay (BatchSize batchSize, no-op delivery) on a
// table already holding a backlog spread over keys ordering keys, lets it
// run until it has delivered events events, and returns the mean time per
// poll: elapsed ÷ (events ÷ events per poll), where a poll leases
// min(keys, batchSize) events — one head per key. Every poll after a keyed
// batch runs at once, so the time is the lease, the delivery and the mark,
// back to back.
func PollCost(ctx context.Context, db *sql.DB, table string, events, keys, batchSize int) (time.Duration, error) {
	var delivered atomic.Int64
	done := make(chan struct{})
	obs := relay.ObserverFuncs{OnDelivered: func(context.Context, relay.Delivered) {
		if delivered.Add(1) == int64(events) {
			close(done)
		}
	}}
	r, err := relay.New(db, delivery.Func(func(context.Context, *envelope.Event) error { return nil }), relay.Config{
		Table: table, Dialect: envelope.Postgres, BatchSize: batchSize, Name: "pollcost",
		Observer: obs, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := r.Start(ctx); err != nil {
		return 0, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	elapsed := time.Since(start)
	_ = r.Stop(context.Background())
	if err != nil {
		return 0, err
	}
	perPoll := min(keys, batchSize)
	if keys == 0 {
		perPoll = batchSize
	}
	polls := events / perPoll
	if polls == 0 {
		return 0, errors.New("pollcost: fewer events than one poll")
	}
	return elapsed / time.Duration(polls), nil
}

// OldScanLease times one lease written the way it was before the key walk
// (scan pending events in sequence order, skip the held-back ones one probe
// at a time, as the bare loop still does), in a transaction rolled back, with
// a statement timeout: it returns timeout itself when the statement did not
// finish.
func OldScanLease(ctx context.Context, db *sql.DB, table string, batchSize int, timeout time.Duration) (time.Duration, error) {
	t, err := envelope.ParseTable(envelope.Postgres, table)
	if err != nil {
		return 0, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL statement_timeout = `+itoa(int(timeout.Milliseconds()))); err != nil {
		return 0, err
	}
	q := replaceTable(bareLeaseSQL, t.Quoted)
	now := time.Now()
	start := time.Now()
	err = drainRows(tx.QueryContext(ctx, q, now.Add(time.Minute), "old", now, batchSize))
	d := time.Since(start)
	if err != nil {
		if d >= timeout {
			return timeout, nil
		}
		return 0, err
	}
	return d, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func replaceTable(q, quoted string) string { return strings.ReplaceAll(q, "{table}", quoted) }

// LeaseAfterHistory measures what a lease costs once history events have
// gone through the table: it fills history events, drains them with one
// relay (batch 1000) that marks them published — or deletes them, with
// deleteOnPublish — adds 10 pending events, and returns the cost of the
// bare loop's lease of them from EXPLAIN (ANALYZE, BUFFERS): the lease
// reads {base}_pending_idx in sequence order from its start, as the
// relay's first candidate source does, so every index entry a published
// or deleted row left there (until VACUUM removes it, or a scan marks it
// dead once no snapshot can see the row) is visited first. Autovacuum
// must be off for the figure to mean "before vacuum".
func LeaseAfterHistory(ctx context.Context, db *sql.DB, table string, history int, deleteOnPublish bool) (first, second Cost, err error) {
	second, err = leaseAfterHistory(ctx, db, table, history, deleteOnPublish, &first)
	return first, second, err
}

func leaseAfterHistory(ctx context.Context, db *sql.DB, table string, history int, deleteOnPublish bool, first *Cost) (Cost, error) {
	if err := Reset(ctx, db, table); err != nil {
		return Cost{}, err
	}
	t, err := envelope.ParseTable(envelope.Postgres, table)
	if err != nil {
		return Cost{}, err
	}
	if history > 0 {
		if err := Fill(ctx, db, table, history, 0); err != nil {
			return Cost{}, err
		}
		var delivered atomic.Int64
		done := make(chan struct{})
		r, err := relay.New(db, delivery.Func(func(context.Context, *envelope.Event) error { return nil }), relay.Config{
			Table: table, Dialect: envelope.Postgres, BatchSize: 1000, Name: "history", DeleteOnPublish: deleteOnPublish,
			Logger: slog.New(slog.DiscardHandler),
			Observer: relay.ObserverFuncs{OnDelivered: func(context.Context, relay.Delivered) {
				if delivered.Add(1) == int64(history) {
					close(done)
				}
			}},
		})
		if err != nil {
			return Cost{}, err
		}
		if err := r.Start(ctx); err != nil {
			return Cost{}, err
		}
		<-done
		if err := r.Stop(ctx); err != nil {
			return Cost{}, err
		}
	}
	q := `INSERT INTO ` + t.Quoted + ` (id, topic, payload, created_at)
SELECT gen_random_uuid(), 'fresh', '{}', now() FROM generate_series(1, 10)`
	if _, err := db.ExecContext(ctx, q); err != nil {
		return Cost{}, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return Cost{}, err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return Cost{}, err
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	lq := strings.NewReplacer("$1", "'"+now+"'::timestamptz + interval '1 minute'", "$2", "'probe'",
		"$3", "'"+now+"'::timestamptz", "$4", "100").Replace(replaceTable(bareLeaseSQL, t.Quoted))
	// Twice: the first scan may mark index entries dead (kill_prior_tuple)
	// when no snapshot can see their rows any more; the second shows what
	// every later poll pays.
	var c Cost
	for i := range 2 {
		var out string
		if err := tx.QueryRowContext(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+lq).Scan(&out); err != nil {
			return Cost{}, err
		}
		if c, err = parseExplain(out); err != nil {
			return Cost{}, err
		}
		if i == 0 {
			*first = c
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+t.Quoted+` SET lease_until = NULL WHERE topic = 'fresh'`); err != nil {
			return Cost{}, err
		}
	}
	return c, nil
}

// drainRows reads and closes the rows of a query.
func drainRows(rows *sql.Rows, err error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}
