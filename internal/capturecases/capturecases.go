// Package capturecases is the change-capture conformance suite as data:
// ORM-neutral models, writes and the changes they must capture, so that
// every capture integration (gormcapture, entcapture) runs the same cases
// and must produce the same envelopes.
//
// An integration declares the models below in its own schema (same
// tables, columns and types), maps each Write kind to one or more of its
// write paths, seeds the rows of a case, runs the write, and compares the
// events it committed with Expected(c, mode) — the exact envelopes, with
// occurred_at left out — and their topics and ordering keys.
package capturecases

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/names"
)

// Namespace is the capture namespace of every model of the suite.
const Namespace = "library"

// The models, ORM-neutrally. Every model is captured with Options{Payload:
// mode} (all operations, default topic and ordering key) under Namespace.
//
//	Reader      readers      id BIGINT auto PK, name TEXT NOT NULL, email TEXT NOT NULL (sensitive)
//	Loan        loans        id BIGINT auto PK, status TEXT NOT NULL, days INT NOT NULL,
//	                         returned BOOL NOT NULL, reader_id BIGINT NULL, note TEXT NULL
//	Membership  memberships  (reader_id BIGINT, club TEXT) composite PK, level INT NOT NULL
//	Tag         tags         code TEXT PK (not generated), label TEXT NOT NULL
//
// Column order is the table order above; "sensitive" columns are left out
// of events unless named in Options.Fields.
var Models = []Model{
	{Name: "Reader", Table: "readers", PK: []string{"id"}, Columns: []string{"id", "name", "email"}, Sensitive: []string{"email"}},
	{Name: "Loan", Table: "loans", PK: []string{"id"}, Columns: []string{"id", "status", "days", "returned", "reader_id", "note"}},
	{Name: "Membership", Table: "memberships", PK: []string{"reader_id", "club"}, Columns: []string{"reader_id", "club", "level"}},
	{Name: "Tag", Table: "tags", PK: []string{"code"}, Columns: []string{"code", "label"}},
}

// Model describes one model of the suite.
type Model struct {
	Name      string
	Table     string
	PK        []string
	Columns   []string
	Sensitive []string
}

// ModelByName returns the model named name.
func ModelByName(name string) Model {
	for _, m := range Models {
		if m.Name == name {
			return m
		}
	}
	panic("capturecases: no model " + name)
}

// Row is column -> value: int64, string, bool or nil.
type Row map[string]any

// Kind is what a write does, whatever ORM call does it.
type Kind string

// The write kinds.
const (
	Insert       Kind = "insert"        // insert Rows[0]; generated keys left out
	InsertMany   Kind = "insert_many"   // insert Rows in one statement
	UpdateByPK   Kind = "update_by_pk"  // set Set on the row whose key is PK
	UpdateWhere  Kind = "update_where"  // set Set on every row matching Where (column = value, ANDed)
	DeleteByPK   Kind = "delete_by_pk"  // delete the row whose key is PK
	DeleteWhere  Kind = "delete_where"  // delete every row matching Where
	Upsert       Kind = "upsert"        // insert Rows; on a Conflict of Conflict set Update from the new row
	UpsertIgnore Kind = "upsert_ignore" // insert Rows; skip rows that conflict on Conflict
)

// Write is one write of a case.
type Write struct {
	Kind     Kind
	PK       any      // UpdateByPK, DeleteByPK: the key (a Row for a composite key)
	Where    Row      // UpdateWhere, DeleteWhere
	Set      Row      // UpdateByPK, UpdateWhere: the columns the caller sets
	Rows     []Row    // Insert, InsertMany, Upsert, UpsertIgnore
	Conflict []string // Upsert, UpsertIgnore: the conflict target
	Update   []string // Upsert: the columns a conflicting row takes from the new row
}

