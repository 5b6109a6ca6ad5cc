package admin

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/relay"
)

// DefaultBatchSize and MaxBatchSize bound BatchOptions.Size.
const (
	DefaultBatchSize = 1000
	MaxBatchSize     = 100000
)

// BatchOptions configures RetryBatches and DiscardBatches.
type BatchOptions struct {
	// Size is how many events one batch touches: 0 = DefaultBatchSize, at
	// most MaxBatchSize.
	Size int
	// Progress, when set, is called after each committed batch with the
	// running total.
	Progress func(done int64)
}

func (o BatchOptions) size() (int, error) {
	switch {
	case o.Size == 0:
		return DefaultBatchSize, nil
	case o.Size < 0 || o.Size > MaxBatchSize:
		return 0, outbox.Validationf("admin.BatchOptions.Size", "%d: want 1 to %d (0 means %d)", o.Size, MaxBatchSize, DefaultBatchSize)
	}
	return o.Size, nil
}

// Count returns how many events q selects (q.After counts, q.Limit does
// not). A bad q is an envelope.ErrValidation error, as for List.
func (a *Admin) Count(ctx context.Context, q Query) (int64, error) {
	s := &sqlArgs{d: a.d}
	w, err := a.where(q, s)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := a.db.QueryRowContext(ctx, `SELECT count(*) FROM `+a.t.Quoted+` e WHERE `+w, s.args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("herald/admin: count: %w", err)
	}
	return n, nil
}

// LastSequence is the highest sequence the table holds (0 when it is
// empty): where Follow starts to show only the events written after it.
func (a *Admin) LastSequence(ctx context.Context) (int64, error) {
	var n int64
	if err := a.db.QueryRowContext(ctx, `SELECT coalesce(max(sequence), 0) FROM `+a.t.Quoted).Scan(&n); err != nil {
		return 0, fmt.Errorf("herald/admin: last sequence: %w", err)
	}
	return n, nil
}

// RetryBatches makes the dead letters q selects due again, attempts reset,
// as Retry does, one batch of o.Size at a time: it reads the next batch's
// sequences by keyset (sequence > the last batch's, through the primary
// key, so a batch costs the same at the millionth event as at the first)
// and retries them through relay.Relay.RetryDeadLettered by sequence — one
// committed statement while o.Size is at most the relay's
// CleanupBatchSize (the Admin's own relay takes MaxBatchSize). It returns
// how many events it revived, also when it stops on an error or when ctx
// ends: the batches before are committed, the one in hand is rolled back,
// so running it again with the same q continues where it stopped.
func (a *Admin) RetryBatches(ctx context.Context, q Query, o BatchOptions) (int64, error) {
	if err := deadOnly(q, "RetryBatches"); err != nil {
		return 0, err
	}
	size, err := o.size()
	if err != nil {
		return 0, err
	}
	q.State = StateDead
	after := q.After
	var total int64
	defer func() {
		a.log.InfoContext(context.WithoutCancel(ctx), "herald/admin: retried dead letters", slog.String("table", a.t.Name),
			slog.Int64("retried", total), slog.String("query", q.String()))
	}()
	for {
		page := q
		page.After = after
		s := &sqlArgs{d: a.d}
		w, err := a.where(page, s)
		if err != nil {
			return total, err
		}
		seqs, err := a.sequences(ctx, `SELECT e.sequence FROM `+a.t.Quoted+` e WHERE `+w+` ORDER BY e.sequence LIMIT `+s.add(size), s.args...)
		if err != nil {
			return total, fmt.Errorf("herald/admin: retry: %w", err)
		}
		if len(seqs) == 0 {
			return total, nil
		}
		n, err := a.r.RetryDeadLettered(ctx, relay.Filter{Sequences: seqs})
		total += n
		if err != nil {
			return total, fmt.Errorf("herald/admin: retry: %w", err)
		}
		if o.Progress != nil {
			o.Progress(total)
		}
		if len(seqs) < size {
			return total, nil
		}
		after = seqs[len(seqs)-1]
	}
}

