package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// Plans of the relay's statements on PostgreSQL through pgx.
//
// pgx's default query mode (QueryExecModeCacheStatement) prepares every
// statement under a name on each connection. After five executions of a
// named statement PostgreSQL may switch it to a generic plan, costed on
// the table as it was at that moment, and keeps that plan for the
// connection's life — only ANALYZE, VACUUM or DDL on the table replan it.
// A relay whose connections first poll an empty or small outbox (a new
// deployment, a relay that keeps up, DeleteOnPublish) is handed plans that
// read the whole table, the cheapest way then, and with autovacuum off or
// before it runs it keeps reading the whole table as the table grows:
// measured at 500 events/s, commit → delivery went from p50 1.0–1.9 ms in
// the first fifth of a 20 s run to 6.8–8.1 ms in the last, the lease and
// the mark each growing with the table (BENCHMARKS.md, "Generic plans and
// the pool", with the command).
//
// So on a pgx connection in that mode the relay passes
// QueryExecModeCacheDescribe with each statement (all but the lease of
// unordered events on a large table: "The drain's lease, prepared",
// below): still one round trip
// (the statement's description is cached), on the unnamed statement,
// which PostgreSQL plans at each execution for the table as it is then.
// The other modes (describe exec, exec, simple protocol) already plan at
// each execution and are left as configured. The mode's value is found by
// reflection on pgx's exported API — stdlib.Conn.Conn, pgx.Conn.Config,
// ConnConfig.DefaultQueryExecMode and QueryExecMode.String — so that
// herald's relay does not import pgx; a driver that is not pgx's stdlib,
// or a wrapper around it, is left alone (TestRelayStatementsPlannedPerExecution).

// pgxStdlibPkg is the package path of pgx v5's database/sql driver.
const pgxStdlibPkg = "github.com/jackc/pgx/v5/stdlib"

// detectExecMode returns the argument the relay puts first in its
// statements' arguments on db's connections: a pgx.QueryExecMode of
// "cache describe" when db's driver is pgx v5's stdlib and its connections
// default to the statement cache, else nil.
func detectExecMode(ctx context.Context, db *sql.DB) (any, error) {
	t := reflect.TypeOf(db.Driver())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != pgxStdlibPkg {
		return nil, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var mode any
	err = conn.Raw(func(dc any) error {
		mode = cacheDescribeMode(dc)
		return nil
	})
	return mode, err
}

// cacheDescribeMode returns pgx's QueryExecModeCacheDescribe when dc, a
// pgx stdlib driver connection, defaults to QueryExecModeCacheStatement;
// nil otherwise (another mode, or not the API it expects).
func cacheDescribeMode(dc any) (mode any) {
	defer func() {
		if recover() != nil {
			mode = nil
		}
	}()
	call := func(v reflect.Value, name string) (reflect.Value, bool) {
		m := v.MethodByName(name)
		if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
			return reflect.Value{}, false
		}
		return m.Call(nil)[0], true
	}
	pc, ok := call(reflect.ValueOf(dc), "Conn")
	if !ok || pc.IsNil() {
		return nil
	}
	cfg, ok := call(pc, "Config")
	if !ok || cfg.Kind() != reflect.Pointer || cfg.IsNil() || cfg.Elem().Kind() != reflect.Struct {
		return nil
	}
	def := cfg.Elem().FieldByName("DefaultQueryExecMode")
	if !def.IsValid() || !def.CanInt() || modeName(def) != "cache statement" {
		return nil
	}
	for i := range int64(16) {
		v := reflect.New(def.Type()).Elem()
		v.SetInt(i)
		if modeName(v) == "cache describe" {
			return v.Interface()
		}
	}
	return nil
}

func modeName(v reflect.Value) string {
	s, ok := v.Interface().(fmt.Stringer)
	if !ok {
		return ""
	}
	return strings.ToLower(s.String())
}

// args returns a statement's arguments with the relay's exec mode first,
// when it has one (see detectExecMode).
func (r *Relay) args(args []any) []any {
	m := r.execMode.Load()
	if m == nil {
		return args
	}
	return append([]any{*m}, args...)
}