// Change is one change a write must capture: values in their JSON form
// (numbers as float64 after json.Unmarshal is applied to Expected).
type Change struct {
	Op      envelope.Operation
	PK      any      // the key: a value, or a Row for a composite key
	Changed []string // updates: the columns the caller set, in table order
	Before  Row      // the full row before (nil for an insert)
	After   Row      // the full row after (nil for a delete)
}

// Case is one conformance case.
type Case struct {
	Name  string
	Model string
	Seed  []Row // rows written (in order, keys generated 1, 2, …) before the write; their events are discarded
	Write Write
	Want  []Change // in primary-key order
}

// Expected is one expected event of a case.
type Expected struct {
	Topic       string
	OrderingKey string
	Envelope    map[string]any // the payload, occurred_at removed, decoded from JSON
}

// Expect renders the events a case must produce in payload mode mode.
func Expect(c Case, mode envelope.PayloadMode) []Expected {
	m := ModelByName(c.Model)
	label := Namespace + "." + m.Name
	out := make([]Expected, 0, len(c.Want))
	for _, ch := range c.Want {
		env := map[string]any{"model": label, "operation": string(ch.Op), "pk": ch.PK, "changed": nil}
		if ch.Op == envelope.Updated {
			env["changed"] = ch.Changed
		}
		switch mode {
		case envelope.After:
			if ch.Op == envelope.Deleted {
				env["before"] = payload(m, ch.Before)
			} else {
				env["after"] = payload(m, ch.After)
			}
		case envelope.BeforeAndAfter:
			env["before"] = payload(m, ch.Before)
			env["after"] = payload(m, ch.After)
		}
		out = append(out, Expected{
			Topic:       Namespace + "." + names.SnakeCase(m.Name) + "." + string(ch.Op),
			OrderingKey: label + ":" + keyText(m, ch.PK),
			Envelope:    normalize(env),
		})
	}
	return out
}

func payload(m Model, r Row) any {
	if r == nil {
		return nil
	}
	out := map[string]any{}
	for _, c := range m.Columns {
		sensitive := false
		for _, s := range m.Sensitive {
			sensitive = sensitive || s == c
		}
		if !sensitive {
			out[c] = r[c]
		}
	}
	return out
}

func keyText(m Model, pk any) string {
	if r, ok := pk.(Row); ok {
		parts := make([]string, len(m.PK))
		for i, c := range m.PK {
			parts[i] = fmt.Sprint(r[c])
		}
		return strings.Join(parts, ":")
	}
	return fmt.Sprint(pk)
}

