package gormcapture

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Sets of keys on MySQL and MariaDB: the rows the capture reads by key
// (an UPDATE's after images, a create's rows read back, the children a
// cascade reaches, an upsert's rows by unique value) are named by ONE JSON
// parameter whatever their number, never a parameter per key:
//
//	(`t`.`a`, `t`.`b`) IN (SELECT `herald_keys`.`c0`, `herald_keys`.`c1` FROM JSON_TABLE(?, '$[*]' COLUMNS(`c0` BIGINT PATH '$[0]', `c1` VARCHAR(3072) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PATH '$[1]')) AS `herald_keys`)
//
// Both servers run it as a semi-join that the JSON table drives, reaching
// each row by the key's index (eq_ref, or ref on a non-unique foreign
// key), so that FOR UPDATE locks the rows reached and no others. A string
// column of the JSON table has the character set and collation of the
// table's column (information_schema.COLUMNS, read once per table and
// kept; an upsert's read of the unique keys reads them again): another
// character set would make the server convert the table's column, and
// scan it. An OR of key sets (an upsert's values of several unique keys)
// is one semi-join over a UNION of per-set semi-joins, as an OR of
// semi-joins would scan the table. Keys that are neither integers nor
// strings once their Valuer ran (bytes, times) are bound one parameter
// per value.

// mysqlKeysIn is keysIn on MySQL: keyCols (of table) hold one of keys,
// one JSON parameter. known, when not nil, gives the string columns'
// JSON_TABLE types (mysqlStringTypes otherwise).
func (p *Plugin) mysqlKeysIn(ctx context.Context, q gorm.ConnPool, table string, keyCols []string, keys [][]any, known map[string]string) (clause.Expression, error) {
	if len(keys) == 0 {
		return clause.Expr{SQL: "1 = 0"}, nil
	}
	arg, types, err := p.mysqlKeyJSON(ctx, q, table, keyCols, keys, known)
	if err != nil || arg == "" {
		return keysIn(keyCols, keys), err
	}
	vars := make([]any, 0, len(keyCols)+1)
	marks := make([]string, len(keyCols))
	for i, c := range keyCols {
		vars = append(vars, clause.Column{Table: clause.CurrentTable, Name: c})
		marks[i] = "?"
	}
	return clause.Expr{SQL: "(" + strings.Join(marks, ", ") + ") IN " + mysqlKeysSelect(types), Vars: append(vars, arg)}, nil
}

// mysqlKeysSelect is the subquery of a key set: SELECT the JSON table's
// columns FROM JSON_TABLE(?, …) (its one placeholder).
func mysqlKeysSelect(types []string) string {
	sel := make([]string, len(types))
	defs := make([]string, len(types))
	for i, typ := range types {
		c := "`c" + strconv.Itoa(i) + "`"
		sel[i] = "`herald_keys`." + c
		defs[i] = c + " " + typ + " PATH '$[" + strconv.Itoa(i) + "]'"
	}
	return "(SELECT " + strings.Join(sel, ", ") + " FROM JSON_TABLE(?, '$[*]' COLUMNS(" + strings.Join(defs, ", ") + ")) AS `herald_keys`)"
}

// mysqlKeysOr is "the row holds one of the sets' keys" on MySQL: one set
// as mysqlKeysIn, several as a semi-join on the table's key pk over the
// UNION of each set's rows,
//
//	(`t`.`id`) IN (SELECT `herald_u`.`id` FROM (SELECT `herald_r`.`id` FROM `t` AS `herald_r` WHERE (`herald_r`.`code`) IN (SELECT … JSON_TABLE(?, …) …) UNION SELECT …) AS `herald_u`)
//
// each set one JSON parameter.
func (p *Plugin) mysqlKeysOr(ctx context.Context, q gorm.ConnPool, table string, pk []string, sets []keySet, known map[string]string) (clause.Expression, error) {
	var live []keySet
	for _, s := range sets {
		if len(s.keys) > 0 {
			live = append(live, s)
		}
	}
	switch len(live) {
	case 0:
		return clause.Expr{SQL: "1 = 0"}, nil
	case 1:
		return p.mysqlKeysIn(ctx, q, table, live[0].cols, live[0].keys, known)
	}
	quote := func(alias, c string) string { return "`" + alias + "`.`" + strings.ReplaceAll(c, "`", "``") + "`" }
	var (
		b    strings.Builder
		vars []any
	)
	outer := make([]string, len(pk))
	inner := make([]string, len(pk))
	marks := make([]string, len(pk))
	for i, c := range pk {
		outer[i] = quote("herald_u", c)
		inner[i] = quote("herald_r", c)
		marks[i] = "?"
		vars = append(vars, clause.Column{Table: clause.CurrentTable, Name: c})
	}
	b.WriteString("(" + strings.Join(marks, ", ") + ") IN (SELECT " + strings.Join(outer, ", ") + " FROM (")
	for i, s := range live {
		arg, types, err := p.mysqlKeyJSON(ctx, q, table, s.cols, s.keys, known)
		if err != nil {
			return nil, err
		}
		if arg == "" { // a key JSON cannot carry: the OR of IN lists
			ors := make([]clause.Expression, len(live))
			for j, s := range live {
				ors[j] = keysIn(s.cols, s.keys)
			}
			return clause.Or(ors...), nil
		}
		if i > 0 {
			b.WriteString(" UNION ")
		}
		cs := make([]string, len(s.cols))
		for j, c := range s.cols {
			cs[j] = quote("herald_r", c)
		}
		b.WriteString("SELECT " + strings.Join(inner, ", ") + " FROM ? AS `herald_r` WHERE (" + strings.Join(cs, ", ") + ") IN " + mysqlKeysSelect(types))
		vars = append(vars, clause.Table{Name: table}, arg)
	}
	b.WriteString(") AS `herald_u`)")
	return clause.Expr{SQL: b.String(), Vars: vars}, nil
}

