package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/outboxsql"
	"github.com/heraldgo/herald/internal/sqltime"
	"github.com/heraldgo/herald/wakeup"
)

// Filter selects dead-lettered events for RetryDeadLettered. Its fields
// narrow the relay's own Topics / ExcludeTopics; the zero Filter selects
// every dead event the relay handles.
type Filter struct {
	// Topics are names or prefix patterns ending in '*', as in
	// Config.Topics; nil = any topic.
	Topics []string
	// IDs are event ids; nil = any event. The id has no index of its
	// own: each batch scans the dead letters for them, so select many
	// events by Sequences instead.
	IDs []uuid.UUID
	// Sequences are event sequences (the primary key); nil = any event.
	Sequences []int64
}

// RetryDeadLettered makes the dead-lettered events that match f (and the
// relay's topics) due again, with their attempts reset to zero, in batches
// of CleanupBatchSize. They are delivered in sequence order before the
// events of their keys that waited behind them. It returns how many
// events it revived, pokes this relay's loop, and signals the Wakeup with
// their topics so other relays hear of them. A bad pattern in f is an
// envelope.ErrValidation error.
func (r *Relay) RetryDeadLettered(ctx context.Context, f Filter) (int64, error) {
	var where []string
	// $1 is the batch size, the relay's filter follows from $2 (see
	// statements.retry), the caller's Filter after it.
	args := append([]any{r.cfg.CleanupBatchSize}, r.fargs...)
	next := 2 + len(r.fargs)
	b := sqlBuilder{d: r.dialect, t: r.table}
	if f.Topics != nil {
		for i, p := range f.Topics {
			if !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
				return 0, outbox.Validationf(fmt.Sprintf("relay.Filter.Topics[%d]", i), "%q is not valid UTF-8 without NUL bytes", p)
			}
		}
		ps, err := envelope.ParseTopicPatterns("relay.Filter.Topics", f.Topics)
		if err != nil {
			var e *envelope.Error
			if errors.As(err, &e) {
				e.Kind = envelope.ErrValidation
			}
			return 0, err
		}
		if len(ps) == 0 {
			return 0, nil // matches nothing
		}
		s, a, n := b.topicCondition(ps, next)
		where, args, next = append(where, "AND "+s), append(args, a...), n
	}
	if f.IDs != nil {
		if len(f.IDs) == 0 {
			return 0, nil
		}
		var ids strings.Builder
		if r.dialect == envelope.Postgres {
			ids.WriteByte('{')
			for i, id := range f.IDs {
				if i > 0 {
					ids.WriteByte(',')
				}
				ids.WriteString(id.String())
			}
			ids.WriteByte('}')
			where = append(where, "AND e.id = ANY($"+strconv.Itoa(next)+"::uuid[])")
		} else {
			ids.WriteByte('[')
			for i, id := range f.IDs {
				if i > 0 {
					ids.WriteByte(',')
				}
				ids.WriteString(`"` + id.String() + `"`)
			}
			ids.WriteByte(']')
			if r.dialect == envelope.MySQL {
				where = append(where, "AND e.id IN (SELECT value FROM JSON_TABLE($"+strconv.Itoa(next)+", '$[*]' COLUMNS (value "+outboxsql.MySQLIDType+" PATH '$')) AS ids)")
			} else {
				where = append(where, "AND e.id IN (SELECT value FROM json_each($"+strconv.Itoa(next)+"))")
			}
		}
		args = append(args, ids.String())
		next++
	}
	if f.Sequences != nil {
		if len(f.Sequences) == 0 {
			return 0, nil
		}
		var seqs strings.Builder
		open, sep, end := "{", ",", "}"
		if r.dialect != envelope.Postgres {
			open, end = "[", "]"
		}
		seqs.WriteString(open)
		for i, s := range f.Sequences {
			if i > 0 {
				seqs.WriteString(sep)
			}
			seqs.WriteString(strconv.FormatInt(s, 10))
		}
		seqs.WriteString(end)
		switch r.dialect {
		case envelope.Postgres:
			where = append(where, "AND e.sequence = ANY($"+strconv.Itoa(next)+"::bigint[])")
		case envelope.MySQL:
			where = append(where, "AND e.sequence IN (SELECT value FROM JSON_TABLE($"+strconv.Itoa(next)+", '$[*]' COLUMNS (value BIGINT PATH '$')) AS seqs)")
		default:
			where = append(where, "AND e.sequence IN (SELECT value FROM json_each($"+strconv.Itoa(next)+"))")
		}
		args = append(args, seqs.String())
	}
	q := b.render(r.sql.retry, "", strings.Join(where, " "))
	var total int64
	var topics wakeup.Topics
	for {
		n, err := r.retryBatch(ctx, q, args, &topics)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(r.cfg.CleanupBatchSize) {
			break
		}
	}
	if total > 0 {
		r.wake()
		if r.cfg.Wakeup != nil {
			_ = r.cfg.Wakeup.Signal(ctx, topics.List()) // a hint: relays poll anyway
		}
	}
	return total, nil
}

