package entcapture

import (
	"encoding/json"

	"math"
	"strconv"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture/entcapturert"
	"github.com/heraldgo/herald/envelope"
)

// MySQL and MariaDB (ent's dialect.MySQL). One code path for what both
// MySQL 8.0 and MariaDB 10.6+ have:
//
//   - No RETURNING (MariaDB has it for INSERT and DELETE, MySQL has
//     none): the rows a write changes are read around it, as on a client
//     not opened on Driver — locked with SELECT … FOR UPDATE before the
//     write (the before images, and the keys the write is pinned to) and
//     read by key after it (the after images). The driver wrapper adds
//     nothing to ent's statements.
//   - Creates: ent reads the ids from LAST_INSERT_ID (a CreateBulk's as
//     the first id plus the item's position: InnoDB gives one statement's
//     rows consecutive ids unless innodb_autoinc_lock_mode=2 with
//     concurrent inserts — ent's own assumption). A create holding a
//     time with a fraction of a second is read back by id: a DATETIME or
//     TIMESTAMP column keeps 0 fractional digits unless declared with
//     more, and MySQL rounds what MariaDB truncates.
//   - Upserts (ON DUPLICATE KEY UPDATE): ent renders no conflict target
//     on MySQL — the database conflicts on any unique key — so the
//     capture needs one: the columns named with OnConflictColumns(…), or
//     the id when every row sets it. The rows holding the creates' target
//     values are read FOR UPDATE before the INSERT, and read again after
//     it by target and by id: a row found before is updated (skipped when
//     the action sets nothing: DoNothing, which ent turns into an update
//     of every column to itself, or Ignore), a row found only after is
//     inserted. At REPEATABLE READ (both servers' default) the locked
//     read of a missing key takes InnoDB's gap lock, so no other
//     transaction can insert that key between the read and the INSERT:
//     concurrent upserts of one new key then wait for each other, or one
//     fails with a deadlock (1213) to retry, instead of one being told
//     "inserted" for the row the other inserted. At READ COMMITTED there
//     are no gap locks: such a race is classified inserted.
//   - Keys bound as values: every set of keys (the rows a write is pinned
//     to, the rows a cascade reaches, join rows, an upsert's conflict
//     values) is ONE JSON parameter through JSON_TABLE (integers as
//     BIGINT, strings compared under utf8mb4_bin, ent's default collation
//     on MySQL), whatever its size: in a SELECT a semi-join the JSON
//     table drives, by the key's index; a write's pin is turned into a
//     join by the driver wrapper (pinJoin). See inSetMySQL.
//   - Identifiers are quoted with backticks (no ANSI_QUOTES needed).

// locks reports whether the capture's reads before a write lock their
// rows with FOR UPDATE (PostgreSQL and MySQL; SQLite takes its one write
// lock instead).
func locks(d envelope.Dialect) bool { return d != envelope.SQLite }

// conflictDialect is the dialect an upsert's conflict options are
// rendered in to be read back: on MySQL PostgreSQL's form, which keeps
// the conflict columns and DO NOTHING that MySQL's ON DUPLICATE KEY
// UPDATE drops.
func conflictDialect(d envelope.Dialect) string {
	if d == envelope.MySQL {
		return dialect.Postgres
	}
	return dialectName(d)
}

// lastInsertIDSelf reports whether rhs is LAST_INSERT_ID(table.col): ent
// adds `id` = LAST_INSERT_ID(`t`.`id`) to a MySQL upsert's update so that
// LAST_INSERT_ID names the conflicting row; it leaves the id as it was.
func lastInsertIDSelf(rhs, table, col string) bool {
	inner, ok := strings.CutPrefix(strings.TrimSpace(rhs), "LAST_INSERT_ID(")
	if !ok || !strings.HasSuffix(inner, ")") {
		return false
	}
	return qualifiedSelf(strings.TrimSuffix(inner, ")"), table, col)
}

