package gormcapture

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
)

// image is one row as the database returned it: column name -> value,
// each value of its model field's Go type (what GORM would put in the
// struct), or nil for NULL.
type image map[string]any

// scanner reads rows whose columns are named by the query into images,
// typing each value by the schema's field of that column.
type scanner struct {
	sch     *schema.Schema
	cols    []string
	fields  []*schema.Field // nil: not a field (a flag column)
	valuers []bool          // the field's type scans and renders itself (scanValuer)
	dests   []any

	// split > 0: columns [0, split) of each row are a second image,
	// collected in firsts (an UPDATE's before image beside its after).
	split  int
	firsts []image
}

func newScanner(sch *schema.Schema, cols []string) *scanner {
	s := &scanner{sch: sch, cols: cols, fields: make([]*schema.Field, len(cols)), valuers: make([]bool, len(cols)), dests: make([]any, len(cols))}
	for i, c := range cols {
		f := sch.LookUpField(c)
		if f != nil && f.DBName == c && f.Readable {
			s.fields[i] = f
			s.valuers[i] = f.Serializer == nil && valuerScanned(f.FieldType)
		}
	}
	return s
}

// scan reads every row. flag, when >= 0, is the index of a boolean
// column (PostgreSQL's "(xmax = 0)") returned in flags.
func (s *scanner) scan(ctx context.Context, rows *sql.Rows, flag int) (imgs []image, flags []bool, err error) {
	defer func() {
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	var fv bool
	for rows.Next() {
		for i, f := range s.fields {
			switch {
			case i == flag:
				fv = false
				s.dests[i] = &fv
			case f == nil:
				s.dests[i] = new(any)
			case f.Serializer != nil:
				s.dests[i] = &nullScanner{Scanner: f.NewValuePool.Get().(sql.Scanner)}
			case s.valuers[i]:
				s.dests[i] = new(any)
			default:
				// A pointer to a pointer of the field's type: NULL scans as
				// nil whatever the type, as gorm's own scan does.
				s.dests[i] = reflect.New(reflect.PointerTo(f.FieldType)).Interface()
			}
		}
		if err := rows.Scan(s.dests...); err != nil {
			return nil, nil, err
		}
		var tmp reflect.Value // this row's model value for serializers
		img := make(image, len(s.cols)-s.split)
		var first image
		if s.split > 0 {
			first = make(image, s.split)
			s.firsts = append(s.firsts, first)
		}
		for i, f := range s.fields {
			dst := img
			if i < s.split {
				dst = first
			}
			switch {
			case i == flag:
				flags = append(flags, fv)
				continue
			case f == nil:
				dst[s.cols[i]] = *(s.dests[i].(*any))
			case f.Serializer != nil:
				// NULL is null, whatever the serializer makes of it; a
				// stored value is the field's value as GORM reads it, in
				// GORM's serializer wrapper (jsonform writes what its Value
				// gives; fillBack sets the field from it), on a model
				// value of the row's own, which the wrapper keeps.
				ns := s.dests[i].(*nullScanner)
				if ns.null {
					f.NewValuePool.Put(ns.Scanner)
					dst[s.cols[i]] = nil
					continue
				}
				if !tmp.IsValid() {
					tmp = reflect.New(s.sch.ModelType).Elem()
				}
				if err := f.Set(ctx, tmp, ns.Scanner); err != nil {
					return nil, nil, err
				}
				f.NewValuePool.Put(ns.Scanner)
				v, _ := f.ValueOf(ctx, tmp)
				if isNil(f.ReflectValueOf(ctx, tmp)) {
					// The serializer read nothing from what the row holds
					// (JSON's serializer from ''): the event holds what
					// the row holds, not null.
					v = ns.raw
					if b, ok := v.([]byte); ok && f.DataType != schema.Bytes {
						v = string(b)
					}
				}
				dst[s.cols[i]] = v
			case s.valuers[i]:
				raw := *(s.dests[i].(*any))
				if raw == nil {
					dst[s.cols[i]] = nil
					continue
				}
				v, err := scanValuer(f.FieldType, raw)
				if err != nil {
					return nil, nil, fmt.Errorf("sql: Scan error on column %q: %w", s.cols[i], err)
				}
				dst[s.cols[i]] = v
			default:
				p := reflect.ValueOf(s.dests[i]).Elem()
				if p.IsNil() {
					dst[s.cols[i]] = nil
				} else {
					dst[s.cols[i]] = p.Elem().Interface()
				}
			}
		}
		imgs = append(imgs, img)
	}
	return imgs, flags, rows.Err()
}

// keyOf is a row's identity over cols, as text: equal for equal values
// read from the database with the same field types.
func keyOf(img image, cols []string) string {
	if len(cols) == 1 {
		return names.KeyText(img[cols[0]])
	}
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(names.KeyText(img[c]))
	}
	return b.String()
}

