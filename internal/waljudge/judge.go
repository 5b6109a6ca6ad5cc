package waljudge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Message prefixes: the markers a judged run writes into the log with
// pg_logical_emit_message, and what each means.
const (
	// PrefixTest (non-transactional), content a test's name: the
	// transactions that commit after it, until the next one, are that
	// test's.
	PrefixTest = "herald_judge_test"
	// PrefixKey (transactional, written by the DDL event trigger Setup
	// installs), content "table<TAB>col,col": the table's primary-key
	// columns from this point of the log on ("" when it has none).
	PrefixKey = "herald_judge_key"
	// PrefixRaw (transactional), content the SQL: the transaction ran
	// hand-written SQL (db.Exec, db.Raw); its row changes without events
	// on tables the SQL names are raw-SQL writes, not missing events.
	PrefixRaw = "herald_judge_raw"
	// PrefixRawBegin and PrefixRawEnd (non-transactional), content the
	// SQL: hand-written SQL run outside a transaction, between the two;
	// the transactions that commit between them are treated as PrefixRaw's.
	PrefixRawBegin = "herald_judge_raw_begin"
	PrefixRawEnd   = "herald_judge_raw_end"
)

// Config tells the judge what it cannot read from the log.
type Config struct {
	// Outbox is the outbox table (bare name, e.g. "herald_outbox"). Its
	// INSERTs are the events; tables whose name starts with "herald_"
	// are herald's own and not judged.
	Outbox string
	// Tables returns the tables a model label's events may be of (bare
	// names); nil or empty: any table the transaction changed.
	Tables func(model string) []string
	// Exempt returns why a table's row changes need no events ("" when
	// they do): a documented exception, such as a model without a primary
	// key. Row changes of exempt tables without events are listed, not
	// counted as missing.
	Exempt func(table string) string
	// Images: compare the after image (and before, where the event has
	// one) column by column.
	Images bool
}

// Kinds of findings.
const (
	Missing   = "missing"   // a row change without its event
	Phantom   = "phantom"   // an event without its row change
	Duplicate = "duplicate" // more events of one operation on a row than row changes
	WrongOp   = "wrong-operation"
	Image     = "image" // a column of an image differs from the row
	Raw       = "raw-sql"
	Exempted  = "exempt"
)

// Finding is one thing the judge saw: a failure (Missing … Image) or an
// exclusion (Raw, Exempted).
type Finding struct {
	Kind, Test, Table, Op, Key, Detail string
}

func (f Finding) String() string {
	s := fmt.Sprintf("%-15s %-44s %s %s %s", f.Kind, f.Test, f.Table, f.Op, f.Key)
	if f.Detail != "" {
		s += ": " + f.Detail
	}
	return s
}

// Report is what the judge found.
type Report struct {
	Txns    int // committed transactions with row changes
	Changes int // row changes of judged tables (not the outbox, not herald_*)
	Events  int // outbox rows inserted
	Matched int // row changes paired with an event of their operation
	// Failures, each also a Finding.
	Missing, Phantom, Duplicate, WrongOp int
	Compared, Mismatched                 int // image columns compared, and differing (failures)
	Uncompared                           int // image columns the judge cannot compare (unchanged TOAST, a list for an array)
	RawChanges, ExemptChanges            int // row changes without events, excluded: hand-written SQL, exempt tables
	// Findings: every failure, and each exclusion once per test, table
	// and kind, in log order.
	Findings []Finding
}

// Failed reports whether anything but exclusions was found.
func (r *Report) Failed() bool {
	return r.Missing+r.Phantom+r.Duplicate+r.WrongOp+r.Mismatched > 0
}

// Judge matches each committed transaction's row changes with the outbox
// events inserted in it. Give it the log in order: Message for each
// non-transactional message, Txn for each committed transaction.
type Judge struct {
	cfg    Config
	test   string
	keys   map[string][]string // table -> primary-key columns
	rawSQL []string            // open PrefixRawBegin windows
	r      Report
}

// New returns a judge.
func New(cfg Config) *Judge {
	return &Judge{cfg: cfg, keys: map[string][]string{}}
}

// Report returns what was found so far.
func (j *Judge) Report() *Report { return &j.r }

// Message takes a non-transactional message.
func (j *Judge) Message(m Message) {
	switch m.Prefix {
	case PrefixTest:
		j.test = m.Content
	case PrefixRawBegin:
		j.rawSQL = append(j.rawSQL, m.Content)
	case PrefixRawEnd:
		if i := indexOf(j.rawSQL, m.Content); i >= 0 {
			j.rawSQL = append(j.rawSQL[:i], j.rawSQL[i+1:]...)
		}
	}
}

