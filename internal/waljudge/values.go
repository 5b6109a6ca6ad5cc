package waljudge

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Equal reports whether an event's JSON value is the column's value as
// the log holds it, by the column's type: numbers by value (numeric
// exactly, real as float32), booleans, timestamps as instants (timestamp
// without time zone by its wall clock), dates, bytea by its bytes (the
// event's base64, or text), json/jsonb by their JSON value (the event may
// hold the JSON itself or its text), and text-like types by their text.
// known is false for a pair the judge cannot compare (an array or
// composite held as a JSON list or object).
func Equal(v Value, raw json.RawMessage) (eq, known bool) {
	var j any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&j); err != nil {
		return false, true
	}
	if v.Null || j == nil {
		return v.Null && j == nil, true
	}
	t := v.Type
	switch {
	case t == "smallint" || t == "integer" || t == "bigint" || t == "oid":
		a, ok1 := new(big.Int).SetString(v.Text, 10)
		b, ok2 := intOf(j)
		return ok1 && ok2 && a.Cmp(b) == 0, true
	case t == "numeric" || strings.HasPrefix(t, "numeric("):
		a, ok1 := new(big.Rat).SetString(v.Text)
		b, ok2 := ratOf(j)
		if !ok1 || !ok2 {
			return textOf(j) == v.Text, true
		}
		return a.Cmp(b) == 0, true
	case t == "double precision" || t == "real":
		a, ok1 := floatOf(v.Text)
		b, ok2 := floatOf(textOf(j))
		if !ok1 || !ok2 {
			return false, true
		}
		if t == "real" {
			return float32(a) == float32(b) || (math.IsNaN(a) && math.IsNaN(b)), true
		}
		return a == b || (math.IsNaN(a) && math.IsNaN(b)), true
	case t == "boolean":
		b, ok := j.(bool)
		if !ok {
			return false, true
		}
		return (v.Text == "true") == b, true
	case t == "timestamp with time zone":
		a, ok1 := parseTime(v.Text)
		b, ok2 := parseTime(textOf(j))
		return ok1 && ok2 && a.Equal(b), true
	case t == "timestamp without time zone":
		a, ok1 := parseTime(v.Text)
		b, ok2 := parseTime(textOf(j))
		if !ok1 || !ok2 {
			return false, true
		}
		return a.Equal(b) || wall(a) == wall(b), true
	case t == "date":
		s := textOf(j)
		return len(s) >= 10 && s[:10] == v.Text, true
	case t == "bytea":
		want, err := hex.DecodeString(strings.TrimPrefix(v.Text, `\x`))
		if err != nil {
			return false, true
		}
		s, ok := j.(string)
		if !ok {
			return false, false
		}
		if b, err := base64.StdEncoding.DecodeString(s); err == nil && bytes.Equal(b, want) {
			return true, true
		}
		return s == string(want), true
	case t == "json" || t == "jsonb":
		var w any
		wd := json.NewDecoder(strings.NewReader(v.Text))
		wd.UseNumber()
		if err := wd.Decode(&w); err != nil {
			return textOf(j) == v.Text, true
		}
		if s, ok := j.(string); ok {
			var inner any
			id := json.NewDecoder(strings.NewReader(s))
			id.UseNumber()
			if err := id.Decode(&inner); err == nil && jsonEqual(w, inner) {
				return true, true
			}
			return s == v.Text, true
		}
		return jsonEqual(w, j), true
	}
	switch j.(type) {
	case string, json.Number, bool:
		s := textOf(j)
		return s == v.Text || (t == "character" && strings.TrimRight(s, " ") == strings.TrimRight(v.Text, " ")), true
	}
	return false, false // a list or an object for an array or composite column
}

func textOf(j any) string {
	switch x := j.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	b, _ := json.Marshal(j)
	return string(b)
}

func intOf(j any) (*big.Int, bool) {
	switch x := j.(type) {
	case bool:
		if x {
			return big.NewInt(1), true
		}
		return big.NewInt(0), true
	case json.Number, string:
		return new(big.Int).SetString(textOf(x), 10)
	}
	return nil, false
}

func ratOf(j any) (*big.Rat, bool) {
	switch j.(type) {
	case json.Number, string:
		return new(big.Rat).SetString(textOf(j))
	}
	return nil, false
}

func floatOf(s string) (float64, bool) {
	switch s {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		return math.Inf(1), true
	case "-Infinity":
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// parseTime reads PostgreSQL's ISO output ("2026-12-01 21:37:42.44013+00",
// "+05:30", none) and RFC 3339.
func parseTime(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07", "2006-01-02 15:04:05.999999999-07:00",
		"2006-01-02 15:04:05.999999999-07:00:00", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func wall(t time.Time) string { return t.Format("2006-01-02 15:04:05.999999999") }

// jsonEqual compares decoded JSON values, numbers by value.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		p, ok1 := new(big.Rat).SetString(x.String())
		q, ok2 := new(big.Rat).SetString(y.String())
		return ok1 && ok2 && p.Cmp(q) == 0
	}
	return a == b
}
