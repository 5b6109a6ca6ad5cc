package gormcapture

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/ctxhdr"
	"github.com/heraldgo/herald/internal/fusedsql"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/outbox"
)

// insertSingle captures a single-row INSERT without ON CONFLICT. Its
// event holds the row as the database stored it (timestamps at the
// column's precision, numerics at their scale, defaults, what triggers
// set), read back with RETURNING — never the instance's Go values, which
// the database may have rounded or changed.
//
// On PostgreSQL the event is written by the same statement as its row
// when that is possible:
//
//	WITH herald_row AS (INSERT INTO loans … RETURNING id, status, …),
//	     herald_event AS (INSERT INTO herald_outbox (…)
//	         SELECT $9, $10, (E'{"model":"Loan","operation":"inserted","pk":' || COALESCE(herald_row.id::text, 'null')
//	                || E',"changed":null,"after":{"id":' || … || $11::text)::json,
//	                '{}', ($12::text || herald_row.id::text || $13::text), $14
//	         FROM herald_row WHERE <the key's advisory lock>)
//	SELECT id FROM herald_row
//
// One round trip instead of two, and no savepoint in a caller's
// transaction: a single statement is atomic. The statement is rendered
// once per shape (fusedStatement): the envelope's fixed text is written
// into it, and each insert binds only GORM's values and what differs
// from one event to the next — id, topic, the envelope's end (its
// occurred_at), ordering key, time. The row's JSON is rendered by
// PostgreSQL from the stored row, in exactly the form jsonform gives the
// value herald's other paths scan into the field (renderJSON: decided by
// the field's Go type and the column's real type, learned once per table
// from a SELECT of no rows on herald's own connection, probeColumnTypes).
// It is possible when
// no Go callback needs the stored row (Extend, ExtendMany, TopicFunc,
// OrderingKeyFunc), the topic does not contain a generated key, and every
// column of the event has such a rendering; otherwise the event is
// written by its own INSERT, as for any other write.
func (p *Plugin) insertSingle(db *gorm.DB, spec *capture.Spec, values clause.Values, fill []string, at time.Time, lent *schema.Schema) error {
	st := db.Statement
	sch := st.Schema
	ctx := st.Context
	pk := keyColumns(sch)

	back := union(slices.Clone(pk), fill...) // what the instance gets back
	ret := back
	if spec.Captures(envelope.Inserted) && spec.NeedsAfter(envelope.Inserted) {
		ret = union(slices.Clone(back), spec.Columns()...)
	}

	if p.dialect == envelope.Postgres && spec.Captures(envelope.Inserted) && fusable(spec) {
		if err := p.probeColumnTypes(ctx, st, ret); err != nil {
			return err
		}
		if sqlText, args, topic, ok := p.fusedInsert(st, spec, values, ret, back, at); ok {
			st.SQL.Reset()
			st.SQL.WriteString(sqlText)
			st.Vars = args
			rows, err := st.ConnPool.QueryContext(ctx, sqlText, args...)
			if err != nil {
				return outbox.Unmigrated(p.writer, err) // the statement inserts the event too
			}
			// The event was built from the row in SQL: only what the
			// instance gets back is read.
			imgs, _, err := newScanner(sch, back).scan(ctx, rows, -1)
			if err != nil {
				return err
			}
			p.finishSingle(db, imgs, fill, lent)
			return p.signal(ctx, st.ConnPool, []string{topic})
		}
	}

	if err := p.ensureSavepoint(ctx, writeCtxOf(st)); err != nil {
		return err
	}
	p.build(st, ret, false)
	rows, err := p.query(ctx, st.ConnPool, st.SQL.String(), st.Vars)
	if err != nil {
		return err
	}
	if p.dialect == envelope.Postgres {
		p.learnColumnTypes(st.Table, rows)
	}
	imgs, _, err := newScanner(sch, ret).scan(ctx, rows, -1)
	if err != nil {
		return err
	}
	p.finishSingle(db, imgs, fill, lent)
	if len(imgs) == 0 || !spec.Captures(envelope.Inserted) {
		return nil
	}
	row := imgs[0]
	var after image
	if spec.NeedsAfter(envelope.Inserted) {
		after = row
	}
	return p.emit(db, batch{spec, []envelope.Change{change(spec, st.Table, envelope.Inserted, pkOf(row, pk), nil, after, nil, at)}})
}

