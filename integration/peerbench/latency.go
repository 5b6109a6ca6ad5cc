package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/integration/relaybench"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

type latencyCase struct {
	name string
	run  func(context.Context, config) ([]figure, error)
}

func latencyCases() []latencyCase {
	return []latencyCase{
		{"herald, in-process wakeup", heraldLatency("herald, in-process wakeup", heraldOpts{wakeup: true})},
		{"herald, in-process wakeup, DeleteOnPublish", heraldLatency("herald, in-process wakeup, DeleteOnPublish", heraldOpts{wakeup: true, deleteOnPublish: true})},
		{"herald, in-process wakeup, AsyncCommit", heraldLatency("herald, in-process wakeup, AsyncCommit", heraldOpts{wakeup: true, asyncCommit: true})},
		{"bare lease-and-mark loop, in-process wakeup (floor)", bareLatency("bare lease-and-mark loop, in-process wakeup (floor)")},
		{"herald, polling every 10ms (no wakeup)", heraldLatency("herald, polling every 10ms (no wakeup)", heraldOpts{poll: 10 * time.Millisecond})},
		{"River, defaults", riverLatency("River, defaults", false)},
		{"River, tuned (FetchCooldown 1ms, FetchPollInterval 10ms)", riverLatency("River, tuned (FetchCooldown 1ms, FetchPollInterval 10ms)", true)},
	}
}

// tracker pairs each event's commit time (taken when the writer's
// transaction returned) with its receipt by the handler, whichever comes
// first; a receipt before the writer saw its commit return counts as 0.
type tracker struct {
	mu    sync.Mutex
	sent  map[any]time.Time
	recv  map[any]time.Time
	lat   []sample
	start time.Time
	// spans, when set (herald's cases), holds each event's times for the
	// by-minute breakdown.
	spans  map[any]*stamps
	stats  []tableStats // herald_outbox sampled at the start and at the end of each minute
	probes []sample     // the control's commits (probeCommits)
}

// stamps are one event's times: the writer's transaction, the lease that
// took it (the database's now at the lease, from its lease_until), its
// delivery and its mark (Observer.Delivered, called after the mark).
type stamps struct {
	commit, lease, recv, mark time.Time
	tx                        time.Duration
}

func (t *tracker) stamp(id any, f func(*stamps)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stampLocked(id, f)
}

func (t *tracker) stampLocked(id any, f func(*stamps)) {
	if t.spans == nil {
		return
	}
	s := t.spans[id]
	if s == nil {
		s = &stamps{}
		t.spans[id] = s
	}
	f(s)
}

type sample struct {
	at  time.Duration // commit, from the start of the run
	lat time.Duration
}

func newTracker() *tracker {
	return &tracker{sent: map[any]time.Time{}, recv: map[any]time.Time{}, start: time.Now()}
}

// committed records the commit of event id, seen at at after a
// transaction of took (0 when not timed).
func (t *tracker) committed(id any, at time.Time, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stampLocked(id, func(s *stamps) { s.commit, s.tx = at, took })
	if r, ok := t.recv[id]; ok {
		delete(t.recv, id)
		t.lat = append(t.lat, sample{at.Sub(t.start), max(0, r.Sub(at))})
		return
	}
	t.sent[id] = at
}

// received records the delivery of event id, leased at lease (zero when
// not known).
func (t *tracker) received(id any, lease time.Time) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stampLocked(id, func(s *stamps) { s.recv, s.lease = now, lease })
	if s, ok := t.sent[id]; ok {
		delete(t.sent, id)
		t.lat = append(t.lat, sample{s.Sub(t.start), now.Sub(s)})
		return
	}
	t.recv[id] = now
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.lat)
}

func pct(ls []time.Duration, p float64) float64 {
	if len(ls) == 0 {
		return 0
	}
	s := slices.Clone(ls)
	slices.Sort(s)
	i := min(len(s)-1, int(float64(len(s))*p))
	return float64(s[i].Microseconds()) / 1000
}

// windowName is the drift windows' name: the first and last minute of a
// run of at least two minutes, else its first and last fifth.
func windowName(d time.Duration) string {
	if d >= 2*time.Minute {
		return "minute"
	}
	return "fifth"
}

func window(d time.Duration) time.Duration {
	if d >= 2*time.Minute {
		return time.Minute
	}
	return d / 5
}

