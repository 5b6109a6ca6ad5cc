// Package oracle is a row-diff judge of captured writes: a database/sql
// driver wrapper, below everything the capture sees, that reads every
// captured table before a transaction's first write and again just before
// its COMMIT (and around each write statement run outside a transaction),
// and checks the outbox rows the transaction wrote against the difference:
// every row inserted, updated or deleted has exactly one event of that
// operation whose images equal the rows as stored (several events, when
// the transaction wrote the row several times, must chain from the stored
// row before to the stored row after), and no untouched row has one. The
// expectations come from the database, never from the capture's own
// description of what it wrote.
//
// Tables are read whole (SELECT * per table on SQLite, one statement of
// json_agg per snapshot on PostgreSQL): the oracle is for test suites,
// whose tables hold a few rows.
package oracle

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Dialect of the database under the wrapper.
type Dialect int

// The dialects the oracle reads.
const (
	SQLite Dialect = iota
	Postgres
)

// Tables describes what is captured: the table of each captured model
// (the model label of its events, "User"), and the outbox table.
type Tables struct {
	Models map[string]string // model -> table
	Outbox string            // "" = herald_outbox
	Mode   Mode              // which images the events hold
	// Omit, by table, are the columns the events leave out by
	// declaration (ent's .Sensitive() fields not named in Options.Fields).
	Omit map[string][]string
}

// Finding is one disagreement between the stored rows and the events.
type Finding struct {
	Kind   string // missed, spurious, operation, image, changed, duplicate, unknown-model
	Table  string
	Key    string
	Detail string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s %s[%s]: %s", f.Kind, f.Table, f.Key, f.Detail)
}

// Stats counts what an Oracle checked.
type Stats struct {
	Checks   int64 // transactions and autocommit statements judged
	Events   int64 // events read
	Rows     int64 // rows changed
	Findings int64
}

// Oracle judges the transactions of the connections it opens.
type Oracle struct {
	d      Dialect
	tables Tables
	models map[string]string // table -> model
	report func(Finding)

	checks, events, rows, findings atomic.Int64

	mu   sync.Mutex
	pks  map[string][]string // table -> primary key columns
	cols map[string][]string // table -> columns (SQLite)
}

// New returns an oracle for the given tables; report receives each
// finding (from the goroutine that committed the transaction).
func New(d Dialect, t Tables, report func(Finding)) *Oracle {
	if t.Outbox == "" {
		t.Outbox = "herald_outbox"
	}
	o := &Oracle{d: d, tables: t, report: report, models: map[string]string{}, pks: map[string][]string{}, cols: map[string][]string{}}
	for m, tb := range t.Models {
		o.models[tb] = m
	}
	return o
}

// Stats returns the counts so far.
func (o *Oracle) Stats() Stats {
	return Stats{Checks: o.checks.Load(), Events: o.events.Load(), Rows: o.rows.Load(), Findings: o.findings.Load()}
}

// Connector returns a connector of drv on dsn whose connections the
// oracle watches.
func (o *Oracle) Connector(drv driver.Driver, dsn string) driver.Connector {
	return &connector{o: o, drv: drv, dsn: dsn}
}

// OpenDB opens a *sql.DB on drv and dsn, watched by the oracle.
func (o *Oracle) OpenDB(drv driver.Driver, dsn string) *sql.DB {
	return sql.OpenDB(o.Connector(drv, dsn))
}

type connector struct {
	o   *Oracle
	drv driver.Driver
	dsn string
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	var (
		inner driver.Conn
		err   error
	)
	if dc, ok := c.drv.(driver.DriverContext); ok {
		var cn driver.Connector
		if cn, err = dc.OpenConnector(c.dsn); err != nil {
			return nil, err
		}
		inner, err = cn.Connect(ctx)
	} else {
		inner, err = c.drv.Open(c.dsn)
	}
	if err != nil {
		return nil, err
	}
	return &conn{o: c.o, Conn: inner}, nil
}

func (c *connector) Driver() driver.Driver { return c.drv }

// isWrite reports whether a statement may write rows.
func isWrite(q string) bool {
	q = strings.TrimLeft(q, " \t\r\n(")
	if len(q) < 6 {
		return false
	}
	switch strings.ToUpper(q[:6]) {
	case "INSERT", "UPDATE", "DELETE", "REPLAC", "MERGE ":
		return true
	}
	return strings.EqualFold(q[:4], "WITH")
}

// conn watches one connection.
type conn struct {
	o *Oracle
	driver.Conn
	tx *txState // nil outside a transaction
}

type txState struct {
	before  *snapshot // nil until the first write
	written written   // SQLite: the rows the transaction's statements wrote
}