// pkOf returns a row's primary key in the envelope's form: the value, or
// a map for a composite key.
func pkOf(img image, pk []string) any {
	if len(pk) == 1 {
		return img[pk[0]]
	}
	m := make(map[string]any, len(pk))
	for _, c := range pk {
		m[c] = img[c]
	}
	return m
}

// comparePK orders primary-key values: numbers numerically, anything else
// by its key text.
func comparePK(a, b any) int {
	if x, ok := asInt(a); ok {
		if y, ok := asInt(b); ok {
			return cmp.Compare(x, y)
		}
	}
	if am, ok := a.(map[string]any); ok {
		if bm, ok := b.(map[string]any); ok {
			keys := make([]string, 0, len(am))
			for k := range am {
				keys = append(keys, k)
			}
			for _, k := range sortedKeys(keys) {
				if c := comparePK(am[k], bm[k]); c != 0 {
					return c
				}
			}
			return 0
		}
	}
	return strings.Compare(names.KeyText(a), names.KeyText(b))
}

func sortedKeys(ks []string) []string {
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	}
	return 0, false
}

// union appends the names of b missing from a.
func union(a []string, b ...string) []string {
next:
	for _, s := range b {
		for _, have := range a {
			if have == s {
				continue next
			}
		}
		a = append(a, s)
	}
	return a
}

// quotedColumns writes cols as a select/returning list qualified by the
// statement's table.
func quotedColumns(st *gorm.Statement, cols []string, qualify bool) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(',')
		}
		col := clause.Column{Name: c}
		if qualify {
			col.Table = clause.CurrentTable
		}
		st.QuoteTo(&b, col)
	}
	return b.String()
}

