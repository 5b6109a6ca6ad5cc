package entcapture

import (
	"database/sql/driver"
	"slices"
	"strconv"
	"strings"

	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/keyset"
	"github.com/heraldgo/herald/internal/names"
)

// inSet returns the predicate "cols hold one of tuples" (one value per
// column in each tuple) with ONE bind parameter whatever the number of
// tuples: a snapshot read or a pinned write by keys may name more rows
// than a statement may bind parameters (65535 on PostgreSQL, 32766 on
// SQLite). The tuples travel as one JSON array:
//
//	PostgreSQL: ("t"."a", "t"."b") IN (SELECT "r"."a", "r"."b" FROM jsonb_populate_recordset(NULL::"t", $1::jsonb) AS "r")
//	SQLite:     (`t`.`a`, `t`.`b`) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))
//
// and for one column "t"."a" IN (… "r"."a" …) / `t`.`a` IN (SELECT value
// FROM json_each(?)). On PostgreSQL rowType is the table whose columns
// cols are, quoted and qualified as its statements name it: its row type
// gives each value its column's type, so the column's index is used.
// Tuples holding a value whose JSON the database would not read back as
// the same value (bytes, NULL, times, floats) are bound one parameter per
// value, as ent binds them.
func inSet(d envelope.Dialect, rowType string, cols []string, tuples [][]any) func(*sql.Selector) {
	return func(s *sql.Selector) { s.Where(inSetP(d, rowType, s, cols, tuples)) }
}

// inSetP is inSet's predicate, with the columns qualified by s.
func inSetP(d envelope.Dialect, rowType string, s *sql.Selector, cols []string, tuples [][]any) *sql.Predicate {
	if len(tuples) == 0 {
		return sql.False()
	}
	qc := make([]string, len(cols))
	for i, c := range cols {
		qc[i] = s.C(c)
	}
	if d == envelope.MySQL {
		return inSetMySQL(qc, tuples) // capture_mysql.go
	}
	arg, ok := setJSON(d, cols, tuples)
	if !ok {
		if len(cols) == 1 {
			vs := make([]any, len(tuples))
			for i, t := range tuples {
				vs[i] = t[0]
			}
			return sql.In(qc[0], vs...)
		}
		ors := make([]*sql.Predicate, len(tuples))
		for i, t := range tuples {
			ands := make([]*sql.Predicate, len(cols))
			for j := range cols {
				ands[j] = sql.EQ(qc[j], t[j])
			}
			ors[i] = sql.And(ands...)
		}
		return sql.Or(ors...)
	}
	lhs := qc[0]
	if len(cols) > 1 {
		lhs = "(" + strings.Join(qc, ", ") + ")"
	}
	return sql.P(func(b *sql.Builder) {
		b.WriteString(lhs)
		if d == envelope.Postgres {
			r := make([]string, len(cols))
			for i, c := range cols {
				r[i] = `"r".` + names.Quote(c)
			}
			b.WriteString(` IN (SELECT ` + strings.Join(r, ", ") + ` FROM jsonb_populate_recordset(NULL::` + rowType + `, `)
			b.Arg(arg)
			b.WriteString(`::jsonb) AS "r")`)
			return
		}
		if len(cols) == 1 {
			b.WriteString(` IN (SELECT value FROM json_each(`)
		} else {
			x := make([]string, len(cols))
			for i := range cols {
				x[i] = `json_extract(value, '$[` + strconv.Itoa(i) + `]')`
			}
			b.WriteString(` IN (SELECT ` + strings.Join(x, ", ") + ` FROM json_each(`)
		}
		b.Arg(arg)
		b.WriteString(`))`)
	})
}

// setJSON returns the tuples as inSet's JSON parameter (internal/keyset's
// shape). ok is false when a value is not an integer or a string once its
// Valuer ran (a uuid is its text).
func setJSON(d envelope.Dialect, cols []string, tuples [][]any) (string, bool) {
	return keyset.JSON(d, cols, tuples, jsonKey)
}

