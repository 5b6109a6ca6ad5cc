package gormcapture

import (
	"context"
	"database/sql/driver"
	"math"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/keyset"
)

// Sets of keys on every dialect: the rows the capture reads by key (an
// UPDATE's after images, a create's or an upsert's rows, the children a
// cascade reaches, the rows an UPDATE … RETURNING moved to new keys) are
// named by ONE bind parameter whatever their number (rule 5), never a
// parameter per key:
//
//	PostgreSQL: ("t"."a","t"."b") IN (SELECT "herald_keys"."a","herald_keys"."b" FROM json_populate_recordset(NULL::"t",$1::json) AS "herald_keys")
//	SQLite:     (`t`.`a`,`t`.`b`) IN (SELECT json_extract(value,'$[0]'),json_extract(value,'$[1]') FROM json_each(?))
//	MySQL:      JSON_TABLE (mysqlkeys.go)
//
// On PostgreSQL the table's row type gives each JSON value its column's
// type (text, integer, uuid, timestamp, …: the value is read by the
// column type's input function, as a bound value is), so the comparison
// is the column's own and its index serves it. On SQLite the JSON values
// are integers, reals and text, compared under the column's affinity as
// a bound value is; a time is the text the driver writes for it (the
// driver's format, learnt once by binding a time in SELECT ?: mattn's
// "2006-01-02 15:04:05.999999999-07:00" or modernc's time.Time.String).
// A key value that JSON cannot carry as the same value (bytes; a time
// through a SQLite driver of another format; an integer above 2^63-1)
// makes the set fall back to one parameter per value, in chunks under the
// bind-parameter limit.

// keySetIn returns "keyCols (of table) hold one of keys" with the keys as
// one bind parameter; ok is false when a key value has no JSON form (see
// above) or the table has no name (a TableExpr only): the caller binds
// the keys (keysIn).
func (p *Plugin) keySetIn(ctx context.Context, q gorm.ConnPool, table string, keyCols []string, keys [][]any) (clause.Expression, bool, error) {
	if len(keys) == 0 {
		return clause.Expr{SQL: "1 = 0"}, true, nil
	}
	cols := make([]any, 0, 2*len(keyCols)+2) // the columns, then the query's vars
	marks := make([]string, len(keyCols))
	for i, c := range keyCols {
		cols = append(cols, clause.Column{Table: clause.CurrentTable, Name: c})
		marks[i] = "?"
	}
	lhs := "(" + strings.Join(marks, ", ") + ")"
	switch p.dialect {
	case envelope.MySQL:
		arg, types, err := p.mysqlKeyJSON(ctx, q, table, keyCols, keys, nil)
		if err != nil || arg == "" {
			return nil, false, err
		}
		return clause.Expr{SQL: lhs + " IN " + mysqlKeysSelect(types), Vars: append(cols, arg)}, true, nil
	case envelope.Postgres:
		if table == "" {
			return nil, false, nil
		}
		arg, ok := keyJSON(p.dialect, keyCols, keys, nil)
		if !ok {
			return nil, false, nil
		}
		sel := make([]string, len(keyCols))
		for i := range keyCols {
			sel[i] = "?"
			cols = append(cols, clause.Column{Table: "herald_keys", Name: keyCols[i]})
		}
		return clause.Expr{
			SQL:  lhs + " IN (SELECT " + strings.Join(sel, ",") + " FROM json_populate_recordset(NULL::?,?::json) AS herald_keys)",
			Vars: append(cols, clause.Table{Name: table}, arg),
		}, true, nil
	case envelope.SQLite:
		arg, ok := keyJSON(p.dialect, keyCols, keys, func() func(time.Time) string { return p.sqliteTimeFormat(ctx, q) })
		if !ok {
			return nil, false, nil
		}
		sel := "value"
		if len(keyCols) > 1 {
			x := make([]string, len(keyCols))
			for i := range keyCols {
				x[i] = "json_extract(value,'$[" + strconv.Itoa(i) + "]')"
			}
			sel = strings.Join(x, ",")
		}
		return clause.Expr{SQL: lhs + " IN (SELECT " + sel + " FROM json_each(?))", Vars: append(cols, arg)}, true, nil
	}
	return nil, false, nil
}

// keyJSON returns keys as keySetIn's JSON parameter (internal/keyset's
// shape). ok is false when a value has no JSON form that the database
// reads back as the value bound would be. timeForm, on SQLite, returns
// the driver's text of a time (nil: none known).
func keyJSON(d envelope.Dialect, cols []string, keys [][]any, timeForm func() func(time.Time) string) (string, bool) {
	return keyset.JSON(d, cols, keys, func(v any) (any, bool) { return jsonKeyOf(d, v, timeForm) })
}

// jsonKeyOf returns v (after its Valuer, as database/sql converts it) as
// a value whose JSON d reads back as the value bound: integers, finite
// floats, booleans, strings, NULL (which matches nothing, as bound); on
// PostgreSQL times too, as text with their offset (a timestamp column
// takes the wall clock, as pgx binds it; timestamptz the instant; date
// the day), to the microsecond; on SQLite times as the driver writes them
// (timeForm).
func jsonKeyOf(d envelope.Dialect, v any, timeForm func() func(time.Time) string) (any, bool) {
	v, err := driver.DefaultParameterConverter.ConvertValue(v)
	if err != nil {
		return nil, false
	}
	switch x := v.(type) {
	case nil, int64, bool, string:
		return x, true
	case float64:
		return x, !math.IsNaN(x) && !math.IsInf(x, 0)
	case time.Time:
		if d == envelope.Postgres {
			return x.Truncate(time.Microsecond).Format("2006-01-02T15:04:05.999999Z07:00"), true
		}
		if d == envelope.SQLite && timeForm != nil {
			if f := timeForm(); f != nil {
				return f(x), true
			}
		}
		return nil, false
	}
	return nil, false // []byte, and what the converter lets through
}

// sqliteTimeForm is how the SQLite driver writes a bound time.Time as
// text; form is nil when it is none of the known ones.
type sqliteTimeForm struct {
	form func(time.Time) string
}

// sqliteTimeLayout is mattn/go-sqlite3's (SQLiteTimestampFormats[0]) and
// modernc's with _time_format=sqlite.
const sqliteTimeLayout = "2006-01-02 15:04:05.999999999-07:00"

// sqliteTimeFormat returns the text the driver behind q writes for a
// bound time, learnt once per Plugin by binding a reference time in
// SELECT ? and comparing what comes back with the known forms; nil when
// q fails or the form is unknown (the keys are then bound one by one).
func (p *Plugin) sqliteTimeFormat(ctx context.Context, q gorm.ConnPool) func(time.Time) string {
	if f := p.sqliteTime.Load(); f != nil {
		return f.form
	}
	if q == nil {
		return nil
	}
	ref := time.Date(2001, 2, 3, 4, 5, 6, 7008009, time.FixedZone("HRLD", 5400))
	var got any
	if err := q.QueryRowContext(ctx, "SELECT ?", ref).Scan(&got); err != nil {
		return nil // not kept: a failing connection says nothing of the driver
	}
	text, _ := got.(string)
	if b, ok := got.([]byte); ok {
		text = string(b)
	}
	f := &sqliteTimeForm{}
	for _, c := range []func(time.Time) string{
		func(t time.Time) string { return t.Format(sqliteTimeLayout) },
		time.Time.String, // modernc's (and glebarez's) default
	} {
		if c(ref) == text {
			f.form = c
			break
		}
	}
	p.sqliteTime.Store(f)
	return f.form
}