func (r *Relay) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if r.dialect == envelope.MySQL {
		q, args = mysqlArgs(q, args)
	}
	return r.db.QueryContext(ctx, q, r.args(args)...)
}

func (r *Relay) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if r.dialect == envelope.MySQL {
		q, args = mysqlArgs(q, args)
	}
	return r.db.ExecContext(ctx, q, r.args(args)...)
}

func (r *Relay) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if r.dialect == envelope.MySQL {
		q, args = mysqlArgs(q, args)
	}
	return r.db.QueryRowContext(ctx, q, r.args(args)...)
}

// Connection churn.
//
// database/sql keeps at most two idle connections unless told otherwise
// (SetMaxIdleConns). A relay sharing its *sql.DB with the service's writers
// — or a relay alone whose lease, renewals and marks overlap — has more in
// use than that at times; each connection given back beyond the limit is
// closed, and the next statement opens a new one (a PostgreSQL backend
// started, authenticated, and pgx's statement descriptions learned anew).
// Measured at 500 events/s with GORM writers and the relay on one pool
// (integration/peerbench): commit → delivery p50 1.8–3.5 ms, p99 8–15 ms
// with SetMaxIdleConns(16); p50 7.7–7.8 ms, p99 33–34 ms at the default,
// which closed about 70 connections a second (BENCHMARKS.md, "Generic
// plans and the pool", with the command). The relay cannot tell the pool's limit, but it
// sees the closes (DBStats.MaxIdleClosed): more than poolChurnPerMinute in
// a minute is logged at WARN, at most once per poolWarnEvery.
const (
	poolChurnPerMinute = 30
	poolWarnEvery      = 10 * time.Minute
)

// poolWatch is the poll loop's view of its pool's closes.
type poolWatch struct {
	every  time.Duration // 0 = time.Minute; tests shorten it
	at     time.Time     // when closed was read
	closed int64
	warned time.Time
}

// watchPool logs, at most once per poolWarnEvery, that the relay's
// *sql.DB closes connections faster than poolChurnPerMinute for lack of
// idle room. Called by the poll loop after each poll.
func (r *Relay) watchPool(ctx context.Context) {
	w := &r.pool
	every := w.every
	if every == 0 {
		every = time.Minute
	}
	now := r.now()
	if !w.at.IsZero() && now.Sub(w.at) < every {
		return
	}
	st := r.db.Stats()
	if !w.at.IsZero() {
		closed := st.MaxIdleClosed - w.closed
		elapsed := now.Sub(w.at)
		threshold := max(2, int64(math.Ceil(poolChurnPerMinute*elapsed.Minutes())))
		if closed >= threshold && (w.warned.IsZero() || now.Sub(w.warned) >= poolWarnEvery) {
			w.warned = now
			r.log.WarnContext(ctx, "herald/relay: the *sql.DB closes connections for lack of idle room and opens new ones for later statements, "+
				"which adds milliseconds to each poll; call db.SetMaxIdleConns with at least the connections it has in use at peak "+
				"(database/sql keeps 2 idle by default), or give the relay a *sql.DB of its own",
				slog.String("relay", r.cfg.Name), slog.Int64("closed", closed), slog.Duration("in", elapsed.Round(time.Millisecond)),
				slog.Int("open", st.OpenConnections), slog.Int("max_open", st.MaxOpenConnections))
		}
	}
	w.at, w.closed = now, st.MaxIdleClosed
}