func (p *Plugin) finishSingle(db *gorm.DB, imgs []image, fill []string, lent *schema.Schema) {
	st := db.Statement
	p.fillBack(st.Context, st, imgs, fill, false, clause.Values{}, nil)
	p.insertIDs(st, imgs, lent)
	db.RowsAffected = int64(len(imgs))
	if st.Result != nil {
		st.Result.RowsAffected = db.RowsAffected
	}
}

// build writes the statement's INSERT with a RETURNING of ret (and of
// PostgreSQL's "(xmax = 0)" when flag) into st.SQL.
func (p *Plugin) build(st *gorm.Statement, ret []string, flag bool) {
	var build []string
	for _, c := range st.BuildClauses {
		if c != "RETURNING" {
			build = append(build, c)
		}
	}
	st.Build(build...)
	st.SQL.WriteString(" RETURNING ")
	st.SQL.WriteString(quotedColumns(st, ret, false))
	if flag {
		st.SQL.WriteString(",(xmax = 0)")
	}
}

// instanceKey returns the instance's primary-key values as the INSERT
// sends them, and the key column the database generates (absent from the
// INSERT, or set by a SQL expression); ok is false for a generated
// composite key.
func instanceKey(ctx context.Context, st *gorm.Statement, values clause.Values) (inst image, genPK string, ok bool) {
	var rv reflect.Value
	switch st.ReflectValue.Kind() {
	case reflect.Struct:
		rv = st.ReflectValue
	case reflect.Slice, reflect.Array:
		if st.ReflectValue.Len() == 1 {
			rv = reflect.Indirect(st.ReflectValue.Index(0))
		}
	}
	pk := keyColumns(st.Schema)
	inst = make(image, len(pk))
	for _, c := range pk {
		idx := slices.IndexFunc(values.Columns, func(vc clause.Column) bool { return vc.Name == c })
		var v any
		if idx >= 0 {
			v = values.Values[0][idx]
		}
		switch v.(type) {
		case clause.Expression, gorm.Valuer:
			idx = -1
		}
		if idx < 0 {
			if len(pk) > 1 {
				return nil, "", false
			}
			genPK = c
			continue
		}
		if f := st.Schema.FieldsByDBName[c]; f != nil && rv.IsValid() && rv.Kind() == reflect.Struct {
			v, _ = f.ValueOf(ctx, rv)
		}
		inst[c] = v
	}
	return inst, genPK, true
}

// fusedInsert builds the data-modifying CTE that inserts the row (its
// RETURNING: ret, what the event is built from) and its event, and
// selects back only the columns the instance gets back (back); ok is false
// when the event cannot be built before the row exists or a column of it
// has no rendering in SQL.
func (p *Plugin) fusedInsert(st *gorm.Statement, spec *capture.Spec, values clause.Values, ret, back []string, at time.Time) (sqlText string, args []any, topic string, ok bool) {
	if !fusable(spec) {
		return "", nil, "", false
	}
	sch := st.Schema
	pk := keyColumns(sch)
	if len(pk) == 0 {
		return "", nil, "", false
	}
	shape, ok := p.fusedShapeOf(st, spec, pk)
	if !ok {
		return "", nil, "", false
	}
	inst, genPK, ok := instanceKey(st.Context, st, values)
	if !ok {
		return "", nil, "", false
	}
	c := envelope.Change{Model: spec.Label, Table: st.Table, Operation: envelope.Inserted, PK: pkOf(inst, pk), OccurredAt: at}
	if genPK != "" {
		c.PK = fusedsql.PKSentinel
	}
	var err error
	if topic, err = spec.Topic(&c); err != nil || strings.Contains(topic, fusedsql.PKSentinel) {
		return "", nil, "", false
	}
	key, err := spec.OrderingKey(&c)
	if err != nil {
		return "", nil, "", false
	}
	k, ok := fusedsql.SplitKey(key, genPK != "")
	if !ok {
		return "", nil, "", false
	}
	p.build(st, ret, false)
	args = st.Vars
	h := ctxhdr.JSON(st.Context)
	stmt := p.fusedStatement(st, fusedStmtKey{shape: shape, tk: fusedsql.TemplateKeyOf(k, h), genPK: genPK,
		insert: st.SQL.String(), back: strings.Join(back, "\x00")}, back, len(args))
	st.SQL.Reset()
	// The envelope's end (its occurred_at) is all that differs between the
	// payloads of two events of one shape.
	tail, err := spec.AppendEnvelopeTail(make([]byte, 0, 48), &c, nil)
	if err == nil {
		args, err = stmt.t.Args(args, topic, tail, h, k, at)
	}
	if err != nil {
		st.Vars = nil
		return "", nil, "", false
	}
	return stmt.sql, args, topic, true
}