// summary returns the case's figures for the round: the whole run's p50
// (with a note: the first and last window's p50/p99) and p99, and the
// drift, last window's p99 ÷ first window's (windowName).
func (t *tracker) summary(name string, d time.Duration) []figure {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := window(d)
	var all, first, last []time.Duration
	for _, s := range t.lat {
		all = append(all, s.lat)
		switch {
		case s.at < w:
			first = append(first, s.lat)
		case s.at >= d-w:
			last = append(last, s.lat)
		}
	}
	wn := windowName(d)
	note := fmt.Sprintf("first %s %.2f/%.2f, last %s %.2f/%.2f (n=%d)", wn, pct(first, 0.5), pct(first, 0.99), wn, pct(last, 0.5), pct(last, 0.99), len(all))
	if d >= 2*time.Minute {
		// Every minute's p99, so that a trend (drift) shows apart from
		// one slow minute (a checkpoint, a vacuum).
		by := make([][]time.Duration, int((d+w-1)/w))
		for _, s := range t.lat {
			if i := int(s.at / w); i >= 0 && i < len(by) {
				by[i] = append(by[i], s.lat)
			}
		}
		ps := make([]string, len(by))
		for i, ls := range by {
			ps[i] = fmt.Sprintf("%.2f", pct(ls, 0.99))
		}
		note += "; p99 by minute: " + strings.Join(ps, " ")
	}
	drift := 0.0
	if f := pct(first, 0.99); f > 0 {
		drift = pct(last, 0.99) / f
	}
	return []figure{
		{name: name + ": p50", unit: "ms", value: pct(all, 0.5), note: note, detail: t.byMinute(d)},
		{name: name + ": p99", unit: "ms", value: pct(all, 0.99)},
		{name: name + ": drift, last " + wn + "'s p99 ÷ first's", unit: "×", value: drift},
	}
}

// pace calls write(i) at rate per second for d, from 4 goroutines, and
// returns how many writes it started. It stops early, with the error, when
// a write fails or ctx ends.
func pace(ctx context.Context, rate int, d time.Duration, write func(i int) error) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan int, 1024)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				if err := write(i); err != nil {
					cancel(err)
				}
			}
		})
	}
	start := time.Now()
	n := int(d.Seconds() * float64(rate))
	sent := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for i := range n {
		if w := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); w > 0 {
			timer.Reset(w)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break loop
			}
		}
		select {
		case jobs <- i:
			sent++
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	return sent, context.Cause(ctx)
}