// jsonKey returns v as a value whose JSON the database reads back as v:
// an integer or a string.
func jsonKey(v any) (any, bool) {
	if vr, ok := v.(driver.Valuer); ok {
		var err error
		if v, err = vr.Value(); err != nil {
			return nil, false
		}
	}
	switch x := v.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, string:
		return x, true
	}
	return nil, false
}

// tuplesOf returns each value as a tuple of one.
func tuplesOf(vs []any) [][]any {
	out := make([][]any, len(vs))
	for i, v := range vs {
		out[i] = []any{v}
	}
	return out
}

// keysIn returns the predicate "pk is one of ids", with one bind
// parameter (inSet).
func keysIn(d envelope.Dialect, rowType, pk string, ids []any) func(*sql.Selector) {
	return inSet(d, rowType, []string{pk}, tuplesOf(ids))
}

// keySet is a set of keys: cols hold one of tuples.
type keySet struct {
	cols   []string
	tuples [][]any
}

// inSetsOrP is "the row is in every set of one of ors" (an OR of ANDs of
// key sets; an operand with an empty set matches nothing and is left
// out). key is the table's key (its columns), rowType the table as
// inSetP takes it. On MySQL an OR of semi-joins cannot reach the rows by
// index (the server scans the table, and FOR UPDATE would lock every row
// it scans), so two or more operands become one semi-join on the key
// over a UNION of the operands, each a semi-join the JSON table drives:
//
//	`t`.`id` IN (SELECT `herald_u`.`id` FROM (SELECT `herald_r`.`id` FROM `t` AS `herald_r` WHERE `herald_r`.`a` IN (SELECT … JSON_TABLE(?, …) …) UNION SELECT …) AS `herald_u`)
//
// each set still one JSON parameter.
func inSetsOrP(d envelope.Dialect, rowType string, s *sql.Selector, key []string, ors ...[]keySet) *sql.Predicate {
	live := slices.DeleteFunc(slices.Clone(ors), func(and []keySet) bool {
		return slices.ContainsFunc(and, func(k keySet) bool { return len(k.tuples) == 0 })
	})
	if len(live) == 0 {
		return sql.False()
	}
	if d != envelope.MySQL || len(live) == 1 {
		ps := make([]*sql.Predicate, len(live))
		for i, and := range live {
			as := make([]*sql.Predicate, len(and))
			for j, k := range and {
				as[j] = inSetP(d, rowType, s, k.cols, k.tuples)
			}
			ps[i] = sql.And(as...)
			if len(as) == 1 {
				ps[i] = as[0]
			}
		}
		if len(ps) == 1 {
			return ps[0]
		}
		return sql.Or(ps...)
	}
	q := func(alias, c string) string { return "`" + alias + "`." + envelope.MySQL.QuoteIdent(c) }
	lhs := make([]string, len(key))
	inner := make([]string, len(key))
	outer := make([]string, len(key))
	for i, c := range key {
		lhs[i] = s.C(c)
		inner[i] = q("herald_r", c)
		outer[i] = q("herald_u", c)
	}
	return sql.P(func(b *sql.Builder) {
		b.WriteString("(" + strings.Join(lhs, ", ") + ") IN (SELECT " + strings.Join(outer, ", ") + " FROM (")
		for i, and := range live {
			if i > 0 {
				b.WriteString(" UNION ")
			}
			b.WriteString("SELECT " + strings.Join(inner, ", ") + " FROM " + rowType + " AS `herald_r` WHERE ")
			for j, k := range and {
				if j > 0 {
					b.WriteString(" AND ")
				}
				qc := make([]string, len(k.cols))
				for x, c := range k.cols {
					qc[x] = q("herald_r", c)
				}
				w, _, _ := mysqlKeySet(qc, k.tuples)
				w(b)
			}
		}
		b.WriteString(") AS `herald_u`)")
	})
}
