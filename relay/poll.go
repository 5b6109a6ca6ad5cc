package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
)

// markTimeout bounds the statements that mark a batch. They run under
// context.WithoutCancel: marks are written even while the relay stops.
const markTimeout = 30 * time.Second

// minStatementTimeout is the floor of the lease and renewal statements'
// timeout, which is otherwise the Lease: a lease that takes longer than
// itself is worthless.
const minStatementTimeout = 5 * time.Second

type pollResult struct {
	leased  int       // events leased (and handled)
	keyed   int       // events with an ordering key that were delivered
	nextDue time.Time // the earliest next attempt of a failure recorded, or zero
}

// withTimeout bounds ctx by d, naming what timed out.
func withTimeout(ctx context.Context, d time.Duration, what string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("herald/relay: %s timed out after %s", what, d))
}

// stmtErr names a statement's error, or its timeout.
func stmtErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		if c := context.Cause(ctx); c != nil && !errors.Is(c, ctx.Err()) {
			return fmt.Errorf("%w (%w)", c, err)
		}
	}
	return envelope.PoolerHint(fmt.Errorf("herald/relay: %s: %w", what, err))
}

// poll is one poll: lease a batch, deliver it, mark it. ctx is the run's
// forced-stop context: it cancels the lease query and the deliveries, never
// the marks.
func (r *Relay) poll(ctx context.Context) (pollResult, error) {
	batch, err := r.lease(ctx)
	if err != nil || len(batch) == 0 {
		return pollResult{}, err
	}
	errs := r.deliver(ctx, batch)
	res, err := r.mark(ctx, batch, errs)
	res.leased = len(batch)
	return res, err
}

func (r *Relay) statementTimeout() time.Duration { return max(r.cfg.Lease, minStatementTimeout) }

// lease leases the next batch (one statement) and returns it in sequence
// order.
func (r *Relay) lease(ctx context.Context) ([]*envelope.Event, error) {
	now := r.now()
	until := now.Add(r.cfg.Lease)
	ctx, cancel := withTimeout(ctx, r.statementTimeout(), "lease query")
	defer cancel()
	args := append([]any{r.dialect.TimeArg(until), r.cfg.Name, r.dialect.TimeArg(now), r.cfg.BatchSize}, r.fargs...)
	rows, err := r.db.QueryContext(ctx, r.sql.lease, args...)
	if err != nil {
		return nil, stmtErr(ctx, "lease query", err)
	}
	defer rows.Close()
	batch := make([]*envelope.Event, 0, r.cfg.BatchSize)
	sc := newLeaseScanner(r.extra, r.cfg.Name, until)
	for rows.Next() {
		e, err := sc.scan(rows)
		if err != nil {
			return nil, err
		}
		batch = append(batch, e)
	}
	if err := rows.Err(); err != nil {
		return nil, stmtErr(ctx, "lease query", err)
	}
	if err := rows.Close(); err != nil {
		return nil, stmtErr(ctx, "lease query", err)
	}
	slices.SortFunc(batch, func(a, b *envelope.Event) int { return cmp.Compare(a.Sequence, b.Sequence) })
	return batch, nil
}

// deliver hands the batch to the delivery, outside any transaction, and
// renews the lease three times per Lease until it returns. It returns one
// error per event.
func (r *Relay) deliver(ctx context.Context, batch []*envelope.Event) []error {
	ren := r.startRenewal(ctx, batch)
	defer ren.stop()
	if r.batch == nil {
		return delivery.Each(ctx, r.d, batch, r.cfg.Concurrency, r.cfg.DeliveryTimeout)
	}
	dctx, cancel := context.WithTimeoutCause(ctx, r.cfg.DeliveryTimeout, &delivery.TimeoutError{Timeout: r.cfg.DeliveryTimeout})
	defer cancel()
	errs := delivery.CallBatch(dctx, r.batch, batch)
	if dctx.Err() != nil && ctx.Err() == nil {
		for i, err := range errs {
			if err != nil && errors.Is(err, context.DeadlineExceeded) {
				errs[i] = &delivery.TimeoutError{Timeout: r.cfg.DeliveryTimeout, Err: err}
			}
		}
	}
	return errs
}

// renewal extends a batch's lease every Lease/3 while the batch is out, so
// a batch that takes longer than one Lease is not taken by another relay.
// It is a timer, not a goroutine: most batches are marked long before the
// first renewal is due, and then cost nothing (a goroutine started and
// stopped per batch cost ~0.1 ms of thread hand-offs, measurable at
// BatchSize 100).
type renewal struct {
	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	running sync.WaitGroup // a renewal statement in flight
}

