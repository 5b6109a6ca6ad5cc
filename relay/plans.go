package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strings"
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
// QueryExecModeCacheDescribe with each statement: still one round trip
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