// selectWhere builds SELECT cols FROM <the statement's table> WHERE <the
// statement's final WHERE> [ORDER BY pk] [FOR UPDATE]: the rows a write
// with that WHERE is about to touch, locked on PostgreSQL so the write
// and its snapshot see the same rows.
func (p *Plugin) selectWhere(db *gorm.DB, cols []string, lock bool) (string, []any) {
	src := db.Statement
	sel := &gorm.Statement{
		DB:        db,
		Table:     src.Table,
		TableExpr: src.TableExpr,
		Schema:    src.Schema,
		Context:   src.Context,
		Clauses:   map[string]clause.Clause{},
	}
	if w, ok := src.Clauses["WHERE"]; ok {
		sel.Clauses["WHERE"] = w
	}
	if from, ok := src.Clauses["FROM"].Expression.(clause.From); ok && (len(from.Tables) > 0 || len(from.Joins) > 0) &&
		src.Schema != nil && len(keyColumns(src.Schema)) > 0 {
		return p.selectWhereFrom(sel, from, cols, lock)
	}
	sc := make([]clause.Column, len(cols))
	for i, c := range cols {
		sc[i] = clause.Column{Table: clause.CurrentTable, Name: c}
	}
	sel.AddClause(clause.Select{Columns: sc})
	sel.AddClause(clause.From{})
	if lim, ok := src.Clauses["LIMIT"]; ok && p.dialect == envelope.MySQL {
		// MySQL's UPDATE/DELETE … ORDER BY … LIMIT: the rows it touches.
		if ob, ok := src.Clauses["ORDER BY"]; ok {
			sel.Clauses["ORDER BY"] = ob
		}
		sel.Clauses["LIMIT"] = lim
	} else if src.Schema != nil && len(keyColumns(src.Schema)) > 0 {
		// A fixed lock order: two bulk writes over overlapping rows lock
		// them in the same order and cannot deadlock on each other.
		ob := clause.OrderBy{}
		for _, c := range keyColumns(src.Schema) {
			ob.Columns = append(ob.Columns, clause.OrderByColumn{Column: clause.Column{Table: clause.CurrentTable, Name: c}})
		}
		sel.AddClause(ob)
	}
	if lock && p.dialect != envelope.SQLite {
		sel.AddClause(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	sel.Build("SELECT", "FROM", "WHERE", "ORDER BY", "LIMIT", "FOR")
	return sel.SQL.String(), sel.Vars
}

// selectWhereFrom is selectWhere for an UPDATE … FROM (clause.From): its
// WHERE names the other tables, and a row of the statement's table joined
// to several of theirs is updated once, so the rows are those whose key
// is among the join's:
//
//	SELECT cols FROM t WHERE (t.pk) IN (SELECT t.pk FROM t, <FROM's tables> <joins> WHERE <the WHERE>)
//	ORDER BY t.pk [FOR UPDATE]
//
// On PostgreSQL FOR UPDATE locks only the rows of t.
func (p *Plugin) selectWhereFrom(sel *gorm.Statement, from clause.From, cols []string, lock bool) (string, []any) {
	pk := keyColumns(sel.Schema)
	list := func(names []string) {
		for i, c := range names {
			if i > 0 {
				_ = sel.WriteByte(',')
			}
			sel.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: c})
		}
	}
	_, _ = sel.WriteString("SELECT ")
	list(cols)
	_, _ = sel.WriteString(" FROM ")
	sel.WriteQuoted(clause.Table{Name: clause.CurrentTable})
	_, _ = sel.WriteString(" WHERE (")
	list(pk)
	_, _ = sel.WriteString(") IN (SELECT ")
	list(pk)
	_ = sel.WriteByte(' ')
	sel.Clauses["FROM"] = clause.Clause{Name: "FROM", Expression: clause.From{
		Tables: append([]clause.Table{{Name: clause.CurrentTable}}, from.Tables...),
		Joins:  from.Joins,
	}}
	sel.Build("FROM", "WHERE")
	_, _ = sel.WriteString(") ORDER BY ")
	list(pk)
	if lock && p.dialect != envelope.SQLite {
		_, _ = sel.WriteString(" FOR UPDATE")
	}
	return sel.SQL.String(), sel.Vars
}

// selectByKeys reads the rows of t whose keyCols equal one of keys, in
// one statement with the keys as one bind parameter (keySetIn; keyset.go),
// or, for keys JSON cannot carry, in chunks under the bind-parameter
// limit; locked (FOR UPDATE) on PostgreSQL and MySQL when lock.
func (p *Plugin) selectByKeys(ctx context.Context, db *gorm.DB, q gorm.ConnPool, t target, cols, keyCols []string, keys [][]any, lock bool) ([]image, error) {
	sch, table := t.sch, t.table
	if len(keys) == 0 {
		return nil, nil
	}
	one, ok, err := p.keySetIn(ctx, q, table, keyCols, keys)
	if err != nil {
		return nil, err
	}
	per := len(keys)
	if !ok {
		per = maxBindKeys / max(1, len(keyCols))
	}
	var out []image
	for start := 0; start < len(keys); start += per {
		where := one
		if !ok {
			where = keysIn(keyCols, keys[start:min(len(keys), start+per)])
		}
		st := &gorm.Statement{DB: db, Table: table, TableExpr: t.expr, Schema: sch, Context: ctx, Clauses: map[string]clause.Clause{}}
		sc := make([]clause.Column, len(cols))
		for i, c := range cols {
			sc[i] = clause.Column{Table: clause.CurrentTable, Name: c}
		}
		st.AddClause(clause.Select{Columns: sc})
		st.AddClause(clause.From{})
		st.AddClause(clause.Where{Exprs: []clause.Expression{where}})
		if lock && p.dialect != envelope.SQLite {
			st.AddClause(clause.Locking{Strength: clause.LockingStrengthUpdate})
		}
		st.Build("SELECT", "FROM", "WHERE", "FOR")
		rows, err := q.QueryContext(ctx, st.SQL.String(), st.Vars...)
		if err != nil {
			return nil, fmt.Errorf("herald/gormcapture: read %s rows: %w", table, err)
		}
		imgs, _, err := newScanner(sch, cols).scan(ctx, rows, -1)
		if err != nil {
			return nil, fmt.Errorf("herald/gormcapture: read %s rows: %w", table, err)
		}
		out = append(out, imgs...)
	}
	return out, nil
}