// fusedStmtKey identifies a fused insert's statement: its shape, the
// template its event needs, GORM's INSERT (with its RETURNING) and the
// columns selected back (joined by NUL, which no column name holds).
type fusedStmtKey struct {
	shape  *fusedShape
	tk     fusedsql.TemplateKey
	genPK  string
	insert string
	back   string
}

// fusedStmt is a fused insert's statement and its event's template.
type fusedStmt struct {
	sql string
	t   fusedsql.Template
}

// maxFusedStmts bounds the plugin's cache of fused statements: an insert
// past it has its statement rendered each time (GORM writes a value's SQL
// expression into the INSERT's text, so a program can write any number of
// distinct statements).
const maxFusedStmts = 4096

// fusedStatement returns the fused insert's statement for key — GORM's
// INSERT, the event's template (its placeholders numbered from nvars+1),
// the SELECT of the columns back (key.back, joined) — rendered once and
// cached: an insert of a known shape costs a map lookup and its template's
// arguments.
func (p *Plugin) fusedStatement(st *gorm.Statement, key fusedStmtKey, back []string, nvars int) *fusedStmt {
	if v, ok := p.fusedStmts.Load(key); ok {
		return v.(*fusedStmt)
	}
	shape := key.shape
	t := fusedsql.NewTemplate(p.writer, shape.spec.RowKeyed(), shape.head, shape.marks, key.genPK, key.tk, nvars+1)
	var b strings.Builder
	b.Grow(len(key.insert) + len(t.SQL) + 64)
	b.WriteString(`WITH ` + fusedsql.Row + ` AS (`)
	b.WriteString(key.insert)
	b.WriteByte(')')
	b.WriteString(t.SQL)
	b.WriteString(` SELECT `)
	b.WriteString(quotedColumns(st, back, false))
	b.WriteString(` FROM ` + fusedsql.Row)
	stmt := &fusedStmt{sql: b.String(), t: t}
	if p.nFusedStmts.Add(1) <= maxFusedStmts {
		v, _ := p.fusedStmts.LoadOrStore(key, stmt)
		return v.(*fusedStmt)
	}
	return stmt
}

// fusedShape is what a fused insert's envelope holds in place of the
// stored row's values — a marker for each key column and each column of
// the after image — and the marks that render them in SQL. It depends on
// the table, the capture spec and the driver alone, so fusedShapeOf
// renders it once per (table, spec, driver) and every insert of that shape
// reuses it, read-only (a third of a fused insert's Go time was spent
// rendering the same expressions again: BenchmarkCreate).
type fusedShape struct {
	spec  *capture.Spec
	marks fusedsql.Marks
	pk    any            // Change.PK: the key column's marker, or column → marker
	after map[string]any // Change.After: column → marker; nil when not needed
	head  []byte         // the envelope up to occurred_at's value (Spec.AppendEnvelopeHead)
}

type fusedShapeKey struct {
	table string
	spec  *capture.Spec
	pgx   bool
}

