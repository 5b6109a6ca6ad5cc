package envelope

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Values PostgreSQL refuses (and that SQLite would store, so that one
// event could be written on one dialect and not on the other) are rejected
// before any statement on both, with ErrValidation naming the field:
//
//   - text columns (topic, ordering key, idempotency key, header names and
//     values, string values of Extra): invalid UTF-8, or a NUL byte;
//   - the payload (jsonb): a string holding U+0000 (\u0000), or a UTF-16
//     surrogate escape that is not half of a pair (\ud800 alone), which a
//     json.RawMessage or a json.Marshaler may hold;
//   - DeliverAt: outside the years 1 to 9999 (UTC). SQLite stores times as
//     fixed-width text that sorts as time only in that range, and
//     PostgreSQL's range differs from Go's.
//   - Extra: a column the table does not have.

// checkText reports why s cannot be stored in a text column, or "".
func checkText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "holds a NUL byte (U+0000), which PostgreSQL cannot store in text"
	}
	return ""
}

// minDeliverAt and maxDeliverAt bound DeliverAt.
var (
	minDeliverAt = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDeliverAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

func checkTime(t time.Time) string {
	if t.Before(minDeliverAt) || t.After(maxDeliverAt) {
		return fmt.Sprintf("%s is outside the years 1 to 9999 (UTC)", t.UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// checkJSONText reports why the JSON text p cannot be stored in a jsonb
// column, or "": a \u0000 escape, or a lone surrogate escape. Raw bytes
// need no check: jsonform's output is valid UTF-8 without raw control
// characters, and a payload is always jsonform's output.
func checkJSONText(p []byte) string {
	if bytes.IndexByte(p, '\\') < 0 {
		return ""
	}
	inString := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '"' {
			inString = !inString
			continue
		}
		if !inString || c != '\\' {
			continue
		}
		i++ // the escaped character
		if i >= len(p) || p[i] != 'u' || i+4 >= len(p) {
			continue
		}
		r := hex4(p[i+1 : i+5])
		i += 4
		switch {
		case r == 0:
			return `holds the escape \u0000 (NUL), which PostgreSQL cannot store in JSON`
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Sprintf(`holds the escape \u%04x, a low surrogate without a high one before it`, r)
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 < len(p) && p[i+1] == '\\' && p[i+2] == 'u' {
				if lo := hex4(p[i+3 : i+7]); lo >= 0xDC00 && lo <= 0xDFFF {
					i += 6
					continue
				}
			}
			return fmt.Sprintf(`holds the escape \u%04x, a high surrogate without a low one after it`, r)
		}
	}
	return ""
}

// hex4 decodes four hex digits; -1 when they are not.
func hex4(b []byte) int {
	n := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return n
}

// checkExtraValue reports why an Extra value cannot be bound, or "".
func checkExtraValue(v any) string {
	switch x := v.(type) {
	case string:
		return checkText(x)
	case *string:
		if x != nil {
			return checkText(*x)
		}
	case time.Time:
		return checkTime(x)
	}
	return ""
}

// extraColumns checks that the table has every column in cols. The
// table's columns are read once per Writer (and again when a column is
// not found, in case it was added since): one catalog query, the first
// time a message has Extra, that neither writes nor fails when the table
// is missing.
func (w *Writer) extraColumns(ctx context.Context, q Querier, rows []row) error {
	need := false
	for i := range rows {
		if len(rows[i].extra) > 0 {
			need = true
			break
		}
	}
	if !need {
		return nil
	}
	for reload := false; ; reload = true {
		cols, err := w.tableColumns(ctx, q, reload)
		if err != nil {
			return err
		}
		missing := ""
		var where string
	scan:
		for i := range rows {
			for c := range rows[i].extra {
				if !cols[c] {
					missing, where = c, rows[i].where("Extra")
					break scan
				}
			}
		}
		if missing == "" {
			return nil
		}
		if reload {
			return validationf(where, "table %s has no column %q", w.t.Name, missing)
		}
	}
}

func (w *Writer) tableColumns(ctx context.Context, q Querier, reload bool) (map[string]bool, error) {
	w.mu.Lock()
	cols := w.cols
	w.mu.Unlock()
	if cols != nil && !reload {
		return cols, nil
	}
	var query string
	var arg any
	switch w.d {
	case Postgres:
		query = `SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`
		arg = w.t.Quoted
	case MySQL:
		query = `SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?`
		arg = w.t.Name
	default:
		query = `SELECT name FROM pragma_table_info(?)`
		arg = w.t.Name
	}
	rs, err := q.QueryContext(ctx, query, arg)
	if err != nil {
		return nil, fmt.Errorf("herald/envelope: read the columns of %s: %w", w.t.Name, err)
	}
	defer rs.Close()
	cols = map[string]bool{}
	for rs.Next() {
		var c string
		if err := rs.Scan(&c); err != nil {
			return nil, fmt.Errorf("herald/envelope: read the columns of %s: %w", w.t.Name, err)
		}
		cols[c] = true
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("herald/envelope: read the columns of %s: %w", w.t.Name, err)
	}
	if len(cols) == 0 {
		return nil, configurationf("Table", "outbox table %s is missing; create it with envelope.Migrate", w.t.Name)
	}
	w.mu.Lock()
	w.cols = cols
	w.mu.Unlock()
	return cols, nil
}