func indexOf(s []string, x string) int {
	for i, y := range s {
		if y == x {
			return i
		}
	}
	return -1
}

// Bare is a table name as the judge keys it: without the "public."
// schema and without identifier quotes.
func Bare(t string) string {
	t = strings.TrimPrefix(t, "public.")
	t = strings.TrimPrefix(t, `"public".`)
	if strings.Contains(t, `"`) {
		t = strings.ReplaceAll(strings.ReplaceAll(t, `""`, "\x00"), `"`, "")
		t = strings.ReplaceAll(t, "\x00", `"`)
	}
	return t
}

// event is an outbox row's payload, as the judge reads it.
type event struct {
	Model     string                     `json:"model"`
	Operation string                     `json:"operation"`
	PK        any                        `json:"pk"`
	Before    map[string]json.RawMessage `json:"before"`
	After     map[string]json.RawMessage `json:"after"`
	table     string
	key       string
}

// rowChange is a row change with the table and key the judge reads it by.
type rowChange struct {
	c          *Change
	table, key string
}

// group is one row of one transaction: its changes and its events, in
// log order.
type group struct {
	table, key string
	changes    []*rowChange
	events     []*event
}

var opOf = map[string]string{"INSERT": "inserted", "UPDATE": "updated", "DELETE": "deleted"}

// Txn judges one committed transaction.
func (j *Judge) Txn(t *Txn) {
	if len(t.Changes) > 0 {
		j.r.Txns++
	}
	raw := append([]string(nil), j.rawSQL...)
	for _, m := range t.Messages {
		switch m.Prefix {
		case PrefixKey:
			table, cols, _ := strings.Cut(m.Content, "\t")
			if cols == "" {
				j.keys[Bare(table)] = nil
			} else {
				// Sorted, as a composite key's names in an event are.
				ks := strings.Split(cols, ",")
				sort.Strings(ks)
				j.keys[Bare(table)] = ks
			}
		case PrefixRaw:
			raw = append(raw, m.Content)
		}
	}
	var evs []*event
	var rows []*rowChange
	for i := range t.Changes {
		c := &t.Changes[i]
		table := Bare(c.Table)
		if table == j.cfg.Outbox {
			if c.Op == "INSERT" && c.New != nil {
				if ev, err := parseEvent(c.New); err == nil {
					evs = append(evs, ev)
				} else {
					j.fail(Finding{Kind: Phantom, Table: table, Op: c.Op, Detail: "unreadable outbox row: " + err.Error()})
				}
			}
			continue
		}
		if strings.HasPrefix(table, "herald_") {
			continue
		}
		rows = append(rows, &rowChange{c: c, table: table})
	}
	j.r.Changes += len(rows)
	j.r.Events += len(evs)

	// Each event's table: one its model's events may be of, with a row
	// change of the event's key in this transaction.
	changed := map[string]bool{}
	for _, rc := range rows {
		changed[rc.table] = true
	}
	for _, ev := range evs {
		cands := j.candidates(ev.Model, changed)
		for _, table := range cands {
			cols := j.keyCols(table, ev.PK)
			k := eventKey(ev.PK, cols)
			for _, rc := range rows {
				if rc.table == table && rowKey(rc.c, cols) == k {
					ev.table, ev.key = table, k
					break
				}
			}
			if ev.table != "" {
				break
			}
		}
		if ev.table == "" {
			table := strings.Join(cands, "|")
			if len(cands) == 0 {
				table = "(model " + ev.Model + ")"
			}
			j.fail(Finding{Kind: Phantom, Table: table, Op: ev.Operation, Key: pkText(ev.PK), Detail: "an event without a row change in its transaction"})
		}
	}
	for _, rc := range rows {
		cols := j.keys[rc.table]
		if len(cols) == 0 {
			// No key known (a table without a primary key): the columns
			// an event of the table keys it by, if any.
			for _, ev := range evs {
				if m, ok := ev.PK.(map[string]any); ok && ev.table == rc.table {
					cols = sortedKeys(m)
					break
				}
			}
		}
		rc.key = rowKey(rc.c, cols)
	}

	groups := map[string]*group{}
	var order []string
	for _, rc := range rows {
		id := rc.table + "\x00" + rc.key
		g := groups[id]
		if g == nil {
			g = &group{table: rc.table, key: rc.key}
			groups[id] = g
			order = append(order, id)
		}
		g.changes = append(g.changes, rc)
	}
	for _, ev := range evs {
		if g := groups[ev.table+"\x00"+ev.key]; g != nil {
			g.events = append(g.events, ev)
		}
	}
	for _, id := range order {
		j.judgeRow(groups[id], raw)
	}
}

