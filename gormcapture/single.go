package gormcapture

import (
	"context"
	"database/sql"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
)

// insertSingle captures a single-row INSERT without ON CONFLICT. As
// DESIGN.md's mode table says, its event holds the instance's values and,
// read back with RETURNING, what the database generated (the key,
// defaults, columns left out by Omit).
//
// On PostgreSQL the event is written by the same statement as its row
// when that is possible:
//
//	WITH herald_row AS (INSERT INTO loans … RETURNING id),
//	     herald_event AS (INSERT INTO herald_outbox (…)
//	         SELECT $9, $10, jsonb_set($11::jsonb, '{pk}', to_jsonb(herald_row.id)), '{}',
//	                $12 || herald_row.id::text, $13 FROM herald_row)
//	SELECT id FROM herald_row
//
// One round trip instead of two, and no savepoint in a caller's
// transaction: a single statement is atomic. It is possible when no Go
// callback needs the generated key (Extend, ExtendMany, TopicFunc,
// OrderingKeyFunc), the topic does not contain the key, and every
// generated value has the same JSON form in PostgreSQL as in Go
// (integers, text, booleans, uuids). Otherwise the event is written by
// its own INSERT, as for any other write.
func (p *Plugin) insertSingle(db *gorm.DB, spec *envelope.Spec, values clause.Values, fill []string, at time.Time) error {
	st := db.Statement
	sch := st.Schema
	ctx := st.Context
	pk := keyColumns(sch)

	// The instance's values, and the columns the database generates.
	want := slices.Clone(pk)
	if spec.NeedsAfter(envelope.Inserted) {
		want = union(want, spec.Columns()...)
	}
	inst, gen := p.instanceValues(ctx, st, values, want)
	ret := union(slices.Clone(pk), fill...)
	ret = union(ret, gen...)

	if p.dialect == envelope.Postgres && spec.Captures(envelope.Inserted) {
		if sqlText, args, topic, ok := p.fusedInsert(st, spec, inst, gen, ret, at); ok {
			st.SQL.Reset()
			st.SQL.WriteString(sqlText)
			st.Vars = args
			rows, err := st.ConnPool.QueryContext(ctx, sqlText, args...)
			if err != nil {
				return err
			}
			imgs, _, err := newScanner(sch, ret).scan(ctx, rows, -1)
			if err != nil {
				return err
			}
			p.finishSingle(db, imgs, fill)
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
	imgs, _, err := newScanner(sch, ret).scan(ctx, rows, -1)
	if err != nil {
		return err
	}
	p.finishSingle(db, imgs, fill)
	if len(imgs) == 0 || !spec.Captures(envelope.Inserted) {
		return nil
	}
	row := imgs[0]
	for _, c := range gen {
		inst[c] = row[c]
	}
	var after image
	if spec.NeedsAfter(envelope.Inserted) {
		after = inst
	}
	return p.emit(db, batch{spec, []envelope.Change{change(spec, st.Table, envelope.Inserted, pkOf(inst, pk), nil, after, nil, at)}})
}

func (p *Plugin) finishSingle(db *gorm.DB, imgs []image, fill []string) {
	st := db.Statement
	p.fillBack(st.Context, st, imgs, fill, false, clause.Values{}, nil)
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

// instanceValues returns the values of cols the instance provides, and
// the columns it leaves to the database (absent from the INSERT, or set
// by a SQL expression).
func (p *Plugin) instanceValues(ctx context.Context, st *gorm.Statement, values clause.Values, cols []string) (image, []string) {
	inst := make(image, len(cols))
	var gen []string
	var rv reflect.Value
	switch st.ReflectValue.Kind() {
	case reflect.Struct:
		rv = st.ReflectValue
	case reflect.Slice, reflect.Array:
		if st.ReflectValue.Len() == 1 {
			rv = reflect.Indirect(st.ReflectValue.Index(0))
		}
	}
	for _, c := range cols {
		idx := -1
		for i, vc := range values.Columns {
			if vc.Name == c {
				idx = i
				break
			}
		}
		if idx < 0 {
			gen = append(gen, c)
			continue
		}
		v := values.Values[0][idx]
		switch v.(type) {
		case clause.Expression, gorm.Valuer:
			gen = append(gen, c) // computed by the database
			continue
		}
		if f := st.Schema.FieldsByDBName[c]; f != nil && rv.IsValid() && rv.Kind() == reflect.Struct {
			v, _ = f.ValueOf(ctx, rv)
		}
		inst[c] = v
	}
	return inst, gen
}

// fusedSentinel stands for the generated key while the topic and ordering
// key are rendered in Go.
const fusedSentinel = "\x00herald:pk\x00"

// fusedInsert builds the data-modifying CTE that inserts the row and its
// event; ok is false when the event cannot be built before the row exists.
func (p *Plugin) fusedInsert(st *gorm.Statement, spec *envelope.Spec, inst image, gen, ret []string, at time.Time) (sqlText string, args []any, topic string, ok bool) {
	o := spec.Options
	if o.Extend != nil || o.ExtendMany != nil || o.TopicFunc != nil || o.OrderingKeyFunc != nil {
		return "", nil, "", false
	}
	sch := st.Schema
	pk := keyColumns(sch)
	genPK := ""
	for _, c := range gen {
		f := sch.FieldsByDBName[c]
		if f == nil || !sameJSONForm(f) || !envelope.IsIdentifier(c) {
			return "", nil, "", false
		}
		if slices.Contains(pk, c) {
			if len(pk) > 1 {
				return "", nil, "", false
			}
			genPK = c
		}
	}
	c := envelope.Change{Model: spec.Label, Table: st.Table, Operation: envelope.Inserted, PK: pkOf(inst, pk), OccurredAt: at}
	if genPK != "" {
		c.PK = fusedSentinel
	}
	var err error
	if topic, err = spec.Topic(&c); err != nil || strings.Contains(topic, fusedSentinel) {
		return "", nil, "", false
	}
	key, err := spec.OrderingKey(&c)
	if err != nil {
		return "", nil, "", false
	}
	var pre, post string
	keyHasPK := genPK != "" && strings.Contains(key, fusedSentinel)
	if keyHasPK {
		i := strings.Index(key, fusedSentinel)
		pre, post = key[:i], key[i+len(fusedSentinel):]
		if strings.Contains(post, fusedSentinel) || utf8.RuneCountInString(pre)+utf8.RuneCountInString(post)+36 > envelope.MaxKeyLength {
			return "", nil, "", false
		}
	} else if genPK != "" && (strings.Contains(key, fusedSentinel) || utf8.RuneCountInString(key) >= envelope.MaxKeyLength) {
		return "", nil, "", false // the key was cut to its hashed form
	}
	if genPK != "" {
		c.PK = nil
	}
	if spec.NeedsAfter(envelope.Inserted) {
		after := make(map[string]any, len(inst)+len(gen))
		for k, v := range inst {
			after[k] = v
		}
		for _, g := range gen {
			after[g] = nil
		}
		c.After = after
	}
	payload, err := spec.AppendEnvelope(nil, &c, nil)
	if err != nil {
		return "", nil, "", false
	}
	id, err := uuid.NewV7()
	if err != nil {
		return "", nil, "", false
	}

	p.build(st, ret, false)
	args = st.Vars
	ph := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var b strings.Builder
	b.Grow(st.SQL.Len() + 400)
	b.WriteString(`WITH "herald_row" AS (`)
	b.WriteString(st.SQL.String())
	b.WriteString(`), "herald_event" AS (INSERT INTO `)
	b.WriteString(p.writer.Table().Quoted)
	b.WriteString(` (id, topic, payload, headers, ordering_key, created_at) SELECT `)
	b.WriteString(ph(id.String()))
	b.WriteByte(',')
	b.WriteString(ph(topic))
	b.WriteByte(',')
	expr := ph(string(payload)) + "::jsonb"
	if genPK != "" {
		expr = `jsonb_set(` + expr + `,'{pk}',COALESCE(to_jsonb("herald_row".` + envelope.QuoteIdent(genPK) + `),'null'))`
	}
	if c.After != nil {
		cols := spec.Columns()
		for _, g := range gen {
			if slices.Contains(cols, g) {
				expr = `jsonb_set(` + expr + `,'{after,` + g + `}',COALESCE(to_jsonb("herald_row".` + envelope.QuoteIdent(g) + `),'null'))`
			}
		}
	}
	b.WriteString(expr)
	b.WriteString(`,'{}',`)
	switch {
	case key == "":
		b.WriteString("NULL")
	case keyHasPK:
		b.WriteString("(" + ph(pre) + "::text||\"herald_row\"." + envelope.QuoteIdent(genPK) + "::text||" + ph(post) + "::text)")
	default:
		b.WriteString(ph(key))
	}
	b.WriteByte(',')
	b.WriteString(ph(at.Truncate(time.Microsecond)))
	b.WriteString(` FROM "herald_row") SELECT `)
	b.WriteString(quotedColumns(st, ret, false))
	b.WriteString(` FROM "herald_row"`)
	st.SQL.Reset()
	return b.String(), args, topic, true
}

// sameJSONForm reports whether PostgreSQL's to_jsonb gives a column of
// the field's type the same JSON as jsonform gives its Go value.
func sameJSONForm(f *schema.Field) bool {
	t := f.FieldType
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[uuid.UUID]() {
		return true
	}
	if f.Serializer != nil || t.Implements(reflect.TypeFor[interface{ Value() (any, error) }]()) {
		return false
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return true
	}
	return false
}

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