// written is, by table, the keys of the rows statements wrote (SQLite:
// each UPDATE's WHERE and upsert's conflict target, read just before
// the statement runs), with the same values or not.
type written map[string]map[string]bool

func (w written) add(tb, key string) {
	if w[tb] == nil {
		w[tb] = map[string]bool{}
	}
	w[tb][key] = true
}

func (c *conn) querier() (driver.QueryerContext, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, fmt.Errorf("oracle: %T has no QueryContext", c.Conn)
	}
	return q, nil
}

// beforeWrite is called before a statement runs; it returns the check to
// run after it (outside a transaction).
func (c *conn) beforeWrite(ctx context.Context, query string, args []driver.NamedValue) func(ok bool) {
	if !isWrite(query) {
		return func(bool) {}
	}
	trace(query, args)
	if strings.Contains(query, c.o.tables.Outbox) && !c.o.touchesCaptured(query) {
		return func(bool) {}
	}
	if c.tx != nil {
		if c.tx.before == nil {
			c.tx.before = c.o.snap(ctx, c, -1)
		}
		if c.o.d == SQLite {
			c.o.matched(ctx, c, query, args, c.tx.written)
		}
		return func(bool) {}
	}
	before := c.o.snap(ctx, c, -1)
	w := written{}
	if c.o.d == SQLite {
		c.o.matched(ctx, c, query, args, w)
	}
	return func(ok bool) {
		if ok {
			c.o.check(before, c.o.snap(ctx, c, before.seq), w)
		}
	}
}

// tracing: HERALD_ORACLE_TRACE=1 prints every write statement the oracle
// sees (to stderr), to tell what the ORM really sent.
var tracing = os.Getenv("HERALD_ORACLE_TRACE") == "1"

func trace(query string, args []driver.NamedValue) {
	if !tracing {
		return
	}
	vs := make([]string, len(args))
	for i, a := range args {
		vs[i] = fmt.Sprintf("%v", a.Value)
		if b, ok := a.Value.([]byte); ok {
			vs[i] = fmt.Sprintf("%q", b)
		}
	}
	fmt.Fprintf(os.Stderr, "herald-oracle-trace: %s %v\n", query, vs)
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ex, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	after := c.beforeWrite(ctx, query, args)
	r, err := ex.ExecContext(ctx, query, args)
	after(err == nil)
	return r, err
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	qx, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	if isWrite(query) && c.tx == nil {
		// A write with RETURNING outside a transaction: its rows are read
		// to the end before the check.
		after := c.beforeWrite(ctx, query, args)
		rows, err := qx.QueryContext(ctx, query, args)
		if err != nil {
			after(false)
			return nil, err
		}
		buf, err := drain(rows)
		after(err == nil)
		return buf, err
	}
	c.beforeWrite(ctx, query, args)
	return qx.QueryContext(ctx, query, args)
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var (
		s   driver.Stmt
		err error
	)
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, query)
	} else {
		s, err = c.Conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &stmt{Stmt: s, c: c, query: query}, nil
}

func (c *conn) Begin() (driver.Tx, error) { // driver.Conn requires it
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		tx, err = c.Conn.Begin() //nolint:staticcheck // the fallback database/sql uses too
	}
	if err != nil {
		return nil, err
	}
	c.tx = &txState{written: written{}}
	return &tx_{c: c, Tx: tx, ctx: ctx}, nil
}

func (c *conn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type tx_ struct {
	c *conn
	driver.Tx
	ctx context.Context
}

func (t *tx_) Commit() error {
	st := t.c.tx
	var after *snapshot
	if st != nil && st.before != nil {
		after = t.c.o.snap(context.Background(), t.c, st.before.seq)
	}
	err := t.Tx.Commit()
	t.c.tx = nil
	if err == nil && after != nil {
		t.c.o.check(st.before, after, st.written)
	}
	return err
}

func (t *tx_) Rollback() error {
	t.c.tx = nil
	return t.Tx.Rollback()
}

type stmt struct {
	driver.Stmt
	c     *conn
	query string
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	after := s.c.beforeWrite(ctx, s.query, args)
	var (
		r   driver.Result
		err error
	)
	if ex, ok := s.Stmt.(driver.StmtExecContext); ok {
		r, err = ex.ExecContext(ctx, args)
	} else {
		r, err = s.Stmt.Exec(values(args)) //nolint:staticcheck // fallback
	}
	after(err == nil)
	return r, err
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	after := s.c.beforeWrite(ctx, s.query, args)
	var (
		rows driver.Rows
		err  error
	)
	if qx, ok := s.Stmt.(driver.StmtQueryContext); ok {
		rows, err = qx.QueryContext(ctx, args)
	} else {
		rows, err = s.Stmt.Query(values(args)) //nolint:staticcheck // fallback
	}
	if err != nil || s.c.tx != nil {
		after(false)
		return rows, err
	}
	buf, err := drain(rows)
	after(err == nil)
	return buf, err
}

func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

func values(args []driver.NamedValue) []driver.Value {
	v := make([]driver.Value, len(args))
	for i, a := range args {
		v[i] = a.Value
	}
	return v
}

// bufRows is a result read to its end.
type bufRows struct {
	cols []string
	rows [][]driver.Value
	i    int
}

func drain(r driver.Rows) (*bufRows, error) {
	defer r.Close()
	b := &bufRows{cols: r.Columns()}
	for {
		dest := make([]driver.Value, len(b.cols))
		if err := r.Next(dest); err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return nil, err
		}
		for i, v := range dest {
			if bs, ok := v.([]byte); ok {
				dest[i] = append([]byte(nil), bs...)
			}
		}
		b.rows = append(b.rows, dest)
	}
}