func (r *Relay) startRenewal(ctx context.Context, batch []*envelope.Event) *renewal {
	ren := &renewal{}
	every := r.cfg.Lease / 3
	var seqs string // built on the first renewal only
	ren.mu.Lock()
	defer ren.mu.Unlock()
	ren.timer = time.AfterFunc(every, func() {
		ren.mu.Lock()
		if ren.stopped {
			ren.mu.Unlock()
			return
		}
		ren.running.Add(1)
		ren.mu.Unlock()
		defer ren.running.Done()
		if seqs == "" {
			seqs = r.seqArg(batch)
		}
		r.renew(ctx, len(batch), seqs)
		ren.mu.Lock()
		if !ren.stopped {
			ren.timer.Reset(every)
		}
		ren.mu.Unlock()
	})
	return ren
}

// stop ends the renewals and waits for one in flight.
func (ren *renewal) stop() {
	ren.mu.Lock()
	ren.stopped = true
	ren.timer.Stop()
	ren.mu.Unlock()
	ren.running.Wait()
}

// renew extends the lease of the n events in seqs by one Lease.
func (r *Relay) renew(ctx context.Context, n int, seqs string) {
	if ctx.Err() != nil {
		return
	}
	until := r.now().Add(r.cfg.Lease)
	c, cancel := withTimeout(ctx, r.statementTimeout(), "lease renewal")
	defer cancel()
	res, err := r.db.ExecContext(c, r.sql.renew, r.dialect.TimeArg(until), seqs, r.cfg.Name)
	if err != nil {
		if ctx.Err() == nil {
			r.log.WarnContext(ctx, "herald/relay: lease renewal failed; the batch may be delivered again by another relay if its lease runs out",
				slog.String("relay", r.cfg.Name), slog.Int("events", n), slog.Any("error", stmtErr(c, "lease renewal", err)))
		}
		return
	}
	if m, err := res.RowsAffected(); err == nil && m < int64(n) {
		r.log.WarnContext(ctx, "herald/relay: lease lost for part of the batch (taken over by another relay after it expired)",
			slog.String("relay", r.cfg.Name), slog.Int("events", n), slog.Int64("renewed", m))
	}
}

// seqArg binds a list of sequences: a bigint[] literal on PostgreSQL, a
// JSON array on SQLite. One parameter keeps the statement's text constant,
// so drivers can prepare it once.
func (r *Relay) seqArg(batch []*envelope.Event) string {
	var b strings.Builder
	lb, rb := "[", "]"
	if r.dialect == envelope.Postgres {
		lb, rb = "{", "}"
	}
	b.WriteString(lb)
	for i, e := range batch {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(e.Sequence, 10))
	}
	b.WriteString(rb)
	return b.String()
}

// failure is one failed delivery as markFailed binds it.
type failure struct {
	Sequence      int64  `json:"sequence"`
	Attempts      int    `json:"attempts"`
	Error         string `json:"error"`
	NextAttemptAt any    `json:"next_attempt_at"`
	DeadLettered  any    `json:"dead_lettered_at"`

	event *envelope.Event
	err   error
	next  time.Time
}

// maxErrorLength cuts last_error.
const maxErrorLength = 4000

