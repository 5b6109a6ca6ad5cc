package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// Tx is a transaction HandleTx runs a handler in: a *sql.Tx, an ent *Tx
// (generated with the sql/execquery feature, which entcapture enables), or
// any type that runs statements and commits.
type Tx interface {
	envelope.Querier
	Commit() error
	Rollback() error
}

func (in *Inbox) prepareSQL() {
	t, d := in.t, in.d
	p := func(n int) string { return outbox.Placeholder(d, n) }
	in.claimSQL = `INSERT INTO ` + t.Quoted + ` (consumer, message_id) VALUES (` + p(1) + `, ` + p(2) + `) ON CONFLICT DO NOTHING`
	in.setResultSQL = `UPDATE ` + t.Quoted + ` SET result = ` + p(1) + ` WHERE consumer = ` + p(2) + ` AND message_id = ` + p(3)
	in.releaseSQL = `DELETE FROM ` + t.Quoted + ` WHERE consumer = ` + p(1) + ` AND message_id = ` + p(2)
	in.lookupSQL = `SELECT processed_at, result FROM ` + t.Quoted + ` WHERE consumer = ` + p(1) + ` AND message_id = ` + p(2)
	if in.d == envelope.MySQL {
		in.prepareMySQL()
		return
	}
	if in.d == envelope.Postgres {
		// <=, not <: HandleOnce releases an id whose handler failed, and
		// its redelivery (same sequence) must not find itself stale.
		in.markKeySQL = `INSERT INTO ` + t.keys + ` AS k (consumer, ordering_key, sequence) VALUES ($1, $2, $3)
ON CONFLICT (consumer, ordering_key) DO UPDATE SET sequence = excluded.sequence, processed_at = now()
WHERE k.sequence <= excluded.sequence`
		// One statement, one JSON parameter for the whole batch. The ids
		// come sorted, so two batches that overlap wait for each other's
		// rows in one order and cannot deadlock.
		in.claimBatchSQL = `INSERT INTO ` + t.Quoted + ` (consumer, message_id)
SELECT $1, j.id FROM json_array_elements_text($2::json) AS j(id)
ON CONFLICT DO NOTHING RETURNING message_id`
		in.seenSQL = `SELECT message_id FROM ` + t.Quoted + ` WHERE consumer = $1
AND message_id IN (SELECT json_array_elements_text($2::json))`
		// Batches of the oldest; SKIP LOCKED lets cleaners of several
		// instances each take other rows instead of waiting on one another.
		in.cleanupSQL = `DELETE FROM ` + t.Quoted + ` WHERE (consumer, message_id) IN (
    SELECT consumer, message_id FROM ` + t.Quoted + ` WHERE consumer = $1 AND processed_at < $2
    ORDER BY processed_at LIMIT $3 FOR UPDATE SKIP LOCKED)`
		in.cleanupKeysSQL = `DELETE FROM ` + t.keys + ` WHERE (consumer, ordering_key) IN (
    SELECT consumer, ordering_key FROM ` + t.keys + ` WHERE consumer = $1 AND processed_at < $2
    LIMIT $3 FOR UPDATE SKIP LOCKED)`
		return
	}
	in.markKeySQL = `INSERT INTO ` + t.keys + ` (consumer, ordering_key, sequence) VALUES (?, ?, ?)
ON CONFLICT (consumer, ordering_key) DO UPDATE SET sequence = excluded.sequence,
processed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE sequence <= excluded.sequence`
	// "WHERE true": SQLite's parser needs it between a SELECT and ON
	// CONFLICT.
	in.claimBatchSQL = `INSERT INTO ` + t.Quoted + ` (consumer, message_id)
SELECT ?, j.value FROM json_each(?) AS j WHERE true
ON CONFLICT DO NOTHING RETURNING message_id`
	in.seenSQL = `SELECT message_id FROM ` + t.Quoted + ` WHERE consumer = ?
AND message_id IN (SELECT value FROM json_each(?))`
	// SQLite has one writer at a time: concurrent cleaners take turns.
	in.cleanupSQL = `DELETE FROM ` + t.Quoted + ` WHERE (consumer, message_id) IN (
    SELECT consumer, message_id FROM ` + t.Quoted + ` WHERE consumer = ? AND processed_at < ?
    ORDER BY processed_at LIMIT ?)`
	in.cleanupKeysSQL = `DELETE FROM ` + t.keys + ` WHERE (consumer, ordering_key) IN (
    SELECT consumer, ordering_key FROM ` + t.keys + ` WHERE consumer = ? AND processed_at < ?
    LIMIT ?)`
}

