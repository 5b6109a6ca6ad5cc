package oracle

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Mode says which images the events hold, as envelope.PayloadMode does.
type Mode int

// The payload modes.
const (
	After Mode = iota
	Keys
	BeforeAndAfter
)

type event struct {
	seq       int64
	Model     string          `json:"model"`
	Operation string          `json:"operation"`
	PK        json.RawMessage `json:"pk"`
	Changed   []string        `json:"changed"`
	Before    json.RawMessage `json:"before"`
	After     json.RawMessage `json:"after"`
	before    map[string]any
	after     map[string]any
}

func decode(raw string, v any) error {
	d := json.NewDecoder(strings.NewReader(raw))
	d.UseNumber()
	return d.Decode(v)
}

func (o *Oracle) find(f Finding) {
	o.findings.Add(1)
	if o.report != nil {
		o.report(f)
	}
}

// check compares the difference of two snapshots with the events of
// after. w holds the rows the statements between them wrote (SQLite); on
// PostgreSQL those are the rows whose version (xmin) changed.
func (o *Oracle) check(before, after *snapshot, w written) {
	if before == nil || after == nil {
		return
	}
	if before.err != nil || after.err != nil {
		err := before.err
		if err == nil {
			err = after.err
		}
		o.find(Finding{Kind: "error", Detail: "the oracle could not read the tables: " + err.Error()})
		return
	}
	o.checks.Add(1)
	byRow := map[string][]*event{} // table + "\x00" + key
	for _, re := range after.events {
		e := &event{seq: re.seq}
		if err := decode(re.payload, e); err != nil {
			o.find(Finding{Kind: "error", Detail: fmt.Sprintf("event %d: %v", re.seq, err)})
			continue
		}
		o.events.Add(1)
		tb, ok := o.tables.Models[e.Model]
		if !ok {
			o.find(Finding{Kind: "unknown-model", Detail: fmt.Sprintf("event %d: model %q", re.seq, e.Model)})
			continue
		}
		if len(e.Before) > 0 && string(e.Before) != "null" {
			_ = decode(string(e.Before), &e.before)
		}
		if len(e.After) > 0 && string(e.After) != "null" {
			_ = decode(string(e.After), &e.after)
		}
		k := o.eventKey(tb, e)
		byRow[tb+"\x00"+k] = append(byRow[tb+"\x00"+k], e)
	}
	for _, tb := range o.tableList() {
		b, a := before.rows[tb], after.rows[tb]
		keys := map[string]bool{}
		for k := range b {
			keys[k] = true
		}
		for k := range a {
			keys[k] = true
		}
		for k := range byRow {
			if t, key, _ := strings.Cut(k, "\x00"); t == tb {
				keys[key] = true
			}
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			evs := byRow[tb+"\x00"+k]
			delete(byRow, tb+"\x00"+k)
			wrote := w[tb][k]
			if x, y := before.xmin[tb], after.xmin[tb]; x != nil && y != nil && b[k] != nil && a[k] != nil && x[k] != y[k] {
				wrote = true
			}
			o.checkRow(tb, k, b[k], a[k], wrote, evs)
		}
	}
}

func opOf(b, a map[string]any) string {
	switch {
	case b == nil:
		return "inserted"
	case a == nil:
		return "deleted"
	}
	return "updated"
}

