package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/sqltime"
)

// mysqlTries is how many times a MySQL statement (or transaction) that hit
// a deadlock or a lock wait timeout is run before its error is returned.
const mysqlTries = 3

// inMySQLTx runs f in a READ COMMITTED transaction, again (up to
// mysqlTries in all) when it ends in a deadlock or a lock wait timeout:
// InnoDB rolled the transaction back, nothing of it holds.
//
// READ COMMITTED, whatever the server's default (REPEATABLE READ): each
// statement reads what is committed when it runs, and a locking read
// locks the rows it returns and no gaps around them, so a lease does not
// block writers' inserts.
func (r *Relay) inMySQLTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	var err error
	for range mysqlTries {
		var tx *sql.Tx
		tx, err = r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if err = f(tx); err == nil {
			if err = tx.Commit(); err == nil {
				return nil
			}
		} else {
			_ = tx.Rollback()
		}
		if !mysqlTransient(err) || ctx.Err() != nil {
			return err
		}
		r.log.DebugContext(ctx, "herald/relay: MySQL deadlock or lock wait timeout; running the transaction again",
			slog.String("relay", r.cfg.Name), slog.Any("error", err))
	}
	return err
}

func (r *Relay) txQuery(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	q, args = mysqlArgs(q, args)
	return tx.QueryContext(ctx, q, args...)
}

func (r *Relay) txExec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	q, args = mysqlArgs(q, args)
	return tx.ExecContext(ctx, q, args...)
}

// mysqlNowArg is the database's now for a MySQL statement: NULL (the
// statement's UTC_TIMESTAMP(6)), or a test's dbClock.
func (r *Relay) mysqlNowArg() any {
	if r.dbClock != nil {
		return r.dbClock().UTC()
	}
	return nil
}

// leaseMySQL leases the next batch on MySQL, in one READ COMMITTED
// transaction (sql_mysql.go has the statements and why they keep per-key
// order): the candidates from bounded sources — the first pending events,
// the first unordered ones and, after a short lease, the heads of up to
// BatchSize keys walked through {base}_pending_key_idx — checked against
// every predicate by a plain read; the first BatchSize of them locked FOR
// UPDATE SKIP LOCKED by primary key and checked again; after a lease that
// held keyed events, runs of their keys behind the heads (sharing
// BatchSize, as leaseRunsPostgres); then one UPDATE leasing what was
// kept. A lease reads O(BatchSize) index entries and rows however large
// the backlog, and however much of it waits behind a few keys held back.
// The lease's times are the database's clock (UTC_TIMESTAMP(6)).
func (r *Relay) leaseMySQL(ctx context.Context) ([]*envelope.Event, []error, error) {
	ctx, cancel := withTimeout(ctx, r.statementTimeout(), "lease query")
	defer cancel()
	runs := r.runs.Load()
	walk := r.walk.Load()
	form := 0
	if walk > 0 {
		form = 1
		if r.walkAfter != "" {
			form = 2
		}
	}
	unordered := 1
	if r.noUnordered {
		unordered = 0
	}
	query := r.my.candidates[unordered][form]
	var got []leased
	var walkedTo string // the walk's last key, when it visited walk keys
	err := r.inMySQLTx(ctx, func(tx *sql.Tx) error {
		got, walkedTo = got[:0], ""
		args := append([]any{r.mysqlNowArg(), 2 * r.cfg.BatchSize, walk, r.walkAfter, r.cfg.Lease.Microseconds(), r.cfg.BatchSize}, r.fargs...)
		var seqs []int64
		var err error
		seqs, walkedTo, err = r.mysqlCandidates(ctx, tx, query, args)
		if err != nil || len(seqs) == 0 {
			return err
		}
		heads, end, err := r.mysqlLock(ctx, tx, r.my.lockHeads, seqs, args)
		if err != nil || len(heads) == 0 {
			return err
		}
		got = heads
		if runs {
			followers, err := r.mysqlRuns(ctx, tx, heads, args)
			if err != nil {
				return err
			}
			got = append(got, followers...)
		}
		kept := make([]int64, len(got))
		for i, l := range got {
			kept[i] = l.e.Sequence
			l.e.LeaseUntil = heads[0].e.LeaseUntil // one end for the batch: the heads' statement's
		}
		_, err = tx.ExecContext(ctx, strings.Replace(r.my.update, "{seqs}", seqList(kept), 1), end, r.cfg.Name)
		return err
	})
	if err != nil {
		return nil, nil, stmtErr(ctx, "lease query", err)
	}
	if walk > 0 {
		r.walkAfter = walkedTo
	}
	r.afterLease(got, runs, false, false)
	// The unordered source after a full lease of unordered events only
	// (see leaseCandidatesMySQL) is not needed.
	r.noUnordered = len(got) == r.cfg.BatchSize
	for _, l := range got {
		r.noUnordered = r.noUnordered && l.e.OrderingKey == ""
	}
	slices.SortFunc(got, func(a, b leased) int { return cmp.Compare(a.e.Sequence, b.e.Sequence) })
	batch := make([]*envelope.Event, len(got))
	errs := make([]error, len(got))
	for i, l := range got {
		batch[i], errs[i] = l.e, l.err
		if l.err != nil {
			r.log.WarnContext(ctx, "herald/relay: leased an event it cannot decode; recording it as the event's failure",
				slog.String("relay", r.cfg.Name), slog.Int64("sequence", l.e.Sequence), slog.Any("error", l.err))
		}
	}
	return batch, errs, nil
}