// The drain's lease, prepared.
//
// Planning at each execution has a price: the lease of unordered events —
// the statement a drain runs once per batch — took 0.35 ms to plan and
// 0.2 ms to parse on the server, a fifth of a poll at BatchSize 100
// (BENCHMARKS.md, "fifteenth pass"). Prepared, with the plan PostgreSQL
// keeps after five executions, the same drain ran 21% faster. What made
// the relay plan each execution is the plan kept from a small table: on an
// empty outbox PostgreSQL's generic plan of this lease reads the whole
// table for the carried mark and for the update (sequential scans), and a
// connection keeps it while the table grows.
//
// So the relay runs the lease of unordered events (and its forms with a
// carried mark, and by lock) prepared — on the connections' own mode,
// pgx's statement cache, the mode detectExecMode overrides — only while
// the outbox table holds at least planMinBytes (pg_relation_size, read
// every planRecheck): a table that large has its generic plan scan the
// indexes, as the custom plans do. Each statement's text ends with the
// plan's epoch (a comment), and a new epoch — a new prepared statement,
// planned anew on the table as it is — begins when the relay turns
// prepared leases on, when the table's size has doubled or halved since
// the epoch began, when the epoch is planMaxAge old, and when a prepared
// lease was slow (jitSlow) in an epoch at least planRecheck old: a plan
// made on a table that was emptied and filled again under it (TRUNCATE)
// lasts no longer than that. The statements of past epochs are left to
// pgx's cache, which evicts the least recently used. The other
// statements are planned at each execution, as above.

// planMinBytes is the outbox table's size from which the lease of
// unordered events runs prepared: Relay.planMin's value at New, unless
// internal/relayknob says otherwise (HERALD_RELAY_PREPARED=1 sets 0 for
// the relay's tests; the fault harness's relays too).
const planMinBytes int64 = 8 << 20

const (
	planRecheck = 10 * time.Second // how often the table's size is read
	planMaxAge  = 5 * time.Minute  // the longest an epoch lasts
)

// planState is whether the lease of unordered events runs prepared, and
// the epoch its text carries.
type planState struct {
	mu      sync.Mutex
	on      bool
	epoch   int64
	suffix  string    // "\n/* herald plan <epoch> */"
	began   time.Time // when the epoch began
	size    int64     // the table's size then, bytes
	checked time.Time // when the size was last read
}

const planSizeSQL = `SELECT pg_relation_size($1::regclass)`

// unorderedForm reports whether q is a form of the lease of unordered
// events (leaseUnorderedPostgres).
func (r *Relay) unorderedForm(q string) bool {
	return q != "" && (q == r.sql.leaseUnordered || q == r.sql.leaseUnorderedMarked ||
		q == r.sql.leaseUnorderedDeleted || q == r.sql.leaseUnorderedLocked)
}

// planned returns the text lease form q runs with, and whether it runs
// prepared: a form of the lease of unordered events, on pgx connections
// in the statement cache mode (execMode set), while the table is at least
// planMinBytes large.
func (r *Relay) planned(ctx context.Context, q string) (string, bool) {
	if r.execMode.Load() == nil || !r.unorderedForm(q) {
		return q, false
	}
	p := &r.plan
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.checked.IsZero() || now.Sub(p.checked) >= planRecheck {
		p.checked = now
		var size int64
		if err := r.queryRow(ctx, planSizeSQL, r.table.Quoted).Scan(&size); err != nil {
			r.log.DebugContext(ctx, "herald/relay: could not read the outbox table's size; leasing unprepared", slog.String("relay", r.cfg.Name), slog.Any("error", err))
			p.on = false
		} else {
			p.sized(now, size, r.planMin)
		}
	}
	if !p.on {
		return q, false
	}
	return q + p.suffix, true
}

// sized takes the table's size, read at now: prepared leases on from minSize
// bytes, and a new epoch when they turn on, when the size has doubled or
// halved since the epoch began, or when the epoch is planMaxAge old.
func (p *planState) sized(now time.Time, size, minSize int64) {
	switch {
	case size < minSize:
		p.on = false
	case !p.on || size >= 2*p.size || 2*size <= p.size || now.Sub(p.began) >= planMaxAge:
		p.on = true
		p.newEpoch(now, size)
	}
}

func (p *planState) newEpoch(now time.Time, size int64) {
	p.epoch++
	p.suffix = "\n/* herald plan " + strconv.FormatInt(p.epoch, 10) + " */"
	p.began, p.size = now, size
}

// slowPrepared is told of a prepared lease that took longer than jitSlow
// says: its plan may have been made on a table emptied since; a new epoch
// plans it again, unless the epoch is younger than planRecheck.
func (r *Relay) slowPrepared() {
	p := &r.plan
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); p.on && now.Sub(p.began) >= planRecheck {
		p.newEpoch(now, p.size)
	}
}
