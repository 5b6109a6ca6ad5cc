package entcapture

import (
	"encoding/json"

	"math"
	"strconv"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

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
//   - Keys bound as values: sets of keys (the rows a write is pinned to,
//     the rows a cascade reaches) are bound one parameter per value up to
//     mysqlInlineBinds values — an IN list the optimizer reads by index,
//     which FOR UPDATE then locks row by row — and beyond as ONE JSON
//     parameter through JSON_TABLE (integers as BIGINT, strings compared
//     under utf8mb4_bin, ent's default collation on MySQL).
//   - Identifiers are quoted with backticks (no ANSI_QUOTES needed).

// mysqlInlineBinds is the number of key values bound one per parameter
// on MySQL; larger sets travel as one JSON parameter (MySQL and MariaDB
// allow 65535 parameters a statement, ent's own among them).
const mysqlInlineBinds = 8192

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

// inSetMySQL is inSetP on MySQL: qc (qualified columns) hold one of the
// tuples. Up to mysqlInlineBinds values, one parameter each:
//
//	`t`.`a` IN (?, ?)   /   (`t`.`a`, `t`.`b`) IN ((?, ?), (?, ?))
//
// beyond, one JSON parameter:
//
//	(`t`.`a`, `t`.`b`) IN (SELECT `k`.`c0`, `k`.`c1` FROM JSON_TABLE(?, '$[*]' COLUMNS(`c0` BIGINT PATH '$[0]', `c1` VARCHAR(…) … PATH '$[1]')) AS `k`)
func inSetMySQL(qc []string, tuples [][]any) *sql.Predicate {
	if arg, types, ok := mysqlSetJSON(len(qc), tuples); ok && len(tuples)*len(qc) > mysqlInlineBinds {
		lhs := qc[0]
		if len(qc) > 1 {
			lhs = "(" + strings.Join(qc, ", ") + ")"
		}
		sel := make([]string, len(qc))
		defs := make([]string, len(qc))
		for i := range qc {
			c := "c" + strconv.Itoa(i)
			sel[i] = "`k`.`" + c + "`"
			defs[i] = "`" + c + "` " + types[i] + " PATH '$[" + strconv.Itoa(i) + "]'"
		}
		return sql.P(func(b *sql.Builder) {
			b.WriteString(lhs + " IN (SELECT " + strings.Join(sel, ", ") + " FROM JSON_TABLE(")
			b.Arg(arg)
			b.WriteString(", '$[*]' COLUMNS(" + strings.Join(defs, ", ") + ")) AS `k`)")
		})
	}
	if len(qc) == 1 {
		vs := make([]any, len(tuples))
		for i, t := range tuples {
			vs[i] = t[0]
		}
		return sql.In(qc[0], vs...)
	}
	return sql.P(func(b *sql.Builder) {
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
	})
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