// mysqlCandidates runs the lease's first statement (leaseCandidatesMySQL)
// in tx: the candidates' sequences, in order, and the walk's last key when
// it visited all the keys it could.
func (r *Relay) mysqlCandidates(ctx context.Context, tx *sql.Tx, query string, args []any) ([]int64, string, error) {
	rows, err := r.txQuery(ctx, tx, query, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var seqs []int64
	var last string
	for rows.Next() {
		var s sql.NullInt64
		var walked sql.NullString
		if err := rows.Scan(&s, &walked); err != nil {
			return nil, "", err
		}
		if s.Valid {
			seqs = append(seqs, s.Int64)
		} else {
			last = walked.String
		}
	}
	return seqs, last, rows.Err()
}

// mysqlLock runs leaseLockMySQL (query: the heads' or the followers'
// form) over seqs in tx: the events it locked, each with pos 1, and the
// lease's end as text. An event whose sequence cannot be read fails the
// lease (the transaction rolls back: nothing leased).
func (r *Relay) mysqlLock(ctx context.Context, tx *sql.Tx, query string, seqs []int64, args []any) ([]leased, string, error) {
	rows, err := r.txQuery(ctx, tx, strings.Replace(query, "{seqs}", seqList(seqs), 1), args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	sc := newLeaseScanner(r.extra, r.cfg.Name, true)
	var end string
	sc.dest = append(sc.dest, &end)
	var out []leased
	for rows.Next() {
		e, err := sc.scan(rows)
		if e == nil {
			return nil, "", err
		}
		out = append(out, leased{e, err, 1})
	}
	return out, end, rows.Err()
}

// mysqlRuns takes, behind each keyed head of heads (locked by tx), the
// events that follow it in its key: the run, cut at the first event that
// is not leasable or that another transaction holds. The runs share what
// BatchSize leaves after the heads, as in leaseRunsPostgres. The plan (a
// plain read: each key's first unpublished events, one index range per
// key) gives every follower its position; the locking read drops what it
// cannot lease; each key keeps its positions 2, 3, … up to the first gap.
func (r *Relay) mysqlRuns(ctx context.Context, tx *sql.Tx, heads []leased, args []any) ([]leased, error) {
	var keyed []*envelope.Event
	for _, h := range heads {
		if h.e.OrderingKey != "" {
			keyed = append(keyed, h.e)
		}
	}
	if len(keyed) == 0 {
		return nil, nil
	}
	per := (r.cfg.BatchSize - len(heads)) / len(keyed)
	if per < 1 {
		return nil, nil
	}
	plan, err := r.mysqlRunsPlan(ctx, tx, keyed, per)
	if err != nil {
		return nil, err
	}
	pos := map[int64]int64{}
	var seqs []int64
	for _, h := range keyed {
		run := plan[h.OrderingKey]
		slices.Sort(run)
		if len(run) < 2 || run[0] != h.Sequence {
			continue // no followers (or the head is not first: take none)
		}
		for i, s := range run[1:] {
			pos[s] = int64(i) + 2
			seqs = append(seqs, s)
		}
	}
	if len(seqs) == 0 {
		return nil, nil
	}
	slices.Sort(seqs)
	locked, _, err := r.mysqlLock(ctx, tx, r.my.lockFollowers, seqs, args)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(locked, func(a, b leased) int { return cmp.Compare(a.e.Sequence, b.e.Sequence) })
	next := map[string]int64{}
	var out []leased
	for _, l := range locked {
		k := l.e.OrderingKey
		want := next[k] + 2
		if next[k] < 0 || pos[l.e.Sequence] != want {
			next[k] = -1 // a gap: nothing more of this key (left locked, not leased, until commit)
			continue
		}
		next[k]++
		l.pos = want
		out = append(out, l)
	}
	return out, nil
}

// mysqlRunsPlan reads, for each keyed head, its key's first per+1
// unpublished events in sequence order (leaseRunsPlanMySQL, one part per
// key): the head and the followers a run may take.
func (r *Relay) mysqlRunsPlan(ctx context.Context, tx *sql.Tx, keyed []*envelope.Event, per int) (map[string][]int64, error) {
	parts := make([]string, len(keyed))
	args := make([]any, 0, 2*len(keyed))
	for i, h := range keyed {
		parts[i] = r.my.runsPlan
		args = append(args, h.OrderingKey, per+1)
	}
	rows, err := tx.QueryContext(ctx, strings.Join(parts, "\nUNION ALL\n"), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	plan := map[string][]int64{}
	for rows.Next() {
		var k string
		var s int64
		if err := rows.Scan(&k, &s); err != nil {
			return nil, err
		}
		plan[k] = append(plan[k], s)
	}
	return plan, rows.Err()
}

// seqList is sequences as a literal SQL list: they are integers the
// database gave, so they need no binding (and a batch binds none of them).
func seqList(seqs []int64) string {
	var b strings.Builder
	for i, s := range seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s, 10))
	}
	return b.String()
}

