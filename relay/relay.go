package relay

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/relayknob"
	"github.com/heraldgo/herald/wakeup"
)

// Relay leases outbox events, delivers them and marks them, at least once
// and in order per ordering key. One Relay runs one poll loop; run several
// (in one process or many) to share a table. A Relay is safe for
// concurrent use.
type Relay struct {
	db      *sql.DB
	d       delivery.Delivery
	batch   delivery.BatchDelivery // d as a BatchDelivery, or nil
	txd     delivery.TxDelivery    // d as a TxDelivery, or nil (relay/txmark.go)
	cfg     Config
	dialect envelope.Dialect
	my      mysqlStatements // MySQL's statements beside sql (sql_mysql.go)
	table   envelope.Table
	filter  filter
	sql     statements
	fargs   []any // the topic filter's arguments
	extra   []string
	log     *slog.Logger

	// maxPollNoWakeup caps the wait while the wakeup cannot listen: the
	// MaxPollInterval the relay would have without one.
	maxPollNoWakeup time.Duration

	// now is the relay host's clock. It only measures how long things took
	// (the lease reckoning) and when this relay's own retries fall due;
	// every time stored or compared in the table is the database's.
	now func() time.Time
	// dbClock, when set (tests), stands for the database's clock: bound
	// instead of PostgreSQL's now(), read instead of SQLite's time.Now.
	dbClock func() time.Time
	jitter  func() float64 // uniform in [0, 1)

	// tableOK is set once the table was found with every column; New
	// leaves it unset when the database did not answer, and the loop
	// checks the table when it first does.
	tableOK atomic.Bool
	// execMode, when set, goes first in every statement's arguments: pgx's
	// QueryExecModeCacheDescribe (see detectExecMode). Found with the table.
	execMode atomic.Pointer[any]
	// plan: whether the lease of unordered events runs prepared, and
	// under which text (see Relay.planned).
	plan    planState
	planMin int64 // planMinBytes, unless a test sets it
	// noJIT: the database may JIT-compile the lease, which then runs in a
	// transaction with jit off when its estimate comes near jit_above_cost
	// (see jit.go). Found with the table.
	noJIT atomic.Bool
	// jitAbove: the connections' jit_above_cost (float64 bits); jitCost:
	// each lease form's estimated cost (leaseNeedsJITOff).
	jitAbove atomic.Uint64
	jitMu    sync.Mutex
	jitCost  map[string]jitEstimate
	walk     atomic.Int64 // keys the next lease walks for heads (see leaseBatchPostgres)
	runs     atomic.Bool  // the next lease takes runs of keys (leaseRunsPostgres): evidence of keys with events behind their heads
	// lastKeys are the ordering keys of the last non-empty lease; noRuns:
	// a runs lease found no followers since the last evidence of a key's
	// backlog (both the poll loop's own).
	lastKeys map[string]struct{}
	noRuns   bool
	// walkAfter is the key the next key walk starts after ("" from the
	// first key; see walkedTo and leaseCandidatesMySQL); walkIdle: the
	// last walk asked visited every key from the first and no lease
	// returned an event since. The poll loop's own.
	walkAfter string
	walkIdle  bool
	walkEnds  int // walkEnd statements run, for tests
	// noUnordered: the next MySQL lease leaves out its unordered source
	// (see leaseCandidatesMySQL); the poll loop's own.
	noUnordered bool
	// carried is a delivered batch's mark carried into the next lease's
	// transaction (pending.go); the poll loop's own.
	carried *carriedMark
	// held is the current batch's lease by lock (Config.LeaseByLock): set
	// by lease, committed by markCarry (markHeld); the poll's own.
	held *heldLease
	// floor is where the next lease's candidate scans start, floorLeases
	// counts the full leases that set it since the last lease from the
	// start (see leaseFloor).
	floor, floorLeases atomic.Int64
	// resume is the floor a lease from the start of the table replaced
	// in a drain (the floor the full lease before it set), 0 when none;
	// leaseAgain: that lease came back short, so the poll loop leases
	// again at once, from resume (see lease). The poll loop's own.
	resume     int64
	leaseAgain bool
	// fromStartCost and fromStartEnd: how long the last floored lease from
	// the start of the table took, and when it ended (fromStartDue);
	// fromStartEvery (tests): no pacing, every floorEvery-th lease. The
	// poll loop's own.
	fromStartCost  time.Duration
	fromStartEnd   time.Time
	fromStartEvery bool
	// unordered: the next lease from the floor takes unordered events
	// alone (see afterLease).
	unordered atomic.Bool
	// successors: the next lease carrying a mark is the lease of the
	// delivered keys' next events (leaseSuccessorsPostgres; see
	// afterLease); successorLeases counts those run in a row. The poll
	// loop's own.
	successors      bool
	successorLeases int
	// shortLeases counts short leases of unordered events only (see lease).
	shortLeases atomic.Int64
	cleanups    atomic.Int64 // scheduled cleanup passes finished, for tests
	// onWait, when set (tests), is told of each wait between polls;
	// onLease of each lease statement run.
	onWait  func(time.Duration)
	onLease func(query string)

	// poke asks the loop to poll now (a wakeup, RetryDeadLettered).
	poke          chan struct{}
	listeningFlag atomic.Bool
	polls         atomic.Int64 // polls started, for tests and benchmarks
	pool          poolWatch    // the poll loop's own

	mu      sync.Mutex
	run     *run          // the current run; nil when not running
	stopped chan struct{} // closed when the last run ended
}