// checkRow judges one row: b and a as stored before and after, wrote
// whether a statement wrote it (perhaps with the values it held: an
// UPDATE that matched it is a write, which triggers, RowsAffected and
// the WAL count, and so must its event).
func (o *Oracle) checkRow(tb, key string, b, a map[string]any, wrote bool, evs []*event) {
	absent := b == nil && a == nil // inserted and deleted in the transaction
	changed := !absent && (wrote || !rowsEqual(b, a))
	if changed {
		o.rows.Add(1)
	}
	f := func(kind, format string, args ...any) {
		o.find(Finding{Kind: kind, Table: tb, Key: key, Detail: fmt.Sprintf(format, args...)})
	}
	switch {
	case len(evs) == 0 && !changed:
		return
	case len(evs) == 0 && b != nil && a != nil && rowsEqual(b, a):
		f("missed", "row written with the values it held (a statement wrote it), no event")
		return
	case len(evs) == 0:
		f("missed", "row %s, no event", opOf(b, a))
		return
	case !changed && !absent:
		f("spurious", "row not written, events %s", ops(evs))
		return
	}
	if len(evs) == 1 {
		e := evs[0]
		if b == nil && a == nil {
			f("spurious", "row neither before nor after, event %s", e.Operation)
			return
		}
		if want := opOf(b, a); e.Operation != want {
			f("operation", "row %s, event %s", want, e.Operation)
			return
		}
		o.images(tb, f, e, b, a)
		return
	}
	// Several events: they must chain from the row before to the row
	// after, each one operation on the row as the previous left it.
	state, known := b, true
	for _, e := range evs {
		switch e.Operation {
		case "inserted":
			if state != nil {
				f("duplicate", "events %s: inserted while the row exists", ops(evs))
				return
			}
		case "updated", "deleted":
			if state == nil {
				f("duplicate", "events %s: %s while the row does not exist", ops(evs), e.Operation)
				return
			}
			if known && e.before != nil && o.imageDiff(tb, state, e.before) != "" {
				f("image", "events %s: event %d's before image is not the row it follows: %s", ops(evs), e.seq, o.imageDiff(tb, state, e.before))
			}
		}
		switch e.Operation {
		case "inserted", "updated":
			state, known = e.after, e.after != nil
			if state == nil {
				state = map[string]any{} // exists, image unknown (Keys mode)
			}
		case "deleted":
			state, known = nil, true
		}
	}
	switch {
	case (state == nil) != (a == nil):
		f("operation", "events %s do not leave the row %s", ops(evs), map[bool]string{true: "deleted", false: "present"}[a == nil])
	case a != nil && known:
		if d := o.imageDiff(tb, a, state); d != "" {
			f("image", "events %s: the last after image is not the row stored: %s", ops(evs), d)
		}
	}
}

func ops(evs []*event) string {
	s := make([]string, len(evs))
	for i, e := range evs {
		s[i] = e.Operation
	}
	return strings.Join(s, ",")
}

