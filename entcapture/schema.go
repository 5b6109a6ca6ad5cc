package entcapture

import (
	stdsql "database/sql"
	"database/sql/driver"
	"reflect"
	"strings"
	"time"

	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture/entcapturert"
	"github.com/heraldgo/herald/entcapture/internal/rtstate"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
)

// rowKey is a row's key as events carry it: the id, or a column map for
// a composite key.
func rowKey(s *entcapturert.Schema, row map[string]any) any {
	if len(s.Key) == 0 {
		return row[s.PK]
	}
	k := make(map[string]any, len(s.Key))
	for _, c := range s.Key {
		k[c] = row[c]
	}
	return k
}

// keyText is a row's key as text, to tell rows apart.
func keyText(s *entcapturert.Schema, row map[string]any) string {
	if len(s.Key) == 0 {
		return names.KeyText(row[s.PK])
	}
	var b strings.Builder
	for i, c := range s.Key {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(names.KeyText(row[c]))
	}
	return b.String()
}

// db is the database schema sch's table is in for the write of g: the
// client's SchemaConfig (ent's sql/schemaconfig feature, which
// entsql.Annotation{Schema: …} and ent.AlternateSchema fill) when the
// code has it, otherwise the annotation's.
func db(g entcapturert.Glue, sch *entcapturert.Schema) string {
	if d, ok := g.HeraldDB(sch); ok {
		return d
	}
	return sch.DB
}

// from is sch's table for the capture's statements in the write of g,
// qualified by its database schema.
func from(g entcapturert.Glue, sch *entcapturert.Schema) *sql.SelectTable {
	t := sql.Table(sch.Table)
	if d := db(g, sch); d != "" {
		t.Schema(d)
	}
	return t
}

// quotedTable is sch's table as an identifier of raw SQL, qualified as
// ent's own statements qualify it: on SQLite never (ent writes no schema
// there; an ATTACHed database's tables are found by name, and "schema"
// names no database SQLite knows unless it was attached under that name).
func quotedTable(dl envelope.Dialect, g entcapturert.Glue, sch *entcapturert.Schema) string {
	if d := db(g, sch); d != "" && dl != envelope.SQLite {
		return dl.QuoteIdent(d) + "." + dl.QuoteIdent(sch.Table)
	}
	return dl.QuoteIdent(sch.Table)
}

// pin returns the predicate that narrows a write to rows (their keys),
// one bind parameter for all of them (inSet): the id, or each column of
// a composite key (composite-id edge schemas). rowType is the table as
// the statements name it. On MySQL the pin is marked for the driver
// wrapper, which joins the write to the key set (mysqlPin, pinJoin).
func pin(s *entcapturert.Schema, d envelope.Dialect, rowType string, rows []map[string]any) func(*sql.Selector) {
	if len(s.Key) == 0 && d != envelope.MySQL {
		return keysIn(d, rowType, s.PK, pks(rows, s.PK))
	}
	cols := s.Key
	if len(cols) == 0 {
		cols = []string{s.PK}
	}
	if d == envelope.MySQL {
		tuples := make([][]any, len(rows))
		for i, r := range rows {
			t := make([]any, len(cols))
			for j, c := range cols {
				t[j] = r[c]
			}
			tuples[i] = t
		}
		return func(sel *sql.Selector) {
			if len(tuples) == 0 {
				sel.Where(sql.False())
				return
			}
			qc := make([]string, len(cols))
			for i, c := range cols {
				qc[i] = sel.C(c)
			}
			sel.Where(mysqlPin(qc, tuples))
		}
	}
	tuples := make([][]any, len(rows))
	for i, r := range rows {
		t := make([]any, len(s.Key))
		for j, c := range s.Key {
			t[j] = r[c]
		}
		tuples[i] = t
	}
	return inSet(d, rowType, s.Key, tuples)
}

// scannerGlue is the glue generated since images are scanned one row at
// a time (a RETURNING that ent's own scan shares), and UPDATE modifiers
// are kept for "changed". Older glue lacks it: such writes are captured as
// before (rows read by a snapshot statement).
type scannerGlue interface {
	// HeraldScanner returns the scan destinations of one row of cols and
	// a function that returns the row once scanned, NULL as nil.
	HeraldScanner(cols []string) (dst []any, row func() (map[string]any, error), err error)
	// HeraldModifiers returns the UPDATE's modifiers (Modify, AppendX)
	// after its statement was built.
	HeraldModifiers() []func(*sql.UpdateBuilder)
}

// storedForm returns the value a column of a rtstate.KeepsSource type holds, src
// as the database returned it, in the kind of v's Value() (a text column
// read as bytes is a string), so that the event holds the row as stored
// and in the form the Go value would take (its Value()). It declines (the
// Go value stays) when v has no Value of a kind src matches.
func storedForm(src, v any) (out any, ok bool) {
	vl, isValuer := v.(driver.Valuer)
	if !isValuer {
		return nil, false
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, false
	}
	defer func() {
		if recover() != nil {
			out, ok = nil, false
		}
	}()
	dv, err := vl.Value()
	if err != nil {
		return nil, false
	}
	switch dv.(type) {
	case string:
		switch s := src.(type) {
		case string:
			return s, true
		case []byte:
			return string(s), true
		}
	case []byte:
		if b, ok := src.([]byte); ok {
			return b, true
		}
	case int64:
		if n, ok := src.(int64); ok {
			return n, true
		}
	case float64:
		if f, ok := src.(float64); ok {
			return f, true
		}
	case bool:
		if b, ok := src.(bool); ok {
			return b, true
		}
	case time.Time:
		if t, ok := src.(time.Time); ok {
			return t, true
		}
	}
	return nil, false
}

// storedScanner is g's HeraldScanner whose rows hold, for the columns of
// keepsSource types, what the database returned (storedForm); nil when
// the glue has no HeraldScanner (generated by an older entcapture).
func storedScanner(g entcapturert.Glue) func(cols []string) ([]any, func() (map[string]any, error), error) {
	sg, ok := g.(scannerGlue)
	if !ok {
		return nil
	}
	return func(cols []string) ([]any, func() (map[string]any, error), error) {
		dst, row, err := sg.HeraldScanner(cols)
		if err != nil {
			return nil, nil, err
		}
		return dst, func() (map[string]any, error) {
			r, err := row()
			if err != nil {
				return nil, err
			}
			for i, d := range dst {
				if ns, ok := d.(*rtstate.NullScan); ok && ns.Keep && !ns.Null && i < len(cols) {
					if v, ok := storedForm(ns.Src, r[cols[i]]); ok {
						r[cols[i]] = v
					}
				}
			}
			return r, nil
		}, nil
	}
}

// scanStored is g's HeraldScan through storedScanner.
func scanStored(g entcapturert.Glue) func(*stdsql.Rows, []string) ([]map[string]any, error) {
	sc := storedScanner(g)
	if sc == nil {
		return g.HeraldScan
	}
	return func(rows *stdsql.Rows, cols []string) ([]map[string]any, error) {
		var out []map[string]any
		for rows.Next() {
			dst, row, err := sc(cols)
			if err != nil {
				return nil, err
			}
			if err := rows.Scan(dst...); err != nil {
				return nil, err
			}
			r, err := row()
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, rows.Err()
	}
}