func (r *Relay) retryBatch(ctx context.Context, q string, args []any, topics *wakeup.Topics) (int64, error) {
	if r.dialect == envelope.MySQL {
		return r.retryBatchMySQL(ctx, q, args, topics)
	}
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("herald/relay: retry dead-lettered: %w%s", err, poolerHint(err))
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return n, fmt.Errorf("herald/relay: retry dead-lettered: %w", err)
		}
		topics.Add(t)
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("herald/relay: retry dead-lettered: %w", err)
	}
	return n, nil
}

// CleanupPublished deletes the relay's published events that were
// published before the database's now − olderThan, in batches of
// CleanupBatchSize (one short statement each), and returns how many it
// deleted. Config.RetainPublished runs it on a schedule; without it the
// relay never runs it by itself. It stops between batches when ctx ends.
func (r *Relay) CleanupPublished(ctx context.Context, olderThan time.Duration) (int64, error) {
	return r.cleanup(ctx, r.sql.cleanupPublished, olderThan, "cleanup published")
}

// CleanupDeadLettered deletes the relay's dead-lettered events that died
// before the database's now − olderThan, like CleanupPublished
// (Config.RetainDeadLettered runs it on a schedule). Deleting a dead event
// releases the events of its ordering key that waited behind it.
func (r *Relay) CleanupDeadLettered(ctx context.Context, olderThan time.Duration) (int64, error) {
	return r.cleanup(ctx, r.sql.cleanupDeadLettered, olderThan, "cleanup dead-lettered")
}

func (r *Relay) cleanup(ctx context.Context, q string, olderThan time.Duration, what string) (int64, error) {
	if olderThan < 0 {
		return 0, outbox.Validationf("olderThan", "negative (%s)", olderThan)
	}
	var args []any
	if r.dialect == envelope.Postgres || r.dialect == envelope.MySQL {
		args = []any{r.nowArg(), olderThan.Microseconds(), r.cfg.CleanupBatchSize}
	} else {
		args = []any{outbox.TimeArg(r.dialect, r.sqliteNow().Add(-olderThan)), r.cfg.CleanupBatchSize}
	}
	args = append(args, r.fargs...)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("herald/relay: %s: %w", what, context.Cause(ctx))
		}
		res, err := r.exec(ctx, q, args...)
		if err != nil {
			return total, fmt.Errorf("herald/relay: %s: %w%s", what, err, poolerHint(err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("herald/relay: %s: %w", what, err)
		}
		total += n
		if n < int64(r.cfg.CleanupBatchSize) {
			return total, nil
		}
	}
}

// cleanupLoop runs the scheduled cleanup (Config.RetainPublished,
// RetainDeadLettered) when the run starts and then every CleanupInterval
// ±10%, until ctx ends.
func (r *Relay) cleanupLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.scheduledCleanup(ctx)
		r.cleanups.Add(1)
		wait := float64(r.cfg.CleanupInterval) * (0.9 + 0.2*r.jitter())
		t.Reset(time.Duration(min(wait, math.MaxInt64/2)))
	}
}

func (r *Relay) scheduledCleanup(ctx context.Context) {
	for _, c := range []struct {
		age  time.Duration
		run  func(context.Context, time.Duration) (int64, error)
		what string
	}{
		{r.cfg.RetainPublished, r.CleanupPublished, "published"},
		{r.cfg.RetainDeadLettered, r.CleanupDeadLettered, "dead-lettered"},
	} {
		if c.age <= 0 {
			continue
		}
		n, err := c.run(ctx, c.age)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.log.WarnContext(ctx, "herald/relay: scheduled cleanup failed; it runs again at the next interval",
				slog.String("relay", r.cfg.Name), slog.String("events", c.what), slog.Any("error", err))
		case n > 0:
			r.log.InfoContext(ctx, "herald/relay: scheduled cleanup deleted old events",
				slog.String("relay", r.cfg.Name), slog.String("events", c.what), slog.Int64("deleted", n), slog.Duration("older_than", c.age))
		}
	}
}