func (b *bufRows) Columns() []string { return b.cols }
func (b *bufRows) Close() error      { return nil }
func (b *bufRows) Next(dest []driver.Value) error {
	if b.i >= len(b.rows) {
		return io.EOF
	}
	copy(dest, b.rows[b.i])
	b.i++
	return nil
}

// touchesCaptured is for statements naming the outbox: a fused create
// (WITH … INSERT INTO a table … INSERT INTO the outbox) writes rows too.
func (o *Oracle) touchesCaptured(q string) bool {
	for tb := range o.models {
		if strings.Contains(q, `"`+tb+`"`) || strings.Contains(q, "`"+tb+"`") {
			return true
		}
	}
	return false
}

// snapshot is every captured table's rows by key, and the outbox's last
// sequence.
type snapshot struct {
	rows   map[string]map[string]map[string]any // table -> key -> column -> value
	xmin   map[string]map[string]string         // PostgreSQL: table -> key -> the row version's xmin
	seq    int64
	events []rawEvent // after: the events written since the snapshot before
	err    error
}

type rawEvent struct {
	seq     int64
	payload string
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func (o *Oracle) tableList() []string {
	ts := make([]string, 0, len(o.models))
	for tb := range o.models {
		ts = append(ts, tb)
	}
	sort.Strings(ts)
	return ts
}

// snap reads the captured tables; with since >= 0 also the events after
// that sequence (in a transaction on PostgreSQL, only its own).
func (o *Oracle) snap(ctx context.Context, c *conn, since int64) *snapshot {
	q, err := c.querier()
	if err != nil {
		return &snapshot{err: err}
	}
	var s *snapshot
	if o.d == Postgres {
		s = o.snapPostgres(ctx, q)
	} else {
		s = o.snapSQLite(ctx, q)
	}
	if s.err == nil && since >= 0 {
		query := "SELECT sequence, payload FROM " + quote(o.tables.Outbox) + " WHERE sequence > " + strconv.FormatInt(since, 10)
		if o.d == Postgres && c.tx != nil {
			// Rows of this transaction (its savepoints' too): the only
			// rows it sees whose inserting transaction is in progress.
			query += " AND txid_status(((txid_current() >> 32) << 32) + xmin::text::bigint) = 'in progress'"
		}
		b, err := queryAll(ctx, q, query+" ORDER BY sequence")
		if err != nil {
			s.err = err
			return s
		}
		for _, r := range b.rows {
			s.events = append(s.events, rawEvent{seq: asInt(r[0]), payload: asString(r[1])})
		}
	}
	return s
}

func queryAll(ctx context.Context, q driver.QueryerContext, query string) (*bufRows, error) {
	rows, err := q.QueryContext(ctx, query, nil)
	if err != nil {
		return nil, err
	}
	return drain(rows)
}

func (o *Oracle) snapSQLite(ctx context.Context, q driver.QueryerContext) *snapshot {
	s := &snapshot{rows: map[string]map[string]map[string]any{}}
	present, err := queryAll(ctx, q, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		s.err = err
		return s
	}
	exists := map[string]bool{}
	for _, r := range present.rows {
		exists[asString(r[0])] = true
	}
	for _, tb := range o.tableList() {
		if !exists[tb] {
			continue
		}
		pk, err := o.pkSQLite(ctx, q, tb)
		if err != nil {
			s.err = err
			return s
		}
		b, err := queryAll(ctx, q, "SELECT * FROM "+quote(tb))
		if err != nil {
			s.err = err
			return s
		}
		m := map[string]map[string]any{}
		for _, r := range b.rows {
			row := map[string]any{}
			for i, col := range b.cols {
				row[col] = jsonValue(r[i])
			}
			m[rowKey(row, pk)] = row
		}
		s.rows[tb] = m
	}
	if exists[o.tables.Outbox] {
		b, err := queryAll(ctx, q, "SELECT COALESCE(MAX(sequence), 0) FROM "+quote(o.tables.Outbox))
		if err != nil {
			s.err = err
			return s
		}
		s.seq = asInt(b.rows[0][0])
	}
	return s
}

func (o *Oracle) pkSQLite(ctx context.Context, q driver.QueryerContext, tb string) ([]string, error) {
	o.mu.Lock()
	pk, ok := o.pks[tb]
	o.mu.Unlock()
	if ok {
		return pk, nil
	}
	b, err := queryAll(ctx, q, "SELECT name, pk FROM pragma_table_info("+strconv.Quote(tb)+") WHERE pk > 0 ORDER BY pk")
	if err != nil {
		return nil, err
	}
	for _, r := range b.rows {
		pk = append(pk, asString(r[0]))
	}
	o.mu.Lock()
	o.pks[tb] = pk
	o.mu.Unlock()
	return pk, nil
}

// snapPostgres reads every captured table (as JSON) and the outbox's last
// sequence in one statement.
func (o *Oracle) snapPostgres(ctx context.Context, q driver.QueryerContext) *snapshot {
	s := &snapshot{rows: map[string]map[string]map[string]any{}, xmin: map[string]map[string]string{}}
	ts := o.tableList()
	var sb strings.Builder
	sb.WriteString(`SELECT c.relname, (SELECT json_agg(a.attname ORDER BY array_position(i.indkey, a.attnum)) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = c.oid AND i.indisprimary) FROM pg_class c WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace AND c.relname IN (`)
	for i, tb := range append(ts, o.tables.Outbox) {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("'" + strings.ReplaceAll(tb, "'", "''") + "'")
	}
	sb.WriteString(")")
	b, err := queryAll(ctx, q, sb.String())
	if err != nil {
		s.err = err
		return s
	}
	pks := map[string][]string{}
	for _, r := range b.rows {
		var pk []string
		if r[1] != nil {
			_ = json.Unmarshal([]byte(asString(r[1])), &pk)
		}
		pks[asString(r[0])] = pk
	}
	// eventKey reads an event's key in the same column order (a composite
	// key — a join table's two foreign keys — in the primary key's order).
	o.mu.Lock()
	for tb, pk := range pks {
		o.pks[tb] = pk
	}
	o.mu.Unlock()
	var present []string
	sb.Reset()
	sb.WriteString("SELECT ")
	for _, tb := range ts {
		if _, ok := pks[tb]; !ok {
			continue
		}
		present = append(present, tb)
		// xmin: the transaction that wrote the row's version, so that a
		// row written with the values it held is told from an untouched one.
		sb.WriteString("(SELECT COALESCE(json_agg(json_build_array(t.xmin::text, t)), '[]') FROM " + quote(tb) + " t), ")
	}
	if _, ok := pks[o.tables.Outbox]; ok {
		sb.WriteString("(SELECT COALESCE(MAX(sequence), 0) FROM " + quote(o.tables.Outbox) + ")")
	} else {
		sb.WriteString("0")
	}
	b, err = queryAll(ctx, q, sb.String())
	if err != nil {
		s.err = err
		return s
	}
	r := b.rows[0]
	for i, tb := range present {
		var list [][2]json.RawMessage // [xmin, row]
		if err := json.Unmarshal([]byte(asString(r[i])), &list); err != nil {
			s.err = err
			return s
		}
		m := map[string]map[string]any{}
		xm := map[string]string{}
		for _, x := range list {
			var xmin string
			var row map[string]any
			if err := json.Unmarshal(x[0], &xmin); err != nil {
				s.err = err
				return s
			}
			if err := decode(string(x[1]), &row); err != nil {
				s.err = err
				return s
			}
			k := rowKey(row, pks[tb])
			m[k], xm[k] = row, xmin
		}
		s.rows[tb], s.xmin[tb] = m, xm
	}
	s.seq = asInt(r[len(present)])
	return s
}

// rowKey is the text of a row's primary key (its columns' values joined).
func rowKey(row map[string]any, pk []string) string {
	if len(pk) == 0 {
		b, _ := json.Marshal(row)
		return string(b)
	}
	parts := make([]string, len(pk))
	for i, c := range pk {
		parts[i] = keyText(row[c])
	}
	return strings.Join(parts, "|")
}

func keyText(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	}
	n, _ := strconv.ParseInt(asString(v), 10, 64)
	return n
}
