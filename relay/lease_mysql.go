package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/heraldgo/herald/envelope"
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
// transaction: the candidates are selected FOR UPDATE SKIP LOCKED (rows
// another relay is leasing are passed over, not waited for), leased by a
// guarded UPDATE of exactly those rows, and read back. The lease's times
// are the database's clock (UTC_TIMESTAMP(6)).
//
// It leases no runs of a key and walks no keys (the PostgreSQL lease's
// bounded candidate sources): candidates come in sequence order from the
// pending index, so a backlog held back behind few keys costs a lease
// time in proportion to the backlog.
func (r *Relay) leaseMySQL(ctx context.Context) ([]*envelope.Event, []error, error) {
	ctx, cancel := withTimeout(ctx, r.statementTimeout(), "lease query")
	defer cancel()
	type leased struct {
		e   *envelope.Event
		err error
	}
	var got []leased
	err := r.inMySQLTx(ctx, func(tx *sql.Tx) error {
		got = got[:0]
		now := r.mysqlNowArg()
		args := append([]any{now, r.cfg.BatchSize}, r.fargs...)
		seqs, err := r.mysqlCandidates(ctx, tx, args)
		if err != nil {
			return err
		}
		if len(seqs) == 0 {
			return nil
		}
		in := "(" + strings.TrimSuffix(strings.Repeat("?,", len(seqs)), ",") + ")"
		upd := `UPDATE ` + r.table.Quoted + ` SET lease_until = DATE_ADD(COALESCE(?, UTC_TIMESTAMP(6)), INTERVAL ? MICROSECOND), leased_by = ?
WHERE published_at IS NULL AND sequence IN ` + in
		if _, err := tx.ExecContext(ctx, upd, append([]any{now, r.cfg.Lease.Microseconds(), r.cfg.Name}, seqs...)...); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+r.leaseColumns()+` FROM `+r.table.Quoted+` WHERE leased_by = ? AND sequence IN `+in, append([]any{r.cfg.Name}, seqs...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		sc := newLeaseScanner(r.extra, r.cfg.Name, true)
		for rows.Next() {
			e, err := sc.scan(rows)
			if e == nil {
				return err // the transaction rolls back: nothing leased
			}
			got = append(got, leased{e, err})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, nil, stmtErr(ctx, "lease query", err)
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

// leaseColumns is what a lease returns: leaseColumns and the extras.
func (r *Relay) leaseColumns() string {
	s := leaseColumns
	for _, c := range r.extra {
		s += ", " + r.dialect.QuoteIdent(c)
	}
	return s
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
func (r *Relay) markFailedMySQL(ctx context.Context, failures []failure) (map[int64]envelope.NullTime, error) {
	doc, err := json.Marshal(failures)
	if err != nil {
		return nil, fmt.Errorf("herald/relay: mark failed: %w", err)
	}
	seqs := make([]*envelope.Event, len(failures))
	for i := range failures {
		seqs[i] = failures[i].event
	}
	recorded := make(map[int64]envelope.NullTime, len(failures))
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
			var next envelope.NullTime
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

// mysqlCandidates runs the lease's candidate statement in tx and returns
// the sequences it found.
func (r *Relay) mysqlCandidates(ctx context.Context, tx *sql.Tx, args []any) ([]any, error) {
	rows, err := r.txQuery(ctx, tx, r.my.candidates, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var seqs []any
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		seqs = append(seqs, s)
	}
	return seqs, rows.Err()
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
