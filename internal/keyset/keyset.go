// Package keyset writes a set of keys as the one JSON bind parameter the
// capture packages read rows by (rule 5: one parameter whatever the
// number of keys). gormcapture and entcapture build their own SQL around
// it (json_populate_recordset on PostgreSQL, json_each on SQLite); the
// parameter's shape is shared here.
package keyset

import (
	"encoding/json"

	"github.com/heraldgo/herald/envelope"
)

// JSON returns keys (one tuple of values per key, in cols' order) as the
// parameter: on PostgreSQL a list of objects by column name, read with
// json_populate_recordset; elsewhere a list of values (one column) or of
// lists. value turns each key value into the JSON value the database
// reads back as that value bound; ok is false when one has none (the
// caller then binds the keys one by one).
func JSON(d envelope.Dialect, cols []string, keys [][]any, value func(any) (any, bool)) (string, bool) {
	out := make([]any, len(keys))
	for i, k := range keys {
		vs := make([]any, len(cols))
		for j := range cols {
			v, ok := value(k[j])
			if !ok {
				return "", false
			}
			vs[j] = v
		}
		switch {
		case d == envelope.Postgres:
			m := make(map[string]any, len(cols))
			for j, c := range cols {
				m[c] = vs[j]
			}
			out[i] = m
		case len(cols) == 1:
			out[i] = vs[0]
		default:
			out[i] = vs
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", false
	}
	return string(b), true
}