// images checks one event's images against the stored rows.
func (o *Oracle) images(tb string, f func(kind, format string, args ...any), e *event, b, a map[string]any) {
	mode := o.tables.Mode
	switch e.Operation {
	case "inserted":
		if mode != Keys {
			if e.after == nil {
				f("image", "inserted without an after image")
			} else if d := o.imageDiff(tb, a, e.after); d != "" {
				f("image", "after image: %s", d)
			}
		}
	case "updated":
		if mode != Keys {
			if e.after == nil {
				f("image", "updated without an after image")
			} else if d := o.imageDiff(tb, a, e.after); d != "" {
				f("image", "after image: %s", d)
			}
		}
		if mode == BeforeAndAfter {
			if e.before == nil {
				f("image", "updated without a before image")
			} else if d := o.imageDiff(tb, b, e.before); d != "" {
				f("image", "before image: %s", d)
			}
		}
		if e.Changed != nil {
			var missing []string
			for col, v := range a {
				if !valueEqual(b[col], v) && !contains(e.Changed, col) {
					missing = append(missing, col)
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				f("changed", "changed=%v lacks %v, which the row changed", e.Changed, missing)
			}
		}
	case "deleted":
		if mode != Keys {
			if e.before == nil {
				f("image", "deleted without a before image")
			} else if d := o.imageDiff(tb, b, e.before); d != "" {
				f("image", "before image: %s", d)
			}
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// eventKey is the text of an event's key, as rowKey makes a row's.
func (o *Oracle) eventKey(tb string, e *event) string {
	var v any
	if err := decode(string(e.PK), &v); err != nil {
		return string(e.PK)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return keyText(v)
	}
	o.mu.Lock()
	pk := o.pks[tb]
	o.mu.Unlock()
	if len(pk) == 0 {
		pk = make([]string, 0, len(m))
		for c := range m {
			pk = append(pk, c)
		}
		sort.Strings(pk)
	}
	return rowKey(m, pk)
}

func rowsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !valueEqual(v, w) {
			return false
		}
	}
	return true
}

// imageDiff describes how an image differs from a stored row of table tb:
// a column whose value differs, a column the image lacks (but for those
// the schema leaves out of events), a key the row lacks.
func (o *Oracle) imageDiff(tb string, row, img map[string]any) string {
	omit := o.tables.Omit[tb]
	var d []string
	cols := make([]string, 0, len(row))
	for c := range row {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	for _, c := range cols {
		v, ok := img[c]
		switch {
		case contains(omit, c):
			if ok {
				d = append(d, fmt.Sprintf("%s present, though the schema leaves it out (Sensitive)", c))
			}
		case !ok:
			d = append(d, fmt.Sprintf("%s absent (stored %s)", c, show(row[c])))
		case !valueEqual(row[c], v):
			d = append(d, fmt.Sprintf("%s=%s, stored %s", c, show(v), show(row[c])))
		}
	}
	var extra []string
	for c := range img {
		if _, ok := row[c]; !ok && !contains(omit, c) {
			extra = append(extra, c)
		}
	}
	sort.Strings(extra)
	for _, c := range extra {
		d = append(d, fmt.Sprintf("%s not a column", c))
	}
	return strings.Join(d, "; ")
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

// jsonValue turns a value a database driver returned into its JSON
// value: numbers as json.Number, bytes and strings as strings, times as
// RFC 3339 text.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case int64:
		return json.Number(strconv.FormatInt(x, 10))
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	case bool:
		return x
	case []byte:
		return string(x)
	case string:
		return x
	case time.Time:
		return x.Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

// valueEqual compares a stored value (db) with an image's (ev), as JSON
// values that may be spelled differently: a SQLite 0/1 and a boolean, a
// time's text in two layouts, a JSON column's text and the JSON, bytes
// as the database shows them (raw on SQLite, \x hex on PostgreSQL) and
// as base64, a number and its decimal text.
func valueEqual(db, ev any) bool {
	if db == "null" && ev == nil {
		return true // a JSON column holding the JSON null
	}
	if db == nil || ev == nil {
		return db == nil && ev == nil
	}
	switch d := db.(type) {
	case json.Number:
		switch e := ev.(type) {
		case json.Number:
			return numEqual(string(d), string(e))
		case bool:
			return (e && d == "1") || (!e && d == "0")
		case string:
			return numEqual(string(d), e)
		}
	case bool:
		switch e := ev.(type) {
		case bool:
			return d == e
		case json.Number:
			return (d && e == "1") || (!d && e == "0")
		}
	case string:
		switch e := ev.(type) {
		case string:
			if d == e {
				return true
			}
			if t1, ok := parseTime(d); ok {
				if t2, ok := parseTime(e); ok {
					return t1.Equal(t2)
				}
			}
			if bs, err := base64.StdEncoding.DecodeString(e); err == nil {
				if bytes.Equal(bs, []byte(d)) {
					return true
				}
				if strings.HasPrefix(d, `\x`) {
					if h, err := hex.DecodeString(d[2:]); err == nil && bytes.Equal(h, bs) {
						return true
					}
				}
			}
			if j, ok := parseJSON(d); ok {
				if js, isStr := j.(string); isStr {
					// a JSON column holding a JSON string ("\"x\""): the
					// image embeds the value, x
					return js == e
				}
				if k, ok := parseJSON(e); ok {
					return valueEqual(j, k)
				}
			}
			return false
		case json.Number:
			return numEqual(d, string(e))
		case bool:
			return (e && (d == "1" || d == "true")) || (!e && (d == "0" || d == "false"))
		default:
			if j, ok := parseJSON(d); ok {
				return valueEqual(j, ev)
			}
		}
	case map[string]any:
		switch e := ev.(type) {
		case map[string]any:
			if len(d) != len(e) {
				return false
			}
			for k, v := range d {
				w, ok := e[k]
				if !ok || !valueEqual(v, w) {
					return false
				}
			}
			return true
		case string:
			if j, ok := parseJSON(e); ok {
				return valueEqual(db, j)
			}
		}
	case []any:
		switch e := ev.(type) {
		case []any:
			if len(d) != len(e) {
				return false
			}
			for i := range d {
				if !valueEqual(d[i], e[i]) {
					return false
				}
			}
			return true
		case string:
			if j, ok := parseJSON(e); ok {
				return valueEqual(db, j)
			}
		}
	}
	return false
}

func parseJSON(s string) (any, bool) {
	var v any
	if err := decode(s, &v); err != nil {
		return nil, false
	}
	return v, true
}

// numEqual compares two decimal texts exactly, or as float32 when one
// of them is the shortest text of a float32 (a Go float32 field stored
// in a double column).
func numEqual(a, b string) bool {
	ra, ok1 := new(big.Rat).SetString(a)
	rb, ok2 := new(big.Rat).SetString(b)
	if !ok1 || !ok2 {
		return a == b
	}
	if ra.Cmp(rb) == 0 {
		return true
	}
	fa, err1 := strconv.ParseFloat(a, 64)
	fb, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil || math.IsInf(fa, 0) || math.IsInf(fb, 0) {
		return false
	}
	return float32(fa) == float32(fb)
}

var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02T15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999-07",
	"2006-01-02T15:04:05.999999999-07",
}

func parseTime(s string) (time.Time, bool) {
	if len(s) < 19 || s[4] != '-' || s[7] != '-' {
		return time.Time{}, false
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