// keySet is one operand of mysqlKeysOr: cols hold one of keys.
type keySet struct {
	cols []string
	keys [][]any
}

// mysqlKeyJSON returns keys as a JSON list of lists and each column's
// JSON_TABLE type; arg is "" when a value is neither an integer nor a
// string once its Valuer ran, or a column holds both.
func (p *Plugin) mysqlKeyJSON(ctx context.Context, q gorm.ConnPool, table string, cols []string, keys [][]any, known map[string]string) (arg string, types []string, err error) {
	types = make([]string, len(cols))
	out := make([][]any, len(keys))
	strs := false
	for i, k := range keys {
		vs := make([]any, len(cols))
		for j := range cols {
			v, ok := jsonKeyValue(k[j])
			if !ok {
				return "", nil, nil
			}
			typ := "BIGINT"
			switch x := v.(type) {
			case string:
				typ, strs = "string", true
			case uint64:
				if x > math.MaxInt64 {
					typ = "BIGINT UNSIGNED"
				}
			}
			switch {
			case types[j] == "":
				types[j] = typ
			case (types[j] == "string") != (typ == "string"):
				return "", nil, nil // integers and strings in one column: bind each value
			case typ == "BIGINT UNSIGNED":
				types[j] = typ
			}
			vs[j] = v
		}
		out[i] = vs
	}
	if strs {
		st := known
		if st == nil {
			if st, err = p.mysqlStringTypes(ctx, q, table); err != nil {
				return "", nil, err
			}
		}
		for j, c := range cols {
			if types[j] == "string" {
				types[j] = st[strings.ToLower(c)]
				if types[j] == "" {
					types[j] = "VARCHAR(3072) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
				}
			}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", nil, fmt.Errorf("herald/gormcapture: keys of %s as JSON: %w", table, err)
	}
	return string(b), types, nil
}

// jsonKeyValue returns v as a value whose JSON the server reads back as
// v: an integer (int64 or uint64) or a string.
func jsonKeyValue(v any) (any, bool) {
	if vr, ok := v.(driver.Valuer); ok {
		var err error
		if v, err = vr.Value(); err != nil {
			return nil, false
		}
	}
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
		return uint64(x), true
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case string:
		return x, true
	}
	return nil, false
}

// mysqlStringTypes returns the JSON_TABLE type of each string column of
// table (lower-cased name -> VARCHAR(3072) CHARACTER SET … COLLATE …),
// read from information_schema once per table and kept (a table altered
// since only costs the plan: the values still compare, converted).
func (p *Plugin) mysqlStringTypes(ctx context.Context, q gorm.ConnPool, table string) (map[string]string, error) {
	if v, ok := p.mysqlStrings.Load(table); ok {
		return v.(map[string]string), nil
	}
	dbName, name := "", table
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		dbName, name = table[:i], table[i+1:]
	}
	rows, err := q.QueryContext(ctx, `SELECT COLUMN_NAME, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND CHARACTER_SET_NAME IS NOT NULL`, dbName, name)
	if err != nil {
		return nil, fmt.Errorf("herald/gormcapture: read the collations of %s: %w", table, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var col, cs, coll string
		if err := rows.Scan(&col, &cs, &coll); err != nil {
			return nil, fmt.Errorf("herald/gormcapture: read the collations of %s: %w", table, err)
		}
		out[strings.ToLower(col)] = mysqlStringType(cs, coll)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("herald/gormcapture: read the collations of %s: %w", table, err)
	}
	p.mysqlStrings.Store(table, out)
	return out, nil
}

// mysqlStringType is the JSON_TABLE column type for a string column of
// character set cs and collation coll.
func mysqlStringType(cs, coll string) string {
	if cs == "binary" {
		return "VARBINARY(3072)"
	}
	return "VARCHAR(3072) CHARACTER SET " + cs + " COLLATE " + coll
}