func (j *Judge) fail(f Finding) {
	if f.Test == "" {
		f.Test = j.test
	}
	switch f.Kind {
	case Missing:
		j.r.Missing++
	case Phantom:
		j.r.Phantom++
	case Duplicate:
		j.r.Duplicate++
	case WrongOp:
		j.r.WrongOp++
	case Image:
		j.r.Mismatched++
	}
	j.r.Findings = append(j.r.Findings, f)
}

// candidates are the changed tables a model's events may be of.
func (j *Judge) candidates(model string, changed map[string]bool) []string {
	var out []string
	if j.cfg.Tables != nil {
		for _, t := range j.cfg.Tables(model) {
			if changed[t] && indexOf(out, t) < 0 {
				out = append(out, t)
			}
		}
	}
	if len(out) == 0 {
		for t := range changed {
			out = append(out, t)
		}
		sort.Strings(out)
	}
	return out
}

// keyCols are the columns an event's pk names on table: a composite
// key's own names, else the table's primary key.
func (j *Judge) keyCols(table string, pk any) []string {
	if m, ok := pk.(map[string]any); ok {
		return sortedKeys(m)
	}
	return j.keys[table]
}

// judgeRow matches one row's changes with its events: per operation,
// as many events as changes; an operation with more events than changes
// pairs its surplus with another operation's shortfall (a wrong
// operation), and what is left over is a duplicate (the row had a
// change of that operation) or a phantom, and a shortfall left over is a
// missing event. Paired changes and events are compared column by column.
func (j *Judge) judgeRow(g *group, raw []string) {
	byOp := map[string][]*rowChange{}
	evByOp := map[string][]*event{}
	for _, rc := range g.changes {
		byOp[rc.c.Op] = append(byOp[rc.c.Op], rc)
	}
	for _, ev := range g.events {
		evByOp[ev.Operation] = append(evByOp[ev.Operation], ev)
	}
	var surplus []*event
	var short []*rowChange
	for _, op := range []string{"INSERT", "UPDATE", "DELETE", "TRUNCATE"} {
		cs, es := byOp[op], evByOp[opOf[op]]
		n := min(len(cs), len(es))
		for i := range n {
			j.r.Matched++
			j.compare(g, cs[i], es[i])
		}
		short = append(short, cs[n:]...)
		surplus = append(surplus, es[n:]...)
		delete(evByOp, opOf[op])
	}
	for _, es := range evByOp { // operations no row change has
		surplus = append(surplus, es...)
	}
	for len(surplus) > 0 && len(short) > 0 {
		ev, rc := surplus[0], short[0]
		surplus, short = surplus[1:], short[1:]
		j.fail(Finding{Kind: WrongOp, Table: g.table, Op: rc.c.Op, Key: g.key, Detail: "the event says " + ev.Operation})
	}
	for _, ev := range surplus {
		kind := Phantom
		for _, rc := range g.changes {
			if opOf[rc.c.Op] == ev.Operation {
				kind = Duplicate
			}
		}
		j.fail(Finding{Kind: kind, Table: g.table, Op: ev.Operation, Key: g.key})
	}
	for _, rc := range short {
		switch {
		case namedIn(g.table, raw):
			j.r.RawChanges++
			j.exclude(Finding{Kind: Raw, Table: g.table, Op: rc.c.Op, Key: g.key})
		case len(g.events) == 0 && j.cfg.Exempt != nil && j.cfg.Exempt(g.table) != "":
			j.r.ExemptChanges++
			j.exclude(Finding{Kind: Exempted, Table: g.table, Op: rc.c.Op, Key: g.key, Detail: j.cfg.Exempt(g.table)})
		default:
			j.fail(Finding{Kind: Missing, Table: g.table, Op: rc.c.Op, Key: g.key})
		}
	}
}

// exclude records an exclusion once per test, table and kind.
func (j *Judge) exclude(f Finding) {
	f.Test = j.test
	for i := len(j.r.Findings) - 1; i >= 0; i-- {
		e := &j.r.Findings[i]
		if e.Kind == f.Kind && e.Test == f.Test && e.Table == f.Table {
			return
		}
	}
	f.Key = ""
	j.r.Findings = append(j.r.Findings, f)
}