// Claim records m's id in tx, a transaction the caller opened and will
// commit (or roll back) with its own work: Processed when the id is new,
// Duplicate when it was recorded before — then the caller must not do the
// work — and Stale (OrderSkip; the id is recorded) or Processed with the
// returned context's IsStale true (OrderFlag) for a message older than
// its key's last one. While another transaction holds the same id
// uncommitted, Claim waits for it: Duplicate if it commits, Processed if
// it rolls back. Claim does not touch the cache (it cannot know whether
// tx commits).
func (in *Inbox) Claim(ctx context.Context, tx envelope.Querier, m Message) (context.Context, Outcome, error) {
	if err := m.validate(); err != nil {
		return ctx, 0, err
	}
	res, err := tx.ExecContext(ctx, in.claimSQL, in.cfg.Consumer, m.ID)
	if in.d == envelope.MySQL && isDuplicateKey(err) {
		return ctx, Duplicate, nil
	}
	if err != nil {
		return ctx, 0, fmt.Errorf("herald/inbox: record %s: %w", m.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ctx, 0, fmt.Errorf("herald/inbox: record %s: %w", m.ID, err)
	}
	if n == 0 {
		return ctx, Duplicate, nil
	}
	if in.cfg.Order == OrderNone || m.OrderingKey == "" || m.Sequence == 0 {
		return ctx, Processed, nil
	}
	var fresh bool
	if in.d == envelope.MySQL {
		fresh, err = in.markKeyMySQL(ctx, tx, m)
	} else {
		res, err = tx.ExecContext(ctx, in.markKeySQL, in.cfg.Consumer, m.OrderingKey, m.Sequence)
		if err == nil {
			n, err = res.RowsAffected()
		}
		fresh = n > 0
	}
	if err != nil {
		return ctx, 0, fmt.Errorf("herald/inbox: mark key %q at %d: %w", m.OrderingKey, m.Sequence, err)
	}
	if fresh {
		return ctx, Processed, nil
	}
	if in.cfg.Order == OrderSkip {
		return ctx, Stale, nil
	}
	return context.WithValue(ctx, staleKey, true), Processed, nil
}

// HandleWithin runs fn for m inside tx, a transaction the caller opened:
// Claim, then fn when the outcome is Processed; the caller commits tx —
// the id with fn's work — or rolls it back when HandleWithin returns an
// error. SetResult inside fn is kept.
func (in *Inbox) HandleWithin(ctx context.Context, tx envelope.Querier, m Message, fn func(ctx context.Context) error) (Outcome, error) {
	if in.cached(ctx, m.ID) {
		return Duplicate, nil
	}
	ctx, out, err := in.Claim(ctx, tx, m)
	if err != nil || out != Processed {
		return out, err
	}
	box := &resultBox{}
	if err := fn(context.WithValue(ctx, resultKey, box)); err != nil {
		return out, err
	}
	if box.set {
		if _, err := tx.ExecContext(ctx, in.setResultSQL, box.s, in.cfg.Consumer, m.ID); err != nil {
			return out, fmt.Errorf("herald/inbox: keep the result of %s: %w", m.ID, err)
		}
	}
	return out, nil
}

// Handle processes m once (effectively once): it begins a transaction on
// the inbox's database, records m's id in it and runs fn in it, and
// commits both — the effect and the id — or neither. A repeat of a
// committed id returns Duplicate without running fn; an error from fn, or
// a panic, rolls both back, so a redelivery runs fn again. fn must do its
// work through tx only: work elsewhere (an HTTP call, an email) is not
// rolled back and may repeat; use HandleOnce for it.
func (in *Inbox) Handle(ctx context.Context, m Message, fn func(ctx context.Context, tx *sql.Tx) error) (Outcome, error) {
	return HandleTx(ctx, in, m, func(ctx context.Context) (*sql.Tx, error) { return in.db.BeginTx(ctx, nil) }, fn)
}

// HandleTx is Handle for any transaction type: begin opens one (an ent
// client's Tx method, for instance), fn gets it.
//
//	out, err := inbox.HandleTx(ctx, in, m, client.Tx, func(ctx context.Context, tx *ent.Tx) error { … })
func HandleTx[T Tx](ctx context.Context, in *Inbox, m Message, begin func(context.Context) (T, error), fn func(ctx context.Context, tx T) error) (out Outcome, err error) {
	if err := m.validate(); err != nil {
		return 0, err
	}
	if in.cached(ctx, m.ID) {
		return Duplicate, nil
	}
	tx, err := begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("herald/inbox: begin: %w", err)
	}
	done := false
	defer func() {
		if !done { // an error, a duplicate, or a panic going through
			_ = tx.Rollback()
		}
	}()
	out, err = in.HandleWithin(ctx, tx, m, func(ctx context.Context) error { return fn(ctx, tx) })
	if err != nil || out == Duplicate {
		return out, err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("herald/inbox: commit %s: %w", m.ID, err)
	}
	in.remember(ctx, m.ID)
	return out, nil
}

// HandleOnce processes m at most once, for an effect outside the database
// (an email, a payment call): the id is recorded and committed first, then
// fn runs. A repeat returns Duplicate without running fn. When fn returns
// an error the id is deleted again, so a redelivery runs fn again: return
// an error only when the effect did not happen.
//
// What a crash costs: a process that dies after the id's commit and
// before fn's effect completes loses that effect — the redelivery finds
// the id and is a Duplicate. It never runs the effect twice.
func (in *Inbox) HandleOnce(ctx context.Context, m Message, fn func(ctx context.Context) error) (Outcome, error) {
	if err := m.validate(); err != nil {
		return 0, err
	}
	if in.cached(ctx, m.ID) {
		return Duplicate, nil
	}
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("herald/inbox: begin: %w", err)
	}
	ctx, out, err := in.Claim(ctx, tx, m)
	if err != nil || out == Duplicate {
		_ = tx.Rollback()
		return out, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("herald/inbox: commit %s: %w", m.ID, err)
	}
	if out == Stale {
		in.remember(ctx, m.ID)
		return out, nil
	}
	if err := fn(ctx); err != nil {
		if _, rerr := in.db.ExecContext(context.WithoutCancel(ctx), in.releaseSQL, in.cfg.Consumer, m.ID); rerr != nil {
			return out, fmt.Errorf("%w (and releasing its id failed, so a redelivery is a Duplicate: %w)", err, rerr)
		}
		return out, err
	}
	in.remember(ctx, m.ID) // only now: a released id must not stay cached
	return out, nil
}