// run is one Start…Stop of a relay.
type run struct {
	stop    context.CancelCauseFunc // graceful: ends the waits, the batch in hand finishes
	kill    context.CancelCauseFunc // forced: cancels deliveries and queries
	soft    context.Context
	done    chan struct{}
	waiting chan struct{} // closed when the loop waits between polls (tests)
	err     error         // why the run ended by itself (a configuration error); set before done closes
}

// errStopped is the cause of a graceful stop.
var errStopped = errors.New("herald/relay: stopped")

// New returns a relay that delivers the events of cfg.Table in db through
// d. It validates cfg (errors match envelope.ErrConfiguration and name the
// field), detects the dialect when cfg.Dialect is empty, and checks that
// the table exists with every column the relay reads (within 30 s): a
// missing table or column is an envelope.ErrConfiguration error.
//
// The database need not be up: when it does not answer, New logs a
// warning and returns the relay anyway, and the relay checks the table
// when the database first answers (a missing table then ends the run, and
// Run returns the ErrConfiguration error). An unreachable database is never
// an ErrConfiguration error. Only a driver New does not know, with
// cfg.Dialect empty, needs the database to tell the dialect; New then
// returns the connection error.
func New(db *sql.DB, d delivery.Delivery, cfg Config) (*Relay, error) {
	if db == nil {
		return nil, cfgErr("db", "nil *sql.DB")
	}
	if d == nil {
		return nil, cfgErr("delivery", "nil Delivery")
	}
	explicitMax := cfg.MaxPollInterval != 0
	cfg = cfg.withDefaults()
	f, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dialect := cfg.Dialect
	if dialect == "" {
		if dialect, err = detectDialect(ctx, db); err != nil {
			return nil, err
		}
	} else if err := dialect.Validate(); err != nil {
		return nil, err
	}
	if cfg.AsyncCommit && dialect != envelope.Postgres {
		return nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: "relay.Config.AsyncCommit",
			Msg: fmt.Sprintf("PostgreSQL only (synchronous_commit); the dialect is %s, whose commits are made durable by the connection's own settings (PRAGMA synchronous): leave AsyncCommit false", dialect)}
	}
	if cfg.LeaseByLock && dialect != envelope.Postgres {
		return nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: "relay.Config.LeaseByLock",
			Msg: fmt.Sprintf("PostgreSQL only (row locks held through the delivery with SKIP LOCKED and idle_in_transaction_session_timeout); the dialect is %s: leave LeaseByLock false", dialect)}
	}
	t, err := envelope.ParseTable(dialect, cfg.Table)
	if err != nil {
		return nil, err
	}
	if dc, ok := cfg.Wakeup.(wakeup.DialectChecker); ok {
		if err := dc.CheckDialect(dialect); err != nil {
			return nil, err
		}
	}
	var extra string
	for _, c := range cfg.ExtraColumns {
		if dialect == envelope.SQLite {
			// SQLite reads a double-quoted name that is no column as a
			// string literal; a grave-quoted one is always an identifier,
			// so a missing column is an error, not the column's name.
			extra += ", `" + c + "`"
		} else {
			extra += ", " + dialect.QuoteIdent(c)
		}
	}
	all := envelope.EventColumns + ", tenant" + extra // tenant: schema version 6 (MySQL 2), found missing at start-up
	b := sqlBuilder{d: dialect, t: t, columns: leaseColumns + extra, allColumns: all, async: cfg.AsyncCommit, batch: cfg.BatchSize}
	st, fargs := b.build(f)
	var my mysqlStatements
	if dialect == envelope.MySQL {
		st, my, fargs = b.buildMySQL(f)
	}
	f2, _, _ := b.filterCondition(f, 2)
	st.backlogByTenant = b.render(backlogByTenantSQL, f2, "")
	r := &Relay{
		db: db, d: d, cfg: cfg, dialect: dialect, table: t, filter: f, sql: st, my: my, fargs: fargs,
		extra: cfg.ExtraColumns, log: cfg.Logger, now: time.Now, jitter: mrand.Float64,
		poke: make(chan struct{}, 1), stopped: make(chan struct{}),
		maxPollNoWakeup: cfg.MaxPollInterval, planMin: planMinBytes,
	}
	if v := relayknob.PlanMinBytes.Load(); v >= 0 {
		r.planMin = v
	}
	r.walk.Store(int64(cfg.BatchSize)) // the first lease looks at every ready key
	if cfg.Wakeup != nil && !explicitMax {
		r.maxPollNoWakeup = max(DefaultMaxPollInterval, cfg.MinPollInterval)
	}
	close(r.stopped)
	if bd, ok := d.(delivery.BatchDelivery); ok {
		r.batch = bd
	}
	if td, ok := delivery.AsTx(d); ok {
		if dialect == envelope.MySQL {
			return nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: "relay.New",
				Msg: "a delivery.TxDelivery (writes committed with the mark, as delivery/river's) is not supported on MySQL yet: use a plain Delivery (for River, river.NewAtLeastOnce)"}
		}
		if cfg.LeaseByLock {
			return nil, cfgErr("LeaseByLock", "set with a delivery.TxDelivery (%T), whose transaction would wait for the rows the relay's own transaction holds locked: leave LeaseByLock false", d)
		}
		r.txd = td
	}
	switch err := r.checkTable(ctx); {
	case err == nil:
	case errors.Is(err, envelope.ErrConfiguration):
		return nil, err
	default:
		r.log.WarnContext(ctx, "herald/relay: the database does not answer; the relay is created anyway and checks the outbox table when it does",
			slog.String("relay", r.cfg.Name), slog.String("table", r.table.Name), slog.Any("error", err))
	}
	return r, nil
}