// DiscardBatches deletes the dead letters q selects, as Discard does, one
// batch of o.Size at a time, each one statement (committed on its own)
// that takes the next batch by keyset. It returns how many it deleted,
// also when it stops on an error or when ctx ends: the batches before are
// committed, the one in hand is rolled back, and running it again with the
// same q continues.
func (a *Admin) DiscardBatches(ctx context.Context, q Query, o BatchOptions) (int64, error) {
	if err := deadOnly(q, "DiscardBatches"); err != nil {
		return 0, err
	}
	size, err := o.size()
	if err != nil {
		return 0, err
	}
	q.State = StateDead
	if _, err := a.where(q, &sqlArgs{d: a.d}); err != nil {
		return 0, err
	}
	after := q.After
	var total int64
	defer func() { a.logDiscard(context.WithoutCancel(ctx), q, total) }()
	for {
		page := q
		page.After = after
		s := &sqlArgs{d: a.d}
		w, err := a.where(page, s)
		if err != nil {
			return total, err
		}
		lim := s.add(size)
		var stmt string
		if a.d == envelope.MySQL {
			seqs, err := a.discardMySQL(ctx, w, lim, s.args)
			if err != nil {
				return total, fmt.Errorf("herald/admin: discard: %w", err)
			}
			total += int64(len(seqs))
			if len(seqs) > 0 && o.Progress != nil {
				o.Progress(total)
			}
			if len(seqs) < size {
				return total, nil
			}
			after = seqs[len(seqs)-1]
			continue
		}
		if a.d == envelope.Postgres {
			stmt = `DELETE FROM ` + a.t.Quoted + ` WHERE dead_lettered_at IS NOT NULL AND sequence = ANY(ARRAY(
    SELECT e.sequence FROM ` + a.t.Quoted + ` e WHERE ` + w + ` ORDER BY e.sequence LIMIT ` + lim + ` FOR UPDATE SKIP LOCKED))
RETURNING sequence`
		} else {
			stmt = `DELETE FROM ` + a.t.Quoted + ` WHERE dead_lettered_at IS NOT NULL AND sequence IN (
    SELECT e.sequence FROM ` + a.t.Quoted + ` e WHERE ` + w + ` ORDER BY e.sequence LIMIT ` + lim + `)
RETURNING sequence`
		}
		seqs, err := a.sequences(ctx, stmt, s.args...)
		if err != nil {
			return total, fmt.Errorf("herald/admin: discard: %w", err)
		}
		total += int64(len(seqs))
		if len(seqs) > 0 && o.Progress != nil {
			o.Progress(total)
		}
		if len(seqs) < size {
			return total, nil
		}
		for _, sq := range seqs { // RETURNING's order is not the subquery's
			after = max(after, sq)
		}
	}
}

// sequences runs stmt and reads one int64 column. Every row is read before
// it returns, so a DELETE … RETURNING has run whole (or not at all).
func (a *Admin) sequences(ctx context.Context, stmt string, args ...any) ([]int64, error) {
	return querySequences(ctx, a.db, stmt, args...)
}

// querySequences runs stmt on q and reads one int64 column, every row.
func querySequences(ctx context.Context, q envelope.Querier, stmt string, args ...any) ([]int64, error) {
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, rows.Close()
}

// Follow calls fn with each event q selects whose sequence is above
// q.After, in sequence order, and then with each such event written later,
// reading the table every interval (0 = one second) until ctx ends, when
// it returns nil; an error of fn's or of the database ends it with that
// error. Start it at LastSequence to see only new events, with
// q.State = StateAll to see them whatever became of them.
//
// It follows by sequence: an event whose transaction commits after a
// later-numbered event has been shown (sequences are taken at insert, not
// at commit) is not shown. It is for watching a table, not consuming it —
// a relay delivers every event.
func (a *Admin) Follow(ctx context.Context, q Query, interval time.Duration, fn func(Event) error) error {
	if interval <= 0 {
		interval = time.Second
	}
	if interval < 10*time.Millisecond {
		return outbox.Validationf("admin.Follow.interval", "%s: want at least 10ms", interval)
	}
	q.Limit = MaxLimit
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p, err := a.List(ctx, q)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, e := range p.Events {
			if err := fn(e); err != nil {
				return err
			}
			q.After = e.Sequence
		}
		if p.Next != 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// discardMySQL deletes one batch of dead letters on MySQL, which has no
// DELETE … RETURNING (MariaDB's is not MySQL's): in one READ COMMITTED
// transaction it locks the batch's rows (SKIP LOCKED, as on PostgreSQL:
// rows a relay holds are left for the next run) and deletes them by
// sequence. READ COMMITTED: at MySQL's default REPEATABLE READ the locking
// read would also lock the gaps and rows it passes over, and hold up the
// writers and relays of the table until the batch commits.
func (a *Admin) discardMySQL(ctx context.Context, where, lim string, args []any) ([]int64, error) {
	tx, err := a.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	seqs, err := querySequences(ctx, tx, `SELECT e.sequence FROM `+a.t.Quoted+` e WHERE `+where+` ORDER BY e.sequence LIMIT `+lim+` FOR UPDATE SKIP LOCKED`, args...)
	if err != nil {
		return nil, err
	}
	if len(seqs) == 0 {
		return nil, tx.Commit()
	}
	b, _ := json.Marshal(seqs)
	res, err := tx.ExecContext(ctx, `DELETE t FROM `+a.t.Quoted+` t JOIN JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS j ON t.sequence = j.seq
WHERE t.dead_lettered_at IS NOT NULL`, string(b))
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(seqs)) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("deleted %d of the %d locked dead letters", n, len(seqs))
	}
	return seqs, tx.Commit()
}