// mysqlUpsertTarget checks a MySQL upsert and gives it a conflict target
// when it names none: the id, when every row sets it.
func mysqlUpsertTarget(w *write, u *upsert, creates []*created) error {
	unsupported := func(msg string) error {
		return &envelope.Error{Kind: envelope.ErrUnsupported, Where: w.sch.Name + " upsert", Msg: msg}
	}
	if u.where {
		return unsupported("MySQL's ON DUPLICATE KEY UPDATE has no WHERE: drop UpdateWhere")
	}
	if len(u.target) > 0 {
		return nil
	}
	ids := w.sch.PK != ""
	for _, it := range creates {
		if id, ok := it.w.g.HeraldID(); !ok || id == nil {
			ids = false
		}
	}
	if !ids {
		return unsupported("on MySQL an upsert conflicts on any unique key and ent's statement names none: name the columns of the unique key the rows conflict on with OnConflictColumns(...), or set every row's id")
	}
	u.target = []string{w.sch.PK}
	return nil
}

// mysqlTimeDiffers reports whether a create's row holds a time with a
// fraction of a second, which its column may keep otherwise.
func mysqlTimeDiffers(row map[string]any) bool {
	for _, v := range row {
		switch t := v.(type) {
		case time.Time:
			if t.Nanosecond() != 0 {
				return true
			}
		case *time.Time:
			if t != nil && t.Nanosecond() != 0 {
				return true
			}
		}
	}
	return false
}

