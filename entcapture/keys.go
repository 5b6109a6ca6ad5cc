package entcapture

import (
	"database/sql/driver"
	"encoding/json"

	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
)

// keysIn returns the predicate "pk is one of ids" with one bind parameter
// whatever the number of ids (a bulk write pinned to the rows read before
// it may hold more ids than a statement may bind parameters: 65535 on
// PostgreSQL, 32766 on SQLite): the ids travel as one JSON array,
//
//	PostgreSQL: "t"."pk" IN (SELECT "r"."pk" FROM jsonb_populate_recordset(NULL::"t", $1::jsonb) AS "r")
//	SQLite:     "t"."pk" IN (SELECT value FROM json_each(?))
//
// (on PostgreSQL the table's own row type gives each id its column's
// type, so the key's index is used). Ids without a JSON form the database
// reads back as the same value (bytes) are bound one per id, as before.
func keysIn(d envelope.Dialect, table, pk string, ids []any) func(*sql.Selector) {
	if len(ids) == 0 {
		return sql.FieldIn(pk, ids...)
	}
	objs := make([]any, len(ids))
	for i, id := range ids {
		v := id
		if vr, ok := id.(driver.Valuer); ok {
			var err error
			if v, err = vr.Value(); err != nil {
				return sql.FieldIn(pk, ids...)
			}
		}
		switch v.(type) {
		case []byte, nil:
			return sql.FieldIn(pk, ids...)
		}
		if d == envelope.Postgres {
			v = map[string]any{pk: v}
		}
		objs[i] = v
	}
	arg, err := json.Marshal(objs)
	if err != nil {
		return sql.FieldIn(pk, ids...)
	}
	return func(s *sql.Selector) {
		col := s.C(pk)
		s.Where(sql.P(func(b *sql.Builder) {
			b.WriteString(col)
			if d == envelope.Postgres {
				b.WriteString(` IN (SELECT "r".` + envelope.QuoteIdent(pk) + ` FROM jsonb_populate_recordset(NULL::` + envelope.QuoteIdent(table) + `, `)
				b.Arg(string(arg))
				b.WriteString(`::jsonb) AS "r")`)
				return
			}
			b.WriteString(` IN (SELECT value FROM json_each(`)
			b.Arg(string(arg))
			b.WriteString(`))`)
		}))
	}
}