// renewMySQL is renew on MySQL: the guarded UPDATE, then the sequences it
// still held, in one transaction.
func (r *Relay) renewMySQL(ctx context.Context, seqs string) (map[int64]bool, error) {
	c, cancel := withTimeout(ctx, r.statementTimeout(), "lease renewal")
	defer cancel()
	held := map[int64]bool{}
	err := r.inMySQLTx(c, func(tx *sql.Tx) error {
		clear(held)
		args := []any{r.cfg.Lease.Microseconds(), seqs, r.cfg.Name, r.mysqlNowArg()}
		if _, err := r.txExec(c, tx, r.sql.renew, args...); err != nil {
			return err
		}
		rows, err := r.txQuery(c, tx, r.my.renewed, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s int64
			if err := rows.Scan(&s); err != nil {
				return err
			}
			held[s] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, stmtErr(c, "lease renewal", err)
	}
	return held, nil
}

// markFailedMySQL is markFailed on MySQL: the guarded UPDATE, then the
// failures it recorded and their next attempts, in one transaction.
func (r *Relay) markFailedMySQL(ctx context.Context, failures []failure) (map[int64]sqltime.NullTime, error) {
	doc, err := json.Marshal(failures)
	if err != nil {
		return nil, fmt.Errorf("herald/relay: mark failed: %w", err)
	}
	seqs := make([]*envelope.Event, len(failures))
	for i := range failures {
		seqs[i] = failures[i].event
	}
	recorded := make(map[int64]sqltime.NullTime, len(failures))
	err = r.inMySQLTx(ctx, func(tx *sql.Tx) error {
		clear(recorded)
		if _, err := r.txExec(ctx, tx, r.sql.markFailed, string(doc), r.cfg.Name, r.mysqlNowArg()); err != nil {
			return err
		}
		rows, err := r.txQuery(ctx, tx, r.my.markedFailed, r.seqArg(seqs), r.cfg.Name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s int64
			var next sqltime.NullTime
			if err := rows.Scan(&s, &next); err != nil {
				return err
			}
			recorded[s] = next
		}
		return rows.Err()
	})
	if err != nil {
		return nil, stmtErr(ctx, "mark failed", err)
	}
	return recorded, nil
}

// retryBatchMySQL is retryBatch on MySQL: one batch of dead events
// selected and locked, then revived, in one transaction.
func (r *Relay) retryBatchMySQL(ctx context.Context, q string, args []any, topics interface{ Add(...string) }) (int64, error) {
	var n int64
	var names []string
	err := r.inMySQLTx(ctx, func(tx *sql.Tx) error {
		var seqs string
		var err error
		seqs, names, err = r.deadBatchMySQL(ctx, tx, q, args)
		if err != nil {
			return err
		}
		n = int64(len(names))
		if n == 0 {
			return nil
		}
		_, err = r.txExec(ctx, tx, r.my.revive, seqs)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("herald/relay: retry dead-lettered: %w", err)
	}
	topics.Add(names...)
	return n, nil
}

// deadBatchMySQL runs retryBatchMySQL's selection in tx: the sequences as
// a JSON array, and each event's topic.
func (r *Relay) deadBatchMySQL(ctx context.Context, tx *sql.Tx, q string, args []any) (string, []string, error) {
	rows, err := r.txQuery(ctx, tx, q, args...)
	if err != nil {
		return "", nil, err
	}
	defer rows.Close()
	var b strings.Builder
	var names []string
	b.WriteByte('[')
	for rows.Next() {
		var s int64
		var topic string
		if err := rows.Scan(&s, &topic); err != nil {
			return "", nil, err
		}
		if len(names) > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, s)
		names = append(names, topic)
	}
	b.WriteByte(']')
	return b.String(), names, rows.Err()
}