// mark writes the outcome of a batch: one statement for the delivered
// events, one for the failures. It runs even while the relay stops.
// Deliveries cancelled by a forced stop are released (their lease
// cleared), not counted as failures.
func (r *Relay) mark(runCtx context.Context, batch []*envelope.Event, errs []error) (pollResult, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), markTimeout)
	defer cancel()
	now := r.now()
	var (
		delivered, released []*envelope.Event
		failures            []failure
		res                 pollResult
	)
	forced := runCtx.Err() != nil
	for i, e := range batch {
		err := errs[i]
		switch {
		case err == nil:
			delivered = append(delivered, e)
			if e.OrderingKey != "" {
				res.keyed++
			}
		case forced:
			// Cancelled by a forced stop: not the event's fault.
			released = append(released, e)
		default:
			f := failure{Sequence: e.Sequence, Attempts: e.Attempts + 1, Error: cut(err.Error(), maxErrorLength), event: e, err: err}
			if f.Attempts >= r.cfg.MaxAttempts {
				f.DeadLettered = r.dialect.TimeArg(now)
			} else {
				f.next = now.Add(r.backoff(f.Attempts))
				f.NextAttemptAt = r.dialect.TimeArg(f.next)
			}
			failures = append(failures, f)
		}
	}
	var errOut []error
	if len(delivered) > 0 {
		var marked sql.Result
		err := retryMark(ctx, func() (err error) {
			marked, err = r.db.ExecContext(ctx, r.sql.markPublished, r.dialect.TimeArg(now), r.seqArg(delivered), r.cfg.Name)
			return err
		})
		if err != nil {
			err = stmtErr(ctx, "mark published", err)
			r.log.ErrorContext(ctx, "herald/relay: could not mark delivered events published; they will be delivered again when their lease expires",
				slog.String("relay", r.cfg.Name), slog.Int("events", len(delivered)), slog.Any("error", err))
			errOut = append(errOut, err)
		} else if n, err := marked.RowsAffected(); err == nil && n < int64(len(delivered)) {
			r.log.WarnContext(ctx, "herald/relay: some delivered events were no longer leased by this relay (lease expired and taken over); their new holder will deliver them again",
				slog.String("relay", r.cfg.Name), slog.Int("delivered", len(delivered)), slog.Int64("marked", n))
		}
		if r.cfg.Observer != nil {
			for _, e := range delivered {
				r.cfg.Observer.Delivered(ctx, Delivered{Relay: r.cfg.Name, Event: e, Delay: now.Sub(e.CreatedAt)})
			}
		}
	}
	if len(failures) > 0 {
		var recorded map[int64]bool
		err := retryMark(ctx, func() (err error) {
			recorded, err = r.markFailed(ctx, failures)
			return err
		})
		if err != nil {
			r.log.ErrorContext(ctx, "herald/relay: could not record failed deliveries; they will be tried again when their lease expires",
				slog.String("relay", r.cfg.Name), slog.Int("events", len(failures)), slog.Any("error", err))
			errOut = append(errOut, err)
		}
		for _, f := range failures {
			e := f.event
			attrs := []any{slog.String("relay", r.cfg.Name), slog.String("event_id", e.ID.String()),
				slog.Int64("sequence", e.Sequence), slog.String("topic", e.Topic), slog.Int("attempts", f.Attempts), slog.Any("error", f.err)}
			if e.OrderingKey != "" {
				attrs = append(attrs, slog.String("ordering_key", e.OrderingKey))
			}
			switch {
			case err != nil:
			case !recorded[e.Sequence]:
				r.log.WarnContext(ctx, "herald/relay: delivery failed; not recorded because the event is no longer leased by this relay",
					attrs...)
			case f.DeadLettered != nil:
				r.log.ErrorContext(ctx, "herald/relay: event dead-lettered: out of attempts; it and later events of its ordering key wait for RetryDeadLettered",
					append(attrs, slog.Int("max_attempts", r.cfg.MaxAttempts))...)
				if r.cfg.Observer != nil {
					r.cfg.Observer.DeadLettered(ctx, DeadLettered{Relay: r.cfg.Name, Event: e, Err: f.err, Attempts: f.Attempts})
				}
			default:
				r.log.WarnContext(ctx, "herald/relay: delivery failed; will retry",
					append(attrs, slog.Time("next_attempt_at", f.next))...)
				if r.cfg.Observer != nil {
					r.cfg.Observer.Failed(ctx, Failed{Relay: r.cfg.Name, Event: e, Err: f.err, Attempts: f.Attempts, NextAttemptAt: f.next})
				}
				if res.nextDue.IsZero() || f.next.Before(res.nextDue) {
					res.nextDue = f.next
				}
			}
		}
	}
	if len(released) > 0 {
		if _, err := r.db.ExecContext(ctx, r.sql.renew, nil, r.seqArg(released), r.cfg.Name); err != nil {
			// Not an error worth more: the lease expires on its own.
			r.log.DebugContext(ctx, "herald/relay: could not release events of a cancelled batch", slog.String("relay", r.cfg.Name), slog.Any("error", err))
		}
	}
	return res, errors.Join(errOut...)
}

// markRetries are the waits before the second and later tries of a mark
// statement. Both marks are idempotent (they set absolute values, guarded by
// leased_by and published_at IS NULL), so a statement that failed — SQLite
// still busy after its timeout, a dropped connection — is simply run again:
// an unmarked batch would stay leased until its lease expires, holding back
// its ordering keys, and then be delivered a second time.
var markRetries = []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, time.Second}

// retryMark runs mark until it succeeds, the retries are spent, or ctx
// (the mark's own timeout) ends.
func retryMark(ctx context.Context, mark func() error) error {
	err := mark()
	for _, wait := range markRetries {
		if err == nil || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = mark()
	}
	return err
}

func (r *Relay) markFailed(ctx context.Context, failures []failure) (map[int64]bool, error) {
	doc, err := json.Marshal(failures)
	if err != nil {
		return nil, fmt.Errorf("herald/relay: mark failed: %w", err)
	}
	rows, err := r.db.QueryContext(ctx, r.sql.markFailed, string(doc), r.cfg.Name)
	if err != nil {
		return nil, stmtErr(ctx, "mark failed", err)
	}
	defer rows.Close()
	recorded := make(map[int64]bool, len(failures))
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			return nil, stmtErr(ctx, "mark failed", err)
		}
		recorded[s] = true
	}
	if err := rows.Err(); err != nil {
		return nil, stmtErr(ctx, "mark failed", err)
	}
	return recorded, nil
}

// backoff is the wait after the attempts-th failure:
// min(RetryBase·2^(attempts−1), RetryMax), ±10% jitter.
func (r *Relay) backoff(attempts int) time.Duration {
	d := r.cfg.RetryMax
	if n := attempts - 1; n < 62 {
		if b := r.cfg.RetryBase << n; b>>n == r.cfg.RetryBase && b < d {
			d = b
		}
	}
	return time.Duration(float64(d) * (0.9 + 0.2*r.jitter()))
}

// cut shortens s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