func waitFor(ctx context.Context, t *tracker, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for t.count() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("latency: %d of %d events delivered %s after the last write", t.count(), n, timeout)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("latency: %d of %d events delivered: %w", t.count(), n, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// heraldOpts is how a herald latency case runs its relay: with the
// in-process wakeup or polling every poll, deleting or marking what it
// delivered, with or without relay.Config.AsyncCommit.
type heraldOpts struct {
	wakeup, deleteOnPublish, asyncCommit bool
	poll                                 time.Duration
}

// latencyDBs opens herald's GORM database for a latency case (gormDBs,
// with w) and returns it with its *sql.DB, given cfg.maxIdle idle
// connections. The caller closes the *sql.DB.
func latencyDBs(cfg config, w wakeup.Wakeup) (*gorm.DB, *sql.DB, error) {
	_, herald, err := gormDBs(cfg, w)
	if err != nil {
		return nil, nil, err
	}
	sqlDB, err := herald.DB()
	if err != nil {
		return nil, nil, err
	}
	if cfg.maxIdle > 0 {
		sqlDB.SetMaxIdleConns(cfg.maxIdle)
	}
	return herald, sqlDB, nil
}

// enqueueAtRate is the latency cases' writers: one gormcapture.Enqueue
// per transaction through herald, at cfg.rate for cfg.latencyDur (pace),
// each commit recorded in tr. It returns how many writes it started.
func enqueueAtRate(ctx context.Context, cfg config, herald *gorm.DB, tr *tracker) (int, error) {
	body := json.RawMessage(`{"model": "library.Loan", "operation": "updated", "pk": 7}`)
	return pace(ctx, cfg.rate, cfg.latencyDur, func(int) error {
		var ev *envelope.Event
		t0 := time.Now()
		err := herald.Transaction(func(tx *gorm.DB) error {
			var err error
			ev, err = gormcapture.Enqueue(tx, envelope.Message{Topic: "latency", Payload: body})
			return err
		})
		if err != nil {
			return err
		}
		now := time.Now()
		tr.committed(ev.ID, now, now.Sub(t0))
		return nil
	})
}

func heraldLatency(name string, o heraldOpts) func(context.Context, config) ([]figure, error) {
	return func(ctx context.Context, cfg config) ([]figure, error) {
		var w wakeup.Wakeup
		if o.wakeup {
			ip := wakeup.NewInProcess()
			defer ip.Close()
			w = ip
		}
		herald, sqlDB, err := latencyDBs(cfg, w)
		if err != nil {
			return nil, err
		}
		defer sqlDB.Close()
		tr := newTracker()
		if cfg.latencyDur >= 2*time.Minute { // the by-minute table's
			tr.spans = map[any]*stamps{}
		}
		rc := relay.Config{Wakeup: w, DeleteOnPublish: o.deleteOnPublish, AsyncCommit: o.asyncCommit, Logger: slog.New(slog.DiscardHandler), Name: "latency",
			Observer: relay.ObserverFuncs{OnDelivered: func(_ context.Context, d relay.Delivered) {
				now := time.Now()
				tr.stamp(d.Event.ID, func(s *stamps) { s.mark = now })
			}}}
		if o.poll > 0 {
			rc.MinPollInterval, rc.MaxPollInterval = o.poll, o.poll
		}
		r, err := relay.New(sqlDB, delivery.Func(func(_ context.Context, e *envelope.Event) error {
			var lease time.Time
			if !e.LeaseUntil.IsZero() {
				lease = e.LeaseUntil.Add(-relay.DefaultLease)
			}
			tr.received(e.ID, lease)
			return nil
		}), rc)
		if err != nil {
			return nil, err
		}
		if err := r.Start(ctx); err != nil {
			return nil, err
		}
		defer func() { _ = r.Stop(context.Background()) }()
		tr.start = time.Now()
		sctx, stopStats := context.WithCancel(ctx)
		defer stopStats()
		statsDone := make(chan struct{})
		go func() { defer close(statsDone); tr.sampleStats(sctx, sqlDB, cfg.latencyDur) }()
		go tr.probeCommits(sctx, sqlDB, cfg.latencyDur)
		n, err := enqueueAtRate(ctx, cfg, herald, tr)
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, tr, n, time.Minute); err != nil {
			return nil, err
		}
		select { // the sampler's last read, at the end of the last minute
		case <-statsDone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		stopStats()
		figs := tr.summary(name, cfg.latencyDur)
		figs[0].note += fmt.Sprintf("; pool: %d connections closed for lack of idle room", sqlDB.Stats().MaxIdleClosed)
		return figs, nil
	}
}

// bareLatency is the floor beside herald's in-process case: the same
// writers (GORM, gormcapture.Enqueue, the in-process wakeup, one *sql.DB)
// and, in place of the relay, relaybench's bare lease and mark woken by
// the same signal (and every 250 ms, for a signal that came during a
// lease). An event counts as received once the lease that took it has
// committed and its rows are read, where the relay calls its delivery.
// The bare statements are prepared by pgx and may run generic plans; the
// relay plans each execution (relay/plans.go). What separates the two
// cases is the relay's work above a lease and a mark.
func bareLatency(name string) func(context.Context, config) ([]figure, error) {
	return func(ctx context.Context, cfg config) ([]figure, error) {
		ip := wakeup.NewInProcess()
		defer ip.Close()
		herald, sqlDB, err := latencyDBs(cfg, ip)
		if err != nil {
			return nil, err
		}
		defer sqlDB.Close()
		lease, mark, err := relaybench.BareStatements("herald_outbox")
		if err != nil {
			return nil, err
		}
		tr := newTracker()
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		wake := make(chan struct{}, 1)
		listening := make(chan error, 1)
		go func() {
			listening <- ip.Listen(lctx, func([]string) {
				select {
				case wake <- struct{}{}:
				default:
				}
			})
		}()
		looped := make(chan error, 1)
		go func() { looped <- bareLoop(lctx, sqlDB, lease, mark, tr, wake) }()
		tr.start = time.Now()
		n, err := enqueueAtRate(ctx, cfg, herald, tr)
		if err == nil {
			err = waitFor(ctx, tr, n, time.Minute)
		}
		stop()
		if lerr := <-looped; lerr != nil {
			err = errors.Join(err, fmt.Errorf("bare loop: %w", lerr))
		}
		if lerr := <-listening; lerr != nil && !errors.Is(lerr, context.Canceled) && err == nil {
			err = fmt.Errorf("in-process wakeup: %w", lerr)
		}
		if err != nil {
			return nil, err
		}
		return tr.summary(name, cfg.latencyDur), nil
	}
}

// bareLoop leases batches of 100 events (the relay's default BatchSize)
// until one comes back short, records each leased event as received and
// marks the batch, then waits for wake or 250 ms. It returns nil once ctx
// ends.
func bareLoop(ctx context.Context, db *sql.DB, lease, mark string, tr *tracker, wake <-chan struct{}) error {
	const batch = 100
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var seqs strings.Builder
	ids := make([]uuid.UUID, 0, batch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
		for {
			ids = ids[:0]
			k, err := relaybench.LeaseBare(ctx, db, lease, "bare", batch, &seqs, &ids)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			for _, id := range ids {
				tr.received(id, time.Time{})
			}
			if k > 0 {
				if _, err := db.ExecContext(ctx, mark, time.Now(), seqs.String(), "bare"); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
			}
			if k < batch {
				break
			}
		}
	}
}

func riverLatency(name string, tuned bool) func(context.Context, config) ([]figure, error) {
	return func(ctx context.Context, cfg config) ([]figure, error) {
		pool, err := riverPool(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		if err := riverMigrate(ctx, pool); err != nil {
			return nil, err
		}
		if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
			return nil, err
		}
		tr := newTracker()
		wk := &riverWorker{fn: func(j *river.Job[riverArgs]) { tr.received(j.ID, time.Time{}) }}
		client, err := river.NewClient(riverpgxv5.New(pool), riverConfig(tuned, wk))
		if err != nil {
			return nil, err
		}
		if err := client.Start(ctx); err != nil {
			return nil, err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = client.Stop(sctx)
		}()
		tr.start = time.Now()
		n, err := pace(ctx, cfg.rate, cfg.latencyDur, func(int) error {
			res, err := client.Insert(ctx, riverArgs{Body: `{"model": "library.Loan", "operation": "updated", "pk": 7}`}, nil)
			if err != nil {
				return err
			}
			tr.committed(res.Job.ID, time.Now(), 0)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, tr, n, time.Minute); err != nil {
			return nil, err
		}
		return tr.summary(name, cfg.latencyDur), nil
	}
}

// tableStats is herald_outbox as pg_stat_user_tables and the relation
// sizes show it at one moment.
type tableStats struct {
	dead, live, autovacuums  int64
	pending, unordered, heap int64 // bytes
	wal                      int64 // pg_current_wal_lsn, bytes
	checkpoints              int64 // pg_stat_bgwriter: timed + requested
}

const tableStatsSQL = `SELECT s.n_dead_tup, s.n_live_tup, s.autovacuum_count,
    pg_relation_size('herald_outbox_pending_idx'), coalesce(pg_relation_size(to_regclass('herald_outbox_pending_unordered_idx')), 0),
    pg_relation_size('herald_outbox'), pg_current_wal_lsn() - '0/0'::pg_lsn,
    (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)
FROM pg_stat_user_tables s WHERE s.relid = 'herald_outbox'::regclass`

// probeTableSQL is the control beside herald's latency runs: a one-row
// table of the run's schema whose row an autocommit UPDATE changes 20
// times a second, so that each minute shows what a plain fsync'd commit
// of the same server cost at the same time.
const probeTableSQL = `CREATE TABLE IF NOT EXISTS peerbench_probe (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO peerbench_probe VALUES (1, 0) ON CONFLICT DO NOTHING`

// probeCommits runs the control until ctx ends, recording each UPDATE's
// time by the minute it started in.
func (t *tracker) probeCommits(ctx context.Context, db *sql.DB, d time.Duration) {
	if d < 2*time.Minute {
		return
	}
	if _, err := db.ExecContext(ctx, probeTableSQL); err != nil {
		return
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t0 := time.Now()
		if _, err := db.ExecContext(ctx, `UPDATE peerbench_probe SET v = v + 1 WHERE id = 1`); err != nil {
			return
		}
		took := time.Since(t0)
		t.mu.Lock()
		t.probes = append(t.probes, sample{t0.Sub(t.start), took})
		t.mu.Unlock()
	}
}

// sampleStats reads tableStats at the start and at the end of every
// minute of a run of two minutes or more; it returns after the last
// minute, or when ctx ends.
func (t *tracker) sampleStats(ctx context.Context, db *sql.DB, d time.Duration) {
	if d < 2*time.Minute {
		return
	}
	start := time.Now()
	for i := range int((d+time.Minute-1)/time.Minute) + 1 {
		if i > 0 {
			timer := time.NewTimer(time.Until(start.Add(time.Duration(i) * time.Minute)))
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
		var s tableStats
		if err := db.QueryRowContext(ctx, tableStatsSQL).Scan(&s.dead, &s.live, &s.autovacuums, &s.pending, &s.unordered, &s.heap, &s.wal, &s.checkpoints); err != nil {
			return
		}
		t.mu.Lock()
		t.stats = append(t.stats, s)
		t.mu.Unlock()
	}
}

// byMinute is the Markdown table of where each minute's time went, for
// runs of two minutes or more with spans: by the minute of each event's
// commit, the p99 of the writer's transaction, commit → lease, lease →
// delivery and delivery → mark, and herald_outbox at the minute's end.
// Called with t.mu held.
func (t *tracker) byMinute(d time.Duration) string {
	if t.spans == nil || d < 2*time.Minute {
		return ""
	}
	n := int((d + time.Minute - 1) / time.Minute)
	type minute struct{ e2e, tx, toLease, leaseToRecv, recvToMark []time.Duration }
	ms := make([]minute, n)
	for _, s := range t.spans {
		if s.commit.IsZero() || s.recv.IsZero() {
			continue
		}
		i := int(s.commit.Sub(t.start) / time.Minute)
		if i < 0 || i >= n {
			continue
		}
		m := &ms[i]
		m.e2e = append(m.e2e, max(0, s.recv.Sub(s.commit)))
		m.tx = append(m.tx, s.tx)
		if !s.lease.IsZero() {
			m.toLease = append(m.toLease, s.lease.Sub(s.commit))
			m.leaseToRecv = append(m.leaseToRecv, s.recv.Sub(s.lease))
		}
		if !s.mark.IsZero() {
			m.recvToMark = append(m.recvToMark, s.mark.Sub(s.recv))
		}
	}
	probes := make([][]time.Duration, n)
	for _, p := range t.probes {
		if i := int(p.at / time.Minute); i >= 0 && i < n {
			probes[i] = append(probes[i], p.lat)
		}
	}
	var b strings.Builder
	b.WriteString("p99 by the minute of the commit, ms (commit → lease: to the database's now() of the lease statement, so it may be negative by the clocks' difference); " +
		"control: a one-row autocommit UPDATE of another table, 20 a second (probeCommits); WAL and checkpoints during the minute; herald_outbox at the minute's end (pg_stat_user_tables, relation sizes).\n\n")
	b.WriteString("| minute | events | p50 | p99 | writer's tx p99 | commit → lease p99 | lease → delivery p99 | delivery → marked p99 | control commit p50 / p99 | WAL MB | checkpoints | dead tuples | live tuples | autovacuums | pending_idx MB | pending_unordered_idx MB | heap MB |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	mb := func(v int64) string { return fmt.Sprintf("%.1f", float64(v)/(1<<20)) }
	for i, m := range ms {
		fmt.Fprintf(&b, "| %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f / %.2f |", i+1, len(m.e2e), pct(m.e2e, 0.5), pct(m.e2e, 0.99),
			pct(m.tx, 0.99), pct(m.toLease, 0.99), pct(m.leaseToRecv, 0.99), pct(m.recvToMark, 0.99), pct(probes[i], 0.5), pct(probes[i], 0.99))
		if i+1 < len(t.stats) {
			s0, s := t.stats[i], t.stats[i+1]
			fmt.Fprintf(&b, " %s | %d | %d | %d | %d | %s | %s | %s |\n", mb(s.wal-s0.wal), s.checkpoints-s0.checkpoints,
				s.dead, s.live, s.autovacuums, mb(s.pending), mb(s.unordered), mb(s.heap))
		} else {
			b.WriteString(" | | | | | | | |\n")
		}
	}
	ratio := func(first, last []time.Duration) string {
		if f := pct(first, 0.99); f > 0 {
			return fmt.Sprintf("%.2f", pct(last, 0.99)/f)
		}
		return "–"
	}
	fmt.Fprintf(&b, "\nLast minute's p99 ÷ first's: commit → delivery %s, writer's transaction %s, control commit %s.\n",
		ratio(ms[0].e2e, ms[n-1].e2e), ratio(ms[0].tx, ms[n-1].tx), ratio(probes[0], probes[n-1]))
	return b.String()
}