// fusedShapeOf returns the shape of st's insert, rendering and caching it
// the first time; ok is false when a column has no rendering in SQL (its
// type unknown yet, or not an identifier) — not cached, so that a later
// insert, once the types are known, is fused.
func (p *Plugin) fusedShapeOf(st *gorm.Statement, spec *capture.Spec, pk []string) (*fusedShape, bool) {
	pgx := p.bindsArrays(st.ConnPool)
	key := fusedShapeKey{st.Table, spec, pgx}
	if v, ok := p.shapes.Load(key); ok {
		return v.(*fusedShape), true
	}
	types, _ := p.colTypes.Load(st.Table)
	if types == nil {
		return nil, false
	}
	sch := st.Schema
	render := func(c string, key bool) (string, bool) {
		f := sch.FieldsByDBName[c]
		dbType := types.(*columnTypes).get(c)
		if f == nil || dbType == "" || !names.IsIdentifier(c) {
			return "", false
		}
		return renderJSON(f, dbType, `"herald_row".`+names.Quote(c), key, pgx)
	}
	shape := &fusedShape{spec: spec, marks: fusedsql.Marks{}}
	pkMarks := make(map[string]any, len(pk))
	for _, c := range pk {
		e, ok := render(c, true)
		if !ok {
			return nil, false
		}
		pkMarks[c] = shape.marks.Mark("pk", c, e)
	}
	shape.pk = pkMarks
	if len(pk) == 1 {
		shape.pk = pkMarks[pk[0]]
	}
	if spec.NeedsAfter(envelope.Inserted) {
		shape.after = map[string]any{}
		for _, c := range spec.Columns() {
			e, ok := render(c, false)
			if !ok {
				return nil, false
			}
			shape.after[c] = shape.marks.Mark("after", c, e)
		}
	}
	c := envelope.Change{Model: spec.Label, Table: st.Table, Operation: envelope.Inserted, PK: shape.pk, After: shape.after}
	head, err := spec.AppendEnvelopeHead(nil, &c)
	if err != nil {
		return nil, false
	}
	shape.head = head
	v, _ := p.shapes.LoadOrStore(key, shape)
	return v.(*fusedShape), true
}

// columnTypes are the database type names (database/sql's
// DatabaseTypeName: "INT8", "TIMESTAMPTZ", …) of a table's columns, as
// the RETURNING of a single-row insert showed them.
type columnTypes struct {
	mu     sync.RWMutex
	m      map[string]string
	probed map[string]bool // columns probeColumnTypes asked for
}

// unprobed reports whether a column of cols has no type known and was not
// probed yet (a type the driver does not name stays unknown: probed once).
func (c *columnTypes) unprobed(cols []string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, col := range cols {
		if c.m[col] == "" && !c.probed[col] {
			return true
		}
	}
	return false
}

func (c *columnTypes) get(col string) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[col]
}

// fusable reports whether spec's events may be rendered by a fused
// statement: no Go callback needs the stored row, and no column's form
// comes from its declared type (Spec.Typed).
func fusable(spec *capture.Spec) bool {
	o := spec.Options
	return o.Extend == nil && o.ExtendMany == nil && o.TopicFunc == nil && o.OrderingKeyFunc == nil &&
		!spec.Typed() // a typed column's form is pgform's, in Go
}