// errUnreachable marks a checkTable error that says nothing about the
// table: the database did not answer.
var errUnreachable = errors.New("herald/relay: the database does not answer")

// checkTable checks that the table has every column the relay reads. It
// returns nil and remembers it, an envelope.ErrConfiguration error when
// the database answers that the table or a column is missing (or refuses
// the statement), or an error wrapping errUnreachable when the database
// does not answer.
func (r *Relay) checkTable(ctx context.Context) error {
	err := r.checkColumns(ctx)
	if err != nil && !isMissing(err) {
		// The statement failed for another reason: is the database up?
		if perr := r.db.PingContext(ctx); perr != nil {
			if rerr := refusal(perr); rerr != nil {
				return rerr
			}
			return fmt.Errorf("%w: %w%s", errUnreachable, perr, poolerHint(perr))
		}
		err = r.checkColumns(ctx) // it is now; ask again
	}
	if err != nil {
		return &envelope.Error{Kind: envelope.ErrConfiguration, Where: "relay.Config.Table",
			Msg: fmt.Sprintf("outbox table %s is missing, lacks a column the relay reads (%s, tenant%s) or its table of paused topics %s (the relay needs schema version 6, on MySQL 2); create or migrate it with envelope.Migrate(ctx, db, %q, %q) or the scripts of envelope.MigrationSQL (herald migrate print)%s",
				r.table.Name, envelope.EventColumns, extraList(r.extra), outbox.PausedTable(r.table), r.dialect, r.table.Name, poolerHint(err)),
			Err: err}
	}
	if r.dialect == envelope.Postgres {
		if err := r.checkPlainTable(ctx); err != nil {
			return err
		}
		mode, err := detectExecMode(ctx, r.db)
		if err != nil {
			return fmt.Errorf("%w: %w%s", errUnreachable, err, poolerHint(err))
		}
		if mode != nil {
			r.execMode.Store(&mode)
		}
		jit, above, err := detectJIT(ctx, r.db)
		if err != nil {
			return fmt.Errorf("%w: %w%s", errUnreachable, err, poolerHint(err))
		}
		r.jitAbove.Store(math.Float64bits(above))
		r.noJIT.Store(jit)
	}
	if r.dialect == envelope.MySQL {
		if err := r.checkMySQLIndexes(ctx); err != nil {
			return err
		}
	}
	r.tableOK.Store(true)
	return nil
}