// namedIn reports whether a hand-written statement names table.
func namedIn(table string, sqls []string) bool {
	for _, s := range sqls {
		if containsWord(strings.ToLower(s), strings.ToLower(table)) {
			return true
		}
	}
	return false
}

func containsWord(s, w string) bool {
	for i := 0; ; {
		k := strings.Index(s[i:], w)
		if k < 0 {
			return false
		}
		k += i
		before := k == 0 || !identByte(s[k-1])
		after := k+len(w) == len(s) || !identByte(s[k+len(w)])
		if before && after {
			return true
		}
		i = k + 1
	}
}

func identByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// compare compares a paired event's images with the row change.
func (j *Judge) compare(g *group, rc *rowChange, ev *event) {
	if !j.cfg.Images {
		return
	}
	// old: an old row, which test_decoding prints without its NULL
	// columns (under REPLICA IDENTITY FULL, which Setup gives every
	// table, it holds every other column): a column it lacks is NULL.
	check := func(which string, img map[string]json.RawMessage, row *Row, old bool) {
		if img == nil || row == nil {
			return
		}
		for _, col := range sortedKeys(img) {
			v, ok := row.Values[col]
			if !ok && old {
				v, ok = Value{Null: true}, true
			}
			if !ok {
				j.fail(Finding{Kind: Image, Table: g.table, Op: rc.c.Op, Key: g.key, Detail: fmt.Sprintf("%s.%s: not a column of the row", which, col)})
				continue
			}
			if v.Unchanged {
				j.r.Uncompared++
				continue
			}
			eq, known := Equal(v, img[col])
			if !known {
				j.r.Uncompared++
				continue
			}
			j.r.Compared++
			if !eq {
				wal := "NULL"
				if !v.Null {
					wal = fmt.Sprintf("%.60q", v.Text)
				}
				j.fail(Finding{Kind: Image, Table: g.table, Op: rc.c.Op, Key: g.key,
					Detail: fmt.Sprintf("%s.%s [%s]: row %s, event %.60s", which, col, v.Type, wal, img[col])})
			}
		}
	}
	switch rc.c.Op {
	case "INSERT":
		check("after", ev.After, rc.c.New, false)
	case "UPDATE":
		check("after", ev.After, rc.c.New, false)
		check("before", ev.Before, rc.c.Old, true)
	case "DELETE":
		check("before", ev.Before, rc.c.Old, true)
	}
}

func parseEvent(r *Row) (*event, error) {
	v, ok := r.Values["payload"]
	if !ok || v.Null {
		return nil, fmt.Errorf("no payload")
	}
	ev := &event{}
	d := json.NewDecoder(bytes.NewReader([]byte(v.Text)))
	d.UseNumber()
	if err := d.Decode(ev); err != nil {
		return nil, err
	}
	if ev.Model == "" || ev.Operation == "" {
		return nil, fmt.Errorf("no model or operation in %.80s", v.Text)
	}
	return ev, nil
}

// eventKey is an event's primary key as text over cols.
func eventKey(pk any, cols []string) string {
	if m, ok := pk.(map[string]any); ok {
		parts := make([]string, len(cols))
		for i, c := range cols {
			parts[i] = scalarText(m[c])
		}
		return strings.Join(parts, "\x00")
	}
	return scalarText(pk)
}

func pkText(pk any) string {
	if m, ok := pk.(map[string]any); ok {
		var parts []string
		for _, k := range sortedKeys(m) {
			parts = append(parts, k+"="+scalarText(m[k]))
		}
		return strings.Join(parts, ",")
	}
	return scalarText(pk)
}

func scalarText(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "true"
		}
		return "false"
	}
	return fmt.Sprint(v)
}

// rowKey is a row change's key over cols: from its new row, else its old.
func rowKey(c *Change, cols []string) string {
	if len(cols) == 0 {
		return "(no key)"
	}
	r := c.New
	if r == nil {
		r = c.Old
	}
	if r == nil {
		return "(no row)"
	}
	parts := make([]string, len(cols))
	for i, col := range cols {
		v, ok := r.Values[col]
		switch {
		case !ok:
			parts[i] = "?"
		case v.Null:
			parts[i] = "null"
		default:
			parts[i] = v.Text
		}
	}
	return strings.Join(parts, "\x00")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