// maxBindKeys bounds the bind parameters of one key lookup, under both
// databases' limits (SQLite 32766, PostgreSQL and MySQL 65535).
const maxBindKeys = 30000

// keysIn is "keyCols IN keys" (one tuple per key); no keys match nothing.
func keysIn(keyCols []string, keys [][]any) clause.Expression {
	if len(keys) == 0 {
		return clause.Expr{SQL: "1 = 0"}
	}
	if len(keyCols) == 1 {
		vals := make([]any, len(keys))
		for i, k := range keys {
			vals[i] = k[0]
		}
		return clause.IN{Column: clause.Column{Table: clause.CurrentTable, Name: keyCols[0]}, Values: vals}
	}
	kc := make([]clause.Column, len(keyCols))
	for i, c := range keyCols {
		kc[i] = clause.Column{Table: clause.CurrentTable, Name: c}
	}
	vals := make([]any, len(keys))
	for i, k := range keys {
		vals[i] = k
	}
	return clause.IN{Column: kc, Values: vals}
}

// nullScanner scans through Scanner and remembers a NULL and the value
// as stored.
type nullScanner struct {
	sql.Scanner
	null bool
	raw  any
}

func (n *nullScanner) Scan(v any) error {
	n.null = v == nil
	n.raw = storedValue(v)
	return n.Scanner.Scan(v)
}

// storedValue copies a driver value that the driver may reuse.
func storedValue(v any) any {
	if b, ok := v.([]byte); ok {
		return bytes.Clone(b)
	}
	return v
}

var (
	scannerType = reflect.TypeFor[sql.Scanner]()
	valuerType  = reflect.TypeFor[driver.Valuer]()
)

// valuerScanned reports a field type that scans itself (sql.Scanner on
// its pointer) and renders itself (driver.Valuer): the image checks that
// what it renders is what the row holds (scanValuer).
func valuerScanned(t reflect.Type) bool {
	base := t
	if base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	return reflect.PointerTo(base).Implements(scannerType) && (t.Implements(valuerType) || reflect.PointerTo(t).Implements(valuerType))
}

// scanValuer scans a stored, non-NULL value into the field's type. An
// image holds that Go value, as GORM would read it — unless its Value
// renders NULL (or fails) for what the row holds (a Valuer that returns nil
// for a zero value, as GORM's own ExampleStruct does for a struct it reads
// back with an empty name): then the image holds the stored value itself
// (bytes or text), so that the event says what the row holds, not null.
func scanValuer(t reflect.Type, raw any) (any, error) {
	base, ptr := t, t.Kind() == reflect.Pointer
	if ptr {
		base = t.Elem()
	}
	pv := reflect.New(base)
	if err := pv.Interface().(sql.Scanner).Scan(raw); err != nil {
		return nil, err
	}
	v := pv.Interface()
	if !ptr {
		v = pv.Elem().Interface()
	}
	valuer, ok := v.(driver.Valuer)
	if !ok {
		valuer, ok = pv.Interface().(driver.Valuer)
	}
	if ok && rendersNull(valuer) {
		return raw, nil
	}
	return v, nil
}

// rendersNull reports a Valuer whose Value is NULL or fails.
func rendersNull(v driver.Valuer) bool {
	dv, err := v.Value()
	return err != nil || dv == nil
}

func isNil(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}