// Backlog is the state of a relay's share of the outbox, for health
// checks and metrics.
type Backlog struct {
	Pending          int64         // events still to deliver (due, waiting to retry, leased)
	OldestPendingAge time.Duration // age of the oldest pending event by the database's clock; 0 when none
	DeadLettered     int64         // events out of attempts
}

// TopicBacklog is Backlog for one topic.
type TopicBacklog struct {
	Topic string
	Backlog
	// Paused: the topic is paused (admin.Admin.Pause): no relay of the
	// table leases its events.
	Paused bool
}

// BacklogByTopic is Backlog by topic, in one statement: the topics that
// hold pending or dead-lettered events or are paused (within the relay's
// Topics / ExcludeTopics and Tenants), in topic order. A topic whose events are all
// published is not listed unless it is paused.
func (r *Relay) BacklogByTopic(ctx context.Context) ([]TopicBacklog, error) {
	args := append([]any{r.nowArg()}, r.fargs...)
	rows, err := r.query(ctx, r.sql.backlogByTopic, args...)
	if err != nil {
		return nil, fmt.Errorf("herald/relay: backlog by topic: %w%s", err, poolerHint(err))
	}
	defer rows.Close()
	var out []TopicBacklog
	for rows.Next() {
		var (
			t           TopicBacklog
			oldest, now sqltime.NullTime
			paused      int64
		)
		if err := rows.Scan(&t.Topic, &t.Pending, &oldest, &t.DeadLettered, &paused, &now); err != nil {
			return nil, fmt.Errorf("herald/relay: backlog by topic: %w", err)
		}
		t.Paused = paused > 0
		if oldest.Valid && now.Valid {
			t.OldestPendingAge = max(0, now.Time.Sub(oldest.Time))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("herald/relay: backlog by topic: %w%s", err, poolerHint(err))
	}
	return out, nil
}

// TenantBacklog is Backlog for one tenant (the outbox's tenant column,
// envelope.Message.Tenant); Tenant "" is the events without one.
type TenantBacklog struct {
	Tenant string
	Backlog
}

// BacklogByTenant is Backlog by tenant, in one statement: the tenants that
// hold pending or dead-lettered events (within the relay's Topics /
// ExcludeTopics and Tenants), in tenant order, "" (the events without a
// tenant) first when it holds any. A tenant whose events are all
// published is not listed.
func (r *Relay) BacklogByTenant(ctx context.Context) ([]TenantBacklog, error) {
	args := append([]any{r.nowArg()}, r.fargs...)
	rows, err := r.query(ctx, r.sql.backlogByTenant, args...)
	if err != nil {
		return nil, fmt.Errorf("herald/relay: backlog by tenant: %w%s", err, poolerHint(err))
	}
	defer rows.Close()
	var out []TenantBacklog
	for rows.Next() {
		var (
			t           TenantBacklog
			oldest, now sqltime.NullTime
		)
		if err := rows.Scan(&t.Tenant, &t.Pending, &oldest, &t.DeadLettered, &now); err != nil {
			return nil, fmt.Errorf("herald/relay: backlog by tenant: %w", err)
		}
		if oldest.Valid && now.Valid {
			t.OldestPendingAge = max(0, now.Time.Sub(oldest.Time))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("herald/relay: backlog by tenant: %w%s", err, poolerHint(err))
	}
	return out, nil
}

// Backlog counts the relay's pending and dead-lettered events (within its
// Topics / ExcludeTopics and Tenants) in one statement.
func (r *Relay) Backlog(ctx context.Context) (Backlog, error) {
	var (
		b           Backlog
		oldest, now sqltime.NullTime
	)
	args := append([]any{r.nowArg()}, r.fargs...)
	if err := r.queryRow(ctx, r.sql.backlog, args...).Scan(&b.Pending, &oldest, &b.DeadLettered, &now); err != nil {
		return Backlog{}, fmt.Errorf("herald/relay: backlog: %w%s", err, poolerHint(err))
	}
	if oldest.Valid && now.Valid {
		b.OldestPendingAge = max(0, now.Time.Sub(oldest.Time))
	}
	return b, nil
}