// normalize round-trips v through JSON, so it compares equal to a decoded
// payload.
func normalize(v map[string]any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// Decode parses a stored payload and drops occurred_at, for comparing
// with Expected.Envelope; it reports whether occurred_at was an RFC 3339
// time.
func Decode(payload []byte) (map[string]any, error) {
	var out map[string]any
	if err := json.Unmarshal(payload, &out); err != nil {
		return nil, err
	}
	at, ok := out["occurred_at"].(string)
	if !ok || len(at) < 20 {
		return nil, fmt.Errorf("occurred_at = %v, want an RFC 3339 time", out["occurred_at"])
	}
	delete(out, "occurred_at")
	return out, nil
}

// r is a Row literal helper for the cases below.
type r = Row

var (
	ann  = r{"name": "Ann", "email": "ann@example.org"}
	loan = func(status string, days int64, readerID any) Row {
		return r{"status": status, "days": days, "returned": false, "reader_id": readerID, "note": nil}
	}
)

func with(base Row, kv ...any) Row {
	out := Row{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// Cases is the suite.
var Cases = []Case{
	{
		Name: "insert one", Model: "Loan",
		Seed:  []Row{ann},
		Write: Write{Kind: Insert, Rows: []Row{loan("lent", 14, int64(1))}},
		Want:  []Change{{Op: envelope.Inserted, PK: 1, After: with(loan("lent", 14, 1), "id", 1)}},
	},
	{
		Name: "insert one, sensitive column left out", Model: "Reader",
		Write: Write{Kind: Insert, Rows: []Row{ann}},
		Want:  []Change{{Op: envelope.Inserted, PK: 1, After: with(ann, "id", 1)}},
	},
	{
		Name: "insert many", Model: "Loan",
		Write: Write{Kind: InsertMany, Rows: []Row{loan("lent", 7, nil), loan("lent", 21, nil), with(loan("lost", 0, nil), "note", "gone")}},
		Want: []Change{
			{Op: envelope.Inserted, PK: 1, After: with(loan("lent", 7, nil), "id", 1)},
			{Op: envelope.Inserted, PK: 2, After: with(loan("lent", 21, nil), "id", 2)},
			{Op: envelope.Inserted, PK: 3, After: with(loan("lost", 0, nil), "id", 3, "note", "gone")},
		},
	},
	{
		Name: "insert one, composite key", Model: "Membership",
		Write: Write{Kind: Insert, Rows: []Row{{"reader_id": int64(3), "club": "chess", "level": int64(2)}}},
		Want: []Change{{Op: envelope.Inserted, PK: Row{"reader_id": 3, "club": "chess"},
			After: Row{"reader_id": 3, "club": "chess", "level": 2}}},
	},
	{
		Name: "update one by key", Model: "Loan",
		Seed:  []Row{loan("lent", 14, nil), loan("lent", 7, nil)},
		Write: Write{Kind: UpdateByPK, PK: int64(2), Set: Row{"status": "returned"}},
		Want: []Change{{Op: envelope.Updated, PK: 2, Changed: []string{"status"},
			Before: with(loan("lent", 7, nil), "id", 2), After: with(loan("returned", 7, nil), "id", 2)}},
	},
	{
		Name: "update where, two columns", Model: "Loan",
		Seed:  []Row{loan("lent", 14, nil), loan("lost", 7, nil), loan("lent", 3, nil)},
		Write: Write{Kind: UpdateWhere, Where: Row{"status": "lent"}, Set: Row{"returned": true, "status": "returned"}},
		Want: []Change{
			{Op: envelope.Updated, PK: 1, Changed: []string{"status", "returned"},
				Before: with(loan("lent", 14, nil), "id", 1), After: with(loan("returned", 14, nil), "id", 1, "returned", true)},
			{Op: envelope.Updated, PK: 3, Changed: []string{"status", "returned"},
				Before: with(loan("lent", 3, nil), "id", 3), After: with(loan("returned", 3, nil), "id", 3, "returned", true)},
		},
	},
	{
		Name: "update where, no row matches", Model: "Loan",
		Seed:  []Row{loan("lent", 14, nil)},
		Write: Write{Kind: UpdateWhere, Where: Row{"status": "lost"}, Set: Row{"status": "found"}},
		Want:  nil,
	},
	{
		Name: "update one, composite key", Model: "Membership",
		Seed:  []Row{{"reader_id": int64(1), "club": "chess", "level": int64(1)}, {"reader_id": int64(1), "club": "go", "level": int64(1)}},
		Write: Write{Kind: UpdateByPK, PK: Row{"reader_id": int64(1), "club": "go"}, Set: Row{"level": int64(5)}},
		Want: []Change{{Op: envelope.Updated, PK: Row{"reader_id": 1, "club": "go"}, Changed: []string{"level"},
			Before: Row{"reader_id": 1, "club": "go", "level": 1}, After: Row{"reader_id": 1, "club": "go", "level": 5}}},
	},
	{
		Name: "delete one by key", Model: "Loan",
		Seed:  []Row{loan("lent", 14, nil), with(loan("lost", 7, nil), "note", "n")},
		Write: Write{Kind: DeleteByPK, PK: int64(2)},
		Want:  []Change{{Op: envelope.Deleted, PK: 2, Before: with(loan("lost", 7, nil), "id", 2, "note", "n")}},
	},
	{
		Name: "delete where", Model: "Loan",
		Seed:  []Row{loan("lent", 14, nil), loan("lost", 7, nil), loan("lost", 3, nil)},
		Write: Write{Kind: DeleteWhere, Where: Row{"status": "lost"}},
		Want: []Change{
			{Op: envelope.Deleted, PK: 2, Before: with(loan("lost", 7, nil), "id", 2)},
			{Op: envelope.Deleted, PK: 3, Before: with(loan("lost", 3, nil), "id", 3)},
		},
	},
	{
		Name: "upsert: conflicting row updated, new row inserted", Model: "Tag",
		Seed:  []Row{{"code": "a", "label": "A"}, {"code": "b", "label": "B"}},
		Write: Write{Kind: Upsert, Rows: []Row{{"code": "b", "label": "Bee"}, {"code": "c", "label": "Cee"}}, Conflict: []string{"code"}, Update: []string{"label"}},
		Want: []Change{
			{Op: envelope.Updated, PK: "b", Changed: []string{"label"}, Before: Row{"code": "b", "label": "B"}, After: Row{"code": "b", "label": "Bee"}},
			{Op: envelope.Inserted, PK: "c", After: Row{"code": "c", "label": "Cee"}},
		},
	},
	{
		Name: "upsert ignore: conflicting row skipped", Model: "Tag",
		Seed:  []Row{{"code": "a", "label": "A"}},
		Write: Write{Kind: UpsertIgnore, Rows: []Row{{"code": "a", "label": "Ay"}, {"code": "d", "label": "Dee"}}, Conflict: []string{"code"}},
		Want:  []Change{{Op: envelope.Inserted, PK: "d", After: Row{"code": "d", "label": "Dee"}}},
	},
}

// EntUnsupported lists, in one place, the cases ent cannot express, and
// why: ent has no composite primary key outside edge schemas, so
// Membership cannot be declared as an ent schema.
var EntUnsupported = map[string]string{
	"insert one, composite key": "ent has no composite primary key outside edge schemas",
	"update one, composite key": "ent has no composite primary key outside edge schemas",
}

// ExpectJSON renders the exact payload bytes a case's events must carry
// in mode mode, with occurred_at at the given time: what both ORMs'
// events must equal byte for byte once their occurred_at is replaced.
func ExpectJSON(c Case, mode envelope.PayloadMode, occurredAt string) ([][]byte, error) {
	m := ModelByName(c.Model)
	spec, err := capture.Compile(capture.ModelInfo{Name: m.Name, Table: m.Table, Columns: m.Columns, PrimaryKey: m.PK,
		Sensitive: m.Sensitive, DefaultNamespace: Namespace}, envelope.Options{Payload: mode})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(c.Want))
	for _, ch := range c.Want {
		pk := ch.PK
		if r, ok := pk.(Row); ok {
			pk = map[string]any(r)
		}
		change := envelope.Change{Model: spec.Label, Table: m.Table, Operation: ch.Op, PK: pk, Changed: ch.Changed}
		if ch.Before != nil {
			change.Before = map[string]any(ch.Before)
		}
		if ch.After != nil {
			change.After = map[string]any(ch.After)
		}
		b, err := spec.AppendEnvelope(nil, &change, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, ReplaceOccurredAt(b, occurredAt))
	}
	return out, nil
}

// ReplaceOccurredAt returns payload with its occurred_at value replaced
// by at, for comparing payloads byte for byte.
func ReplaceOccurredAt(payload []byte, at string) []byte {
	s := string(payload)
	const key = `"occurred_at":"`
	i := strings.Index(s, key)
	if i < 0 {
		return payload
	}
	j := strings.IndexByte(s[i+len(key):], '"')
	if j < 0 {
		return payload
	}
	return []byte(s[:i+len(key)] + at + s[i+len(key)+j:])
}