// mysqlSpatialDiffers reports whether a create's row sets a column of a
// MySQL spatial type (Schema.Types["mysql"]: point, linestring, polygon,
// multi…, geometrycollection, geometry) to anything but the server's own geometry
// bytes: a Go type that binds itself through ST_GeomFromText (ent's
// sql.ParamFormatter) holds WKT, which the column stores as SRID-prefixed
// WKB, the form its event renders as GeoJSON; the row is read back.
func mysqlSpatialDiffers(sch *entcapturert.Schema, row map[string]any) bool {
	for c, typ := range sch.Types[dialect.MySQL] {
		switch strings.ToLower(strings.TrimSpace(typ)) {
		case "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection", "geomcollection", "geometry":
		default:
			continue
		}
		switch v := row[c].(type) {
		case nil:
		case []byte:
			if !mysqlGeometryBytes(v) {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// mysqlGeometryBytes reports whether b looks like MySQL's geometry bytes:
// a 4-byte SRID, then WKB (a byte-order byte of 0 or 1, a 4-byte type).
func mysqlGeometryBytes(b []byte) bool {
	return len(b) >= 9 && (b[4] == 0 || b[4] == 1)
}

// inSetMySQL is inSetP on MySQL: qc (qualified columns) hold one of the
// tuples, bound as ONE JSON parameter whatever their number:
//
//	(`t`.`a`, `t`.`b`) IN (SELECT `herald_keys`.`c0`, `herald_keys`.`c1` FROM JSON_TABLE(?, '$[*]' COLUMNS(`c0` BIGINT PATH '$[0]', `c1` VARCHAR(…) … PATH '$[1]')) AS `herald_keys`)
//
// In a SELECT both servers run this as a semi-join that the JSON table
// drives (MariaDB: materialized, or DuplicateWeedout), reaching the rows
// by the key's index (eq_ref/ref), so FOR UPDATE locks only them. A
// single-table UPDATE or DELETE cannot use a semi-join on MariaDB before
// 11.1 (it runs the subquery once per row of a scan): a pin of a write
// (mysqlPin) carries markers the driver wrapper turns into a join
// (pinJoin). Tuples holding a value that is neither an integer nor a
// string once its Valuer ran (bytes, times) are bound one parameter per
// value, as ent binds them.
func inSetMySQL(qc []string, tuples [][]any) *sql.Predicate {
	w, _, _ := mysqlKeySet(qc, tuples)
	return sql.P(w)
}

// mysqlKeySet writes inSetMySQL's predicate and gives, when the tuples
// travel as JSON, the JSON_TABLE (its text, with the one placeholder) and
// the join condition that match the same rows.
func mysqlKeySet(qc []string, tuples [][]any) (w func(*sql.Builder), table, on string) {
	arg, types, ok := mysqlSetJSON(len(qc), tuples)
	if !ok {
		return mysqlList(qc, tuples), "", ""
	}
	lhs := qc[0]
	if len(qc) > 1 {
		lhs = "(" + strings.Join(qc, ", ") + ")"
	}
	sel := make([]string, len(qc))
	defs := make([]string, len(qc))
	eqs := make([]string, len(qc))
	for i := range qc {
		c := "c" + strconv.Itoa(i)
		sel[i] = "`" + mysqlKeysAlias + "`.`" + c + "`"
		defs[i] = "`" + c + "` " + types[i] + " PATH '$[" + strconv.Itoa(i) + "]'"
		eqs[i] = qc[i] + " = " + sel[i]
	}
	table = "JSON_TABLE(?, '$[*]' COLUMNS(" + strings.Join(defs, ", ") + ")) AS `" + mysqlKeysAlias + "`"
	on = strings.Join(eqs, " AND ")
	return func(b *sql.Builder) {
		b.WriteString(lhs + " IN (SELECT " + strings.Join(sel, ", ") + " FROM JSON_TABLE(")
		b.Arg(arg)
		b.WriteString(", '$[*]' COLUMNS(" + strings.Join(defs, ", ") + ")) AS `" + mysqlKeysAlias + "`)")
	}, table, on
}

// mysqlList writes "qc hold one of tuples" with one parameter per value:
// for values JSON cannot carry, and for an OR of key sets (inSetsOr).
func mysqlList(qc []string, tuples [][]any) func(*sql.Builder) {
	if len(qc) == 1 {
		vs := make([]any, len(tuples))
		for i, t := range tuples {
			vs[i] = t[0]
		}
		return func(b *sql.Builder) { b.Join(sql.In(qc[0], vs...)) }
	}
	return func(b *sql.Builder) {
		b.WriteString("(" + strings.Join(qc, ", ") + ") IN (")
		for i, t := range tuples {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for j := range qc {
				if j > 0 {
					b.WriteString(", ")
				}
				b.Arg(t[j])
			}
			b.WriteByte(')')
		}
		b.WriteByte(')')
	}
}

// mysqlKeysAlias names the JSON table of a key set.
const mysqlKeysAlias = "herald_keys"

// The markers around a write's pin (mysqlPin): the join condition rides
// in the first, so that the driver wrapper can move the key set out of
// the WHERE into a join without parsing ent's statement.
const (
	pinOpen  = "/*herald:pin "
	pinClose = "/*herald:pin-end*/"
)

// mysqlPin is the pin of an UPDATE or DELETE to the rows read before it
// (pin) on MySQL: inSetMySQL's predicate between markers that
// carry the equivalent join condition. Through Driver the statement runs
// as a multi-table UPDATE or DELETE joined to the key set (pinJoin),
// which both servers drive from the JSON table by the key's index;
// without the wrapper (a caller transaction on a client not opened on
// Driver) it runs as written, correct but, on MariaDB before 11.1, one
// evaluation of the subquery per row the WHERE reaches.
func mysqlPin(qc []string, tuples [][]any) *sql.Predicate {
	w, table, on := mysqlKeySet(qc, tuples)
	if table == "" || strings.Contains(on, "*/") {
		return sql.P(w)
	}
	return sql.P(func(b *sql.Builder) {
		b.WriteString(pinOpen + table + " ON " + on + "*/ ")
		w(b)
		b.WriteString(" " + pinClose)
	})
}

// pinJoin turns ent's UPDATE or DELETE of one table whose WHERE holds a
// pin (mysqlPin) into the same write joined to the pin's key set:
//
//	UPDATE `t` SET … WHERE … AND /*herald:pin J ON c*/ `t`.`id` IN (SELECT … JSON_TABLE(?, …) …) /*herald:pin-end*/
//	→ UPDATE `t` JOIN J ON c SET … WHERE … AND TRUE
//	DELETE FROM `t` WHERE …   →   DELETE `t` FROM `t` JOIN J ON c WHERE …
//
// moving the pin's one parameter first. A statement without a pin, or of
// another shape, is returned as it is. The join matches each row at most
// once (the keys are the rows' own, distinct), and the server writes only
// t. One difference of the multi-table form: MySQL evaluates a
// single-table UPDATE's assignments left to right, a multi-table one's in
// no set order — it matters only to a SET that reads a column the same
// statement assigns before it, which ent's setters do not write (an Add
// reads the column it assigns).
func pinJoin(query string, args any) (string, any) {
	open := strings.Index(query, pinOpen)
	if open < 0 || strings.Count(query, pinOpen) != 1 {
		return query, args
	}
	as, ok := args.([]any)
	if !ok {
		return query, args
	}
	endHead := strings.Index(query[open:], "*/")
	end := strings.Index(query, pinClose)
	if endHead < 0 || end < open {
		return query, args
	}
	join := query[open+len(pinOpen) : open+endHead]
	pred := query[open+endHead+2 : end]
	// The pin's parameter: the first in pred, after those of the text
	// before it.
	before := placeholders(query[:open])
	if placeholders(pred) != 1 || before < 0 || before >= len(as) {
		return query, args
	}
	rest := query[:open] + "TRUE" + query[end+len(pinClose):]
	var q string
	switch {
	case strings.HasPrefix(rest, "UPDATE "):
		tbl, tail, ok := leadingIdent(rest[len("UPDATE "):])
		if !ok || !strings.HasPrefix(tail, " SET ") {
			return query, args
		}
		q = "UPDATE " + tbl + " JOIN " + join + tail
	case strings.HasPrefix(rest, "DELETE FROM "):
		tbl, tail, ok := leadingIdent(rest[len("DELETE FROM "):])
		if !ok || (tail != "" && !strings.HasPrefix(tail, " WHERE ")) {
			return query, args
		}
		q = "DELETE " + tbl + " FROM " + tbl + " JOIN " + join + tail
	default:
		return query, args
	}
	na := make([]any, 0, len(as))
	na = append(na, as[before])
	na = append(na, as[:before]...)
	na = append(na, as[before+1:]...)
	return q, na
}

// leadingIdent splits s into the backquoted identifier it starts with
// (`t` or `db`.`t`) and what follows.
func leadingIdent(s string) (ident, rest string, ok bool) {
	i := 0
	for {
		if i >= len(s) || s[i] != '`' {
			return "", "", false
		}
		j := i + 1
		for {
			k := strings.IndexByte(s[j:], '`')
			if k < 0 {
				return "", "", false
			}
			j += k + 1
			if j < len(s) && s[j] == '`' { // a doubled backquote
				j++
				continue
			}
			break
		}
		i = j
		if i < len(s) && s[i] == '.' {
			i++
			continue
		}
		return s[:i], s[i:], true
	}
}

// placeholders counts the ? of MySQL text outside quotes and comments;
// -1 when a quote or comment does not end.
func placeholders(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '?':
			n++
		case '\'', '"', '`':
			for i++; i < len(s) && s[i] != c; i++ {
				if s[i] == '\\' && c != '`' {
					i++
				}
			}
			if i >= len(s) {
				return -1
			}
		case '/':
			if i+1 < len(s) && s[i+1] == '*' {
				k := strings.Index(s[i+2:], "*/")
				if k < 0 {
					return -1
				}
				i += k + 3
			}
		}
	}
	return n
}

// mysqlSetJSON returns the tuples as a JSON list of lists and each
// column's JSON_TABLE type; ok is false when a value is neither an
// integer nor a string once its Valuer ran.
func mysqlSetJSON(n int, tuples [][]any) (string, []string, bool) {
	types := make([]string, n)
	out := make([][]any, len(tuples))
	for i, t := range tuples {
		vs := make([]any, n)
		for j := range n {
			v, ok := jsonKey(t[j])
			if !ok {
				return "", nil, false
			}
			typ := "BIGINT"
			switch x := v.(type) {
			case string:
				typ = "VARCHAR(3072) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
			case uint, uint64:
				if u, _ := asUint(x); u > math.MaxInt64 {
					typ = "BIGINT UNSIGNED"
				}
			}
			switch {
			case types[j] == "":
				types[j] = typ
			case types[j] != typ && (strings.HasPrefix(types[j], "VARCHAR") || strings.HasPrefix(typ, "VARCHAR")):
				return "", nil, false // a column of integers and strings: bind each value
			case typ == "BIGINT UNSIGNED":
				types[j] = typ
			}
			vs[j] = v
		}
		out[i] = vs
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", nil, false
	}
	return string(b), types, true
}

func asUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint:
		return uint64(x), true
	case uint64:
		return x, true
	}
	return 0, false
}