// probeColumnTypes learns the types of the table's columns cols, when
// some are unknown, from a SELECT of no rows (once per table and column
// set), so that even the table's first single-row insert can be fused.
// It is herald's own statement: it runs on own(st.ConnPool), and with
// PrepareStmt the caller's cache holds the fused INSERT alone, as it
// would hold the INSERT without the plugin (GORM's
// TestPreparedStmtDeadlock). An error is the database's (the INSERT
// would have failed the same way; on PostgreSQL the transaction is
// aborted either way).
func (p *Plugin) probeColumnTypes(ctx context.Context, st *gorm.Statement, cols []string) error {
	v, _ := p.colTypes.LoadOrStore(st.Table, &columnTypes{m: map[string]string{}})
	ct := v.(*columnTypes)
	if !ct.unprobed(cols) {
		return nil
	}
	table, vars := tableSQL(st)
	rows, err := own(st.ConnPool).QueryContext(ctx, "SELECT "+quotedColumns(st, cols, false)+" FROM "+table+" WHERE false", vars...)
	if err != nil {
		return err
	}
	defer rows.Close()
	p.learnColumnTypes(st.Table, rows)
	for rows.Next() { // none: WHERE false
	}
	if err := rows.Err(); err != nil {
		return err
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.probed == nil {
		ct.probed = map[string]bool{}
	}
	for _, c := range cols {
		ct.probed[c] = true
	}
	return nil
}

// learnColumnTypes records the column types of a RETURNING, so the
// table's next single-row inserts can render their event in SQL.
func (p *Plugin) learnColumnTypes(table string, rows *sql.Rows) {
	cts, err := rows.ColumnTypes()
	if err != nil {
		return
	}
	v, _ := p.colTypes.LoadOrStore(table, &columnTypes{m: map[string]string{}})
	ct := v.(*columnTypes)
	ct.mu.Lock()
	defer ct.mu.Unlock()
	for _, c := range cts {
		ct.m[c.Name()] = strings.ToUpper(c.DatabaseTypeName())
	}
}

// valueType is the Go type whose JSON form field f's values take: its
// type without pointers, and for database/sql's Null types and
// gorm.DeletedAt (null, or their value's form: jsonform writes what Value,
// or DeletedAt's MarshalJSON, gives) their value's type.
func valueType(f *schema.Field) reflect.Type {
	t := f.FieldType
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if base, ok := nullBase[t]; ok {
		t = base
	}
	return t
}

// renderJSON returns a PostgreSQL expression giving the text of the JSON
// form jsonform gives the value of field f that herald's other paths read
// from a column of dbType (scanned through database/sql into the field's
// Go type); ok is false where no such expression is known, and the event
// is then built in Go from the row read back. The expression is NULL for
// SQL NULL, and the cheapest of fusedsql's forms for the column's type: an
// integer's or a boolean's own text, to_json for strings (BENCHMARKS.md,
// "sixteenth pass"). key: the column is a
// primary key, whose text must also equal envelope.KeyText of its value.
// pgx: the driver is pgx's, which scans timestamptz in time.Local.
func renderJSON(f *schema.Field, dbType, col string, key, pgx bool) (string, bool) {
	if f.Serializer != nil {
		return "", false
	}
	t := valueType(f)
	switch {
	case t == reflect.TypeFor[uuid.UUID]():
		return fusedsql.Quoted(col), dbType == "UUID"
	case t == reflect.TypeFor[time.Time]():
		// RFC 3339 with the fraction's trailing zeros cut, as
		// time.RFC3339Nano: a timestamp scans as UTC, a timestamptz (pgx)
		// in time.Local, rendered "Z" only when Local is UTC.
		var at string
		switch {
		case key:
			return "", false
		case dbType == "TIMESTAMP":
			at = col
		case dbType == "TIMESTAMPTZ" && pgx && localIsUTC():
			at = col + ` AT TIME ZONE 'UTC'`
		default:
			return "", false
		}
		return fusedsql.Quoted(`rtrim(rtrim(to_char(` + at + `,'YYYY-MM-DD"T"HH24:MI:SS.US'),'0'),'.')||'Z'`), true
	case isDecimal(t):
		// shopspring's decimal (and the like) keeps the scale of the text
		// it scans: the numeric's own text.
		return fusedsql.Quoted(col), dbType == "NUMERIC" && !key
	}
	if t.Implements(reflect.TypeFor[driver.Valuer]()) || reflect.PointerTo(t).Implements(reflect.TypeFor[sql.Scanner]()) {
		return "", false
	}
	switch t.Kind() {
	case reflect.Bool:
		return fusedsql.Number(col), dbType == "BOOL"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fusedsql.Number(col), dbType == "INT2" || dbType == "INT4" || dbType == "INT8"
	case reflect.Float32, reflect.Float64:
		// jsonb prints 1e+20 as 100000000000000000000, jsonform as Go
		// does: the same value, other bytes. Built in Go instead.
		return "", false
	case reflect.String:
		switch dbType {
		case "TEXT", "VARCHAR":
			return fusedsql.String(col), true
		case "BPCHAR":
			return fusedsql.String(col), !key
		case "NUMERIC", "UUID":
			// Scanned into a string as the column's text output.
			return fusedsql.Quoted(col), !key
		case "JSON", "JSONB":
			return fusedsql.String(col + "::text"), !key
		}
	}
	return "", false
}

// nullBase maps the nullable types whose JSON form is their value's (or
// null) to that value's type.
var nullBase = map[reflect.Type]reflect.Type{
	reflect.TypeFor[sql.NullTime]():    reflect.TypeFor[time.Time](),
	reflect.TypeFor[gorm.DeletedAt]():  reflect.TypeFor[time.Time](),
	reflect.TypeFor[sql.NullString]():  reflect.TypeFor[string](),
	reflect.TypeFor[sql.NullInt64]():   reflect.TypeFor[int64](),
	reflect.TypeFor[sql.NullInt32]():   reflect.TypeFor[int32](),
	reflect.TypeFor[sql.NullInt16]():   reflect.TypeFor[int16](),
	reflect.TypeFor[sql.NullByte]():    reflect.TypeFor[uint8](),
	reflect.TypeFor[sql.NullBool]():    reflect.TypeFor[bool](),
	reflect.TypeFor[sql.NullFloat64](): reflect.TypeFor[float64](),
}

// isDecimal reports a decimal type jsonform writes as a string that keeps
// its scale: Coefficient() *big.Int and Exponent() int32 (shopspring's).
func isDecimal(t reflect.Type) bool {
	c, ok := t.MethodByName("Coefficient")
	if !ok || c.Type.NumIn() != 1 || c.Type.NumOut() != 1 || c.Type.Out(0) != reflect.TypeFor[*big.Int]() {
		return false
	}
	e, ok := t.MethodByName("Exponent")
	return ok && e.Type.NumIn() == 1 && e.Type.NumOut() == 1 && e.Type.Out(0).Kind() == reflect.Int32
}

// localIsUTC reports whether time.Local is UTC at every instant: pgx
// scans timestamptz in time.Local, and jsonform writes a time with its
// zone's offset ("Z" only for offset 0).
var localIsUTC = sync.OnceValue(func() bool {
	if time.Local.String() == "UTC" {
		return true
	}
	for y := 1970; y <= 2100; y++ {
		for _, m := range []time.Month{time.January, time.April, time.July, time.October} {
			if _, off := time.Date(y, m, 1, 0, 0, 0, 0, time.Local).Zone(); off != 0 {
				return false
			}
		}
	}
	return true
})

// query runs a statement of a captured write. On SQLite, where preparing
// a statement costs about as much as running it, small INSERTs (a single
// row, an event) run as statements prepared once per connection.
func (p *Plugin) query(ctx context.Context, cp gorm.ConnPool, q string, args []any) (*sql.Rows, error) {
	switch cp.(type) {
	case *gorm.PreparedStmtTX, *gorm.PreparedStmtDB:
		// The caller's statement under PrepareStmt: GORM's cache prepares it.
		return cp.QueryContext(ctx, q, args...)
	}
	// A statement of the transaction, closed by its Commit or Rollback.
	if s := p.prepared(ctx, cp, q, len(args)); s != nil { //nolint:sqlclosecheck // closed with the transaction
		return s.QueryContext(ctx, args...)
	}
	return cp.QueryContext(ctx, q, args...)
}

func closeStmt(s *sql.Stmt) { _ = s.Close() }

type stmtKey struct {
	db *sql.DB
	q  string
}

// maxPrepared bounds the statements kept prepared (they are few: one
// single-row INSERT per model and column set, one event INSERT).
const maxPrepared = 256

func (p *Plugin) prepared(ctx context.Context, cp gorm.ConnPool, q string, nargs int) *sql.Stmt {
	if p.dialect != envelope.SQLite || nargs > 64 || !strings.HasPrefix(q, "INSERT INTO ") {
		return nil
	}
	t, _ := scopeOf(cp)
	if t == nil {
		return nil
	}
	tx, ok := t.Tx.(*sql.Tx)
	if !ok {
		return nil
	}
	db, err := t.GetDBConn()
	if err != nil || db == nil {
		return nil
	}
	key := stmtKey{db, q}
	v, ok := p.stmts.Load(key)
	if !ok {
		// Preparing on the pool takes another connection than the
		// transaction's: never do it where that could wait for ours.
		if db.Stats().MaxOpenConnections != 0 || p.nstmts.Load() >= maxPrepared {
			return nil
		}
		s, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil
		}
		var loaded bool
		if v, loaded = p.stmts.LoadOrStore(key, s); loaded {
			closeStmt(s) // another goroutine prepared it first
		} else {
			p.nstmts.Add(1)
		}
	}
	return tx.StmtContext(ctx, v.(*sql.Stmt))
}