// checkMySQLIndexes makes sure the indexes the MySQL lease names (FORCE
// INDEX, sql_mysql.go) exist: without one every lease would fail. A
// {base}_pending_key_idx of a table older than MySQL version 3 works but
// leads with ordering_key, and the key walk then reads published events
// too: a WARN says to migrate.
func (r *Relay) checkMySQLIndexes(ctx context.Context) error {
	rows, err := r.db.QueryContext(ctx, `SELECT index_name, column_name FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = ? AND index_name IN (?, ?) AND seq_in_index = 1`,
		r.table.Name, r.table.Base+"_pending_idx", r.table.Base+"_pending_key_idx")
	if err != nil {
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	defer rows.Close()
	first := map[string]string{}
	for rows.Next() {
		var idx, col string
		if err := rows.Scan(&idx, &col); err != nil {
			return fmt.Errorf("%w: %w", errUnreachable, err)
		}
		first[idx] = col
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	for _, idx := range []string{r.table.Base + "_pending_idx", r.table.Base + "_pending_key_idx"} {
		if _, ok := first[idx]; !ok {
			return &envelope.Error{Kind: envelope.ErrConfiguration, Where: "relay.Config.Table",
				Msg: fmt.Sprintf("outbox table %s has no index %s, which the MySQL lease reads; create or migrate it with envelope.Migrate(ctx, db, %q, %q) or the scripts of envelope.MigrationSQL (herald migrate print)",
					r.table.Name, idx, r.dialect, r.table.Name)}
		}
	}
	if col := first[r.table.Base+"_pending_key_idx"]; !strings.EqualFold(col, "published_at") {
		r.log.WarnContext(ctx, "herald/relay: the outbox's pending-key index is older than MySQL schema version 3: leases walk published events too; migrate with envelope.Migrate",
			slog.String("relay", r.cfg.Name), slog.String("table", r.table.Name), slog.Int("want_version", envelope.LatestMySQLVersion))
	}
	return nil
}

// plainTableSQL says whether the outbox table is partitioned or has
// inheritance children (PostgreSQL).
const plainTableSQL = `SELECT c.relkind = 'p' OR EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid)
FROM pg_class c WHERE c.oid = to_regclass($1)`

// checkPlainTable refuses a partitioned outbox table, or one with
// inheritance children (PostgreSQL): the lease updates the rows it locked
// by their physical address (ctid, see leaseBatchPostgres), which is
// unique within one table only.
func (r *Relay) checkPlainTable(ctx context.Context) error {
	var split bool
	if err := r.db.QueryRowContext(ctx, plainTableSQL, r.table.Quoted).Scan(&split); err != nil {
		return fmt.Errorf("%w: %w%s", errUnreachable, err, poolerHint(err))
	}
	if split {
		return &envelope.Error{Kind: envelope.ErrConfiguration, Where: "relay.Config.Table",
			Msg: fmt.Sprintf("outbox table %s is partitioned or has inheritance children: the relay needs one plain table (its lease updates the rows it locked by their ctid, unique within one table only); create it with envelope.Migrate", r.table.Name)}
	}
	return nil
}

// checkColumns runs checkTableSQL: an error when the table or one of the
// columns is missing.
func (r *Relay) checkColumns(ctx context.Context) error {
	rows, err := r.db.QueryContext(ctx, r.sql.checkTable)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

func extraList(cols []string) string {
	if len(cols) == 0 {
		return ""
	}
	return ", " + strings.Join(cols, ", ")
}

// Name returns the relay's name, as written to leased_by.
func (r *Relay) Name() string { return r.cfg.Name }

// Table returns the outbox table the relay delivers from, as configured
// ("" became envelope.DefaultTable).
func (r *Relay) Table() string { return r.table.Name }

// Dialect returns the dialect the relay speaks.
func (r *Relay) Dialect() envelope.Dialect { return r.dialect }

// Start starts the relay's poll loop (and its wakeup listener and
// scheduled cleanup, when configured) in the background. ctx bounds the
// start only: the relay runs until Stop (use Run to tie it to a context);
// its values are passed on to deliveries. A database that does not answer
// does not stop it: the loop logs and keeps trying, its wait growing up to
// MaxPollInterval, and delivers once the database is back. Start fails
// only on a closed *sql.DB. Start on a running relay does nothing; Start
// after Stop starts it again.
func (r *Relay) Start(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a ping only tells; it must not hold Start
	err := r.db.PingContext(pctx)
	cancel()
	if err != nil {
		if isClosedDB(err) {
			return fmt.Errorf("herald/relay: start %s: %w", r.cfg.Name, err)
		}
		r.log.WarnContext(ctx, "herald/relay: starting while the database does not answer; the relay keeps trying",
			slog.String("relay", r.cfg.Name), slog.Any("error", err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev := r.run; prev != nil {
		if prev.soft.Err() == nil {
			return nil // running
		}
		// Still finishing a stop: wait for it, then start anew.
		r.mu.Unlock()
		select {
		case <-prev.done:
		case <-ctx.Done():
			r.mu.Lock()
			return fmt.Errorf("herald/relay: start %s: the previous run is still stopping: %w", r.cfg.Name, context.Cause(ctx))
		}
		r.mu.Lock()
		if r.run != nil {
			return nil // someone else started it meanwhile
		}
	}
	base := context.WithoutCancel(ctx)
	soft, stop := context.WithCancelCause(base)
	hard, kill := context.WithCancelCause(base)
	ru := &run{stop: stop, kill: kill, soft: soft, done: make(chan struct{}), waiting: make(chan struct{})}
	r.run = ru
	r.stopped = ru.done
	var wg sync.WaitGroup
	wg.Go(func() { r.loop(soft, hard, ru) })
	if r.cfg.Wakeup != nil {
		wg.Go(func() { r.listen(soft) })
	}
	if r.cfg.RetainPublished > 0 || r.cfg.RetainDeadLettered > 0 {
		wg.Go(func() { r.cleanupLoop(soft) })
	}
	go func() {
		wg.Wait()
		kill(errStopped)
		stop(errStopped)
		r.mu.Lock()
		if r.run == ru {
			r.run = nil
		}
		r.mu.Unlock()
		close(ru.done)
	}()
	r.log.DebugContext(ctx, "herald/relay: started", slog.String("relay", r.cfg.Name), slog.String("table", r.table.Name))
	return nil
}

// Stop stops the relay: no new poll starts, and the batch in hand is
// delivered and marked. If ctx ends first, Stop cancels the deliveries
// still running (their events are released for another relay, not counted
// as failures), returns ctx's error, and the marks are written in the
// background; Stopped tells when that is done. Stop on a relay that is not
// running does nothing.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	ru := r.run
	r.mu.Unlock()
	if ru == nil {
		return nil
	}
	ru.stop(errStopped)
	select {
	case <-ru.done:
		r.log.DebugContext(ctx, "herald/relay: stopped", slog.String("relay", r.cfg.Name))
		return nil
	case <-ctx.Done():
		select {
		case <-ru.done: // finished just as ctx ended
			return nil
		default:
		}
		cause := context.Cause(ctx)
		ru.kill(fmt.Errorf("herald/relay: stop deadline: %w", cause))
		return fmt.Errorf("herald/relay: stop %s: gave up waiting for the batch in hand (its deliveries are cancelled and its marks written in the background): %w", r.cfg.Name, cause)
	}
}

// Stopped returns a channel closed once the relay is not running: at once
// before Start, and when the current run has ended (the batch in hand
// marked) after Stop.
func (r *Relay) Stopped() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// Run starts the relay, waits for ctx to end, then stops it gracefully
// (bounded by the Lease). It returns nil after a stop caused by ctx, and
// the envelope.ErrConfiguration error of a run that ended by itself
// because the outbox table was missing when the database first answered.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	ru := r.run
	r.mu.Unlock()
	if ru == nil {
		return nil
	}
	select {
	case <-ctx.Done():
	case <-ru.done:
		return ru.err
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease)
	defer cancel()
	return r.Stop(stopCtx)
}

// addDue adds a wake for a retry due at d (none when d is zero) to dues,
// kept sorted: d rounded up to a multiple of grid, never before d (a wake
// before a retry's due time finds nothing), at most grid after it. In an
// outage every poll schedules retries: on the grid the list holds at most
// one wake per grid of the backoffs ahead, not two per poll.
func addDue(dues []time.Time, d time.Time, grid time.Duration) []time.Time {
	if d.IsZero() {
		return dues
	}
	// Rounded by adding what it lacks (Truncate would drop d's monotonic
	// reading, and the loop's waits would follow the wall clock's jumps).
	if rem := d.Sub(d.Truncate(grid)); grid > 0 && rem > 0 {
		d = d.Add(grid - rem)
	}
	i, found := slices.BinarySearchFunc(dues, d, time.Time.Compare)
	if found {
		return dues
	}
	return slices.Insert(dues, i, d)
}

// loop polls until soft ends: at once after a full batch (or one that
// delivered ordered events), else after a wait that grows from
// MinPollInterval by PollMultiplier up to MaxPollInterval, cut short by a
// wakeup or by the next retry this relay scheduled falling due.
//
// The retries of one poll's failures fall due over a spread (the
// backoff's ±10% jitter): the loop wakes at the first and at the last of
// each poll's, so that those the first wake finds not yet due are leased
// at the last, not a poll interval later (up to MaxPollInterval: a
// minute with a wakeup), and a retry waits at most MinPollInterval past
// its due time. TestRetriesSpreadByJitterAllComeDue.
func (r *Relay) loop(soft, hard context.Context, ru *run) {
	p := newPacer(r.cfg.MinPollInterval, r.cfg.MaxPollInterval, r.cfg.PollMultiplier)
	var dues []time.Time // when retries this relay scheduled fall due (relay's clock), sorted
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	waitingClosed := false
	defer r.flushCarried(hard) // a mark carried into a lease that will not run
	for soft.Err() == nil {
		start := r.now()
		// What fell due is this poll's to lease.
		fell := 0
		for fell < len(dues) && !start.Before(dues[fell]) {
			fell++
		}
		dues = slices.Delete(dues, 0, fell)
		var res pollResult
		var err error
		if !r.tableOK.Load() {
			// New could not check the table: the database did not answer.
			cctx, cancel := withTimeout(hard, r.statementTimeout(), "outbox table check")
			err = r.checkTable(cctx)
			cancel()
			if errors.Is(err, envelope.ErrConfiguration) {
				r.log.ErrorContext(hard, "herald/relay: stopping: the database refuses the relay's connection or lacks the outbox table", slog.String("relay", r.cfg.Name), slog.Any("error", err))
				ru.err = err
				return
			}
		}
		if err == nil {
			r.polls.Add(1)
			res, err = r.pollCarry(hard, true)
			r.watchPool(hard)
		}
		if err != nil {
			if hard.Err() != nil {
				return // forced stop: not an error
			}
			r.log.WarnContext(hard, "herald/relay: poll failed; retrying", slog.String("relay", r.cfg.Name), slog.Any("error", err))
		}
		dues = addDue(dues, res.nextDue, r.cfg.MinPollInterval)
		dues = addDue(dues, res.lastDue, r.cfg.MinPollInterval)
		var wait time.Duration
		// A full batch means more may be waiting: poll again at once. So
		// may a batch that delivered events with an ordering key, however
		// small: on SQLite a batch holds one event per key (on PostgreSQL
		// and MySQL a run may stop short of its key's end), so the next event of each
		// of those keys became due just now, and a backlog of few keys
		// never fills a batch — waiting here would deliver one event per
		// key per poll interval. And a lease from the start of the table
		// that came back short in a drain asked to lease again from the
		// floor (leaseAgain, see lease).
		again := r.leaseAgain
		r.leaseAgain = false
		if err == nil && (res.leased == r.cfg.BatchSize || res.keyed > 0 || again) {
			p.full()
			continue
		}
		wait = p.next()
		if r.cfg.Wakeup != nil && !r.listening() {
			wait = min(wait, r.maxPollNoWakeup)
		}
		if len(dues) > 0 {
			wait = max(0, min(wait, dues[0].Sub(r.now())))
		}
		if !waitingClosed {
			close(ru.waiting)
			waitingClosed = true
		}
		if r.onWait != nil {
			r.onWait(wait)
		}
		timer.Reset(wait)
		select {
		case <-soft.Done():
			return
		case <-timer.C:
		case <-r.poke:
			if !timer.Stop() {
				<-timer.C
			}
		}
	}
}

// pacer is the adaptive poll interval: a full batch resets it to min and
// polls at once; any other poll waits the current interval, which then
// grows by mult up to max.
type pacer struct {
	min, max, cur time.Duration
	mult          float64
}

func newPacer(lo, hi time.Duration, mult float64) *pacer {
	return &pacer{min: lo, max: hi, cur: lo, mult: mult}
}

func (p *pacer) full() { p.cur = p.min }

func (p *pacer) next() time.Duration {
	w := p.cur
	n := time.Duration(float64(p.cur) * p.mult)
	if n > p.max || n < p.cur { // capped, or overflowed
		n = p.max
	}
	p.cur = n
	return w
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
