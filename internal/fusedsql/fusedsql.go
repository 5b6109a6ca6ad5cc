// Package fusedsql builds the part shared by the fused single-row inserts
// of gormcapture and entcapture on PostgreSQL: one statement that inserts
// a row and its event,
//
//	WITH "herald_row" AS (INSERT INTO loans … RETURNING …),
//	     "herald_event" AS (INSERT INTO herald_outbox (…) SELECT … FROM "herald_row" WHERE <key lock>)
//	SELECT … FROM "herald_row"
//
// The event's envelope is rendered in Go with a marker in place of each
// value only the stored row knows (Marks), and the statement splices in
// the text of each value's JSON (SplicePayload). A single statement is
// atomic by itself: it needs no savepoint in a caller's transaction, and
// no transaction without one.
package fusedsql

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/jsonform"
)

// Row is the name of the CTE that holds the inserted row.
const Row = `"herald_row"`

// PKSentinel stands for the key the database generates while the topic
// and the ordering key are rendered in Go.
const PKSentinel = "\x00herald:pk\x00"

// Marks maps the JSON encoding of each marker an envelope holds to the SQL
// expression (of "herald_row"'s columns) that gives its value's JSON
// text, NULL for SQL NULL: one of JSONB, String, Number and Quoted.
type Marks map[string]string

// JSONB is the JSON text of expr, a value of any type, as to_jsonb prints
// it, but for U+2028 and U+2029, which jsonform escapes.
func JSONB(expr string) string {
	return `replace(replace((to_jsonb(` + expr + `))::text,U&'\2028','\u2028'),U&'\2029','\u2029')`
}

// String is JSONB for a value of a string type (text, varchar, bpchar):
// to_json escapes it exactly as to_jsonb does, without building a jsonb
// value first.
func String(expr string) string {
	return `replace(replace(to_json(` + expr + `)::text,U&'\2028','\u2028'),U&'\2029','\u2029')`
}

// Number is JSONB for a value of an integer or boolean type, whose text is
// its JSON.
func Number(expr string) string {
	return `(` + expr + `)::text`
}

// Quoted is JSONB for a value whose text has no character JSON escapes
// (a uuid, a numeric's digits, a timestamp's form), as a JSON string.
func Quoted(expr string) string {
	return `('"'||(` + expr + `)::text||'"')`
}

// Mark returns a new marker (a string no value can hold: it has a NUL,
// which PostgreSQL text refuses) for the value kind ("pk", "after") of
// column col, rendered by expr.
func (m Marks) Mark(kind, col, expr string) string {
	k := "\x00herald:" + kind + ":" + col + "\x00"
	m[string(jsonform.AppendString(nil, k))] = expr
	return k
}

// Key is an event's ordering key as the fused statement computes it.
type Key struct {
	text, pre, post string
	hasPK           bool
}

// SplitKey returns the ordering key key, rendered with PKSentinel for the
// generated key when generated is set; ok is false when the statement
// cannot compute it (the key was cut to its hashed form, or holds the
// generated key twice).
func SplitKey(key string, generated bool) (k Key, ok bool) {
	if !generated {
		return Key{text: key}, !strings.Contains(key, PKSentinel)
	}
	i := strings.Index(key, PKSentinel)
	if i < 0 {
		// The key was cut to its hashed form when as long as the limit.
		return Key{text: key}, utf8.RuneCountInString(key) < envelope.MaxKeyLength
	}
	pre, post := key[:i], key[i+len(PKSentinel):]
	if strings.Contains(post, PKSentinel) || utf8.RuneCountInString(pre)+utf8.RuneCountInString(post)+36 > envelope.MaxKeyLength {
		return Key{}, false
	}
	return Key{pre: pre, post: post, hasPK: true}, true
}

// Event is the event a fused insert writes.
type Event struct {
	Writer   *envelope.Writer
	RowKeyed bool // capture.Spec.RowKeyed
	Topic    string
	Payload  []byte // the envelope, holding the markers of Marks
	Marks    Marks
	Key      Key
	GenCol   string // the generated key's column, when the key holds it
	At       time.Time
	// Headers are the event's headers as JSON: the write's context headers
	// (internal/ctxhdr.JSON); "" or "{}" = none.
	Headers string
}

// WriteCTE writes `, "herald_event" AS (INSERT INTO <outbox> … SELECT …
// FROM "herald_row" WHERE <the key's advisory lock>)` to b; ph binds a
// value and returns its placeholder.
func (e *Event) WriteCTE(b *strings.Builder, ph func(any) string) error {
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	bind := func(s string) string { return ph(s) }
	idSQL, topicSQL := ph(id.String()), ph(e.Topic)
	payloadSQL := SplicePayload(e.Payload, e.Marks, ph)
	headersSQL := HeadersSQL(e.Headers, ph, "::json")
	keySQL := keyExpr(e.Key.form(), e.GenCol, e.Key, bind)
	writeEventCTE(b, e.Writer, e.RowKeyed, idSQL, topicSQL, payloadSQL, headersSQL, keySQL, ph(e.At.Truncate(time.Microsecond)))
	return nil
}

// keyExpr is the SQL of an event's ordering key of form f: NULL, k's text,
// or k's text around the generated key's column genCol; bind binds a part
// of k and returns its placeholder.
func keyExpr(f keyForm, genCol string, k Key, bind func(string) string) string {
	switch f {
	case keyPK:
		return "(" + bind(k.pre) + "::text||" + Row + "." + names.Quote(genCol) + "::text||" + bind(k.post) + "::text)"
	case keyText:
		return bind(k.text) + "::text"
	}
	return "NULL"
}

// writeEventCTE writes the event's CTE from the SQL of its columns; a key
// other than NULL is locked in its WHERE clause, evaluated before the
// event's sequence value is drawn (see outbox.KeyLockSQL).
func writeEventCTE(b *strings.Builder, w *envelope.Writer, rowKeyed bool, id, topic, payload, headers, key, at string) {
	b.WriteString(`, "herald_event" AS (INSERT INTO `)
	b.WriteString(w.Table().Quoted)
	b.WriteString(` (id, topic, payload, headers, ordering_key, created_at) SELECT `)
	for _, c := range []string{id, topic, payload, headers, key} {
		b.WriteString(c)
		b.WriteByte(',')
	}
	b.WriteString(at)
	b.WriteString(` FROM ` + Row)
	if key != "NULL" {
		b.WriteString(` WHERE ` + outbox.KeyLockSQL(w, key, rowKeyed))
	}
	b.WriteByte(')')
}

// Template is the event part of a fused single-row insert (WriteCTE's
// text), rendered once for every event of one shape: the envelope's fixed
// text is written into the statement, and only what changes from one
// event to the next is bound — its id, topic, the envelope's end (its
// occurred_at), headers, ordering key and time. Rendering the statement
// once, instead of splicing each event's envelope, is most of a fused
// insert's Go time, and binding five values instead of one per run of the
// envelope's text is less work for the server (BENCHMARKS.md, "sixteenth
// pass").
type Template struct {
	// SQL is `, "herald_event" AS (…)`, its placeholders numbered from the
	// first NewTemplate was given.
	SQL     string
	keyForm keyForm
	headers bool
}

type keyForm uint8

const (
	keyNone keyForm = iota
	keyText
	keyPK
)

func (k Key) form() keyForm {
	switch {
	case k.hasPK:
		return keyPK
	case k.text != "":
		return keyText
	}
	return keyNone
}

// TemplateKey identifies the template an event needs, beside its shape:
// the form of its ordering key and whether it has headers.
type TemplateKey struct {
	key     keyForm
	headers bool
}

// TemplateKeyOf returns the TemplateKey of an event with ordering key k and
// headers h (internal/ctxhdr.JSON).
func TemplateKeyOf(k Key, h string) TemplateKey {
	return TemplateKey{k.form(), h != "" && h != "{}"}
}

// NewTemplate renders the Template of the events of one shape: head is
// the envelope up to its occurred_at's value (capture.Spec.AppendEnvelope
// with the markers of marks in place of the row's values), tk the events'
// TemplateKey, first the number of the template's first placeholder.
func NewTemplate(w *envelope.Writer, rowKeyed bool, head []byte, marks Marks, genCol string, tk TemplateKey, first int) Template {
	n := first - 1
	ph := func(string) string {
		n++
		return "$" + strconv.Itoa(n)
	}
	// The placeholders are numbered in the order Args binds the values.
	idSQL, topicSQL := ph(""), ph("")
	var payload strings.Builder
	payload.WriteByte('(')
	for _, p := range Splice(head, marks, Literal, markSQL) {
		payload.WriteString(p)
		payload.WriteString("||")
	}
	payload.WriteString(ph("") + "::text)::json")
	headersSQL := `'{}'`
	if tk.headers {
		headersSQL = ph("") + "::json"
	}
	keySQL := keyExpr(tk.key, genCol, Key{}, ph)
	var b strings.Builder
	writeEventCTE(&b, w, rowKeyed, idSQL, topicSQL, payload.String(), headersSQL, keySQL, ph(""))
	return Template{SQL: b.String(), keyForm: tk.key, headers: tk.headers}
}

// Args appends to args the values of one event, in the order of the
// template's placeholders: topic, the envelope's end (tail: its
// occurred_at's value and what follows), headers (h), ordering key k and
// time at. k and h must be of the template's TemplateKey.
func (t *Template) Args(args []any, topic string, tail []byte, h string, k Key, at time.Time) ([]any, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	args = append(args, id.String(), topic, string(tail))
	if t.headers {
		args = append(args, h)
	}
	switch t.keyForm {
	case keyPK:
		args = append(args, k.pre, k.post)
	case keyText:
		args = append(args, k.text)
	}
	return append(args, at.Truncate(time.Microsecond)), nil
}

// HeadersSQL is the SQL of an event's headers column: '{}' for none,
// else h bound by ph, with cast ("::json" on PostgreSQL, "" on SQLite).
func HeadersSQL(h string, ph func(any) string, cast string) string {
	if h == "" || h == "{}" {
		return `'{}'`
	}
	return ph(h) + cast
}

// SplicePayload renders payload, whose row values are the markers of
// marks, as a json expression that concatenates its text around the JSON
// text of each marker's expression (a NULL is JSON null). The payload
// column is json, so the event holds exactly these bytes, in the key order
// and compact form of every other path (a jsonb merge would sort the keys
// and add spaces).
func SplicePayload(payload []byte, marks Marks, ph func(any) string) string {
	parts := Splice(payload, marks, func(lit string) string { return ph(lit) + "::text" }, markSQL)
	return "(" + strings.Join(parts, "||") + ")::json"
}

// markSQL is a marker's expression in a payload's concatenation.
func markSQL(expr string) string { return `COALESCE(` + expr + `,'null')` }

// Literal is s as a SQL string literal: an escape string, whose meaning
// does not depend on standard_conforming_strings.
func Literal(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 4)
	b.WriteString("E'")
	for i := range len(s) {
		switch s[i] {
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`''`)
		default:
			b.WriteByte(s[i])
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// Splice cuts payload at the markers of marks, in order: each run of text
// between markers becomes lit(text) (empty runs are left out), each
// marker expr(its expression). The parts, joined with ||, are the
// payload's text with each marker replaced by its value's JSON — how
// every fused statement builds an event's payload in SQL.
//
// One pass over payload: every marker's JSON begins with markPrefix and
// ends with markSuffix, so each occurrence of the prefix is looked up
// whole in marks (text that merely looks like a marker is kept as it is).
func Splice(payload []byte, marks map[string]string, lit, expr func(string) string) []string {
	parts := make([]string, 0, 2*len(marks)+1)
	rest := string(payload)
	from := 0 // where the current literal run starts in rest
	for at := 0; ; {
		i := strings.Index(rest[at:], markPrefix)
		if i < 0 {
			break
		}
		i += at
		j := strings.Index(rest[i+len(markPrefix):], markSuffix)
		if j < 0 {
			break
		}
		end := i + len(markPrefix) + j + len(markSuffix)
		e, ok := marks[rest[i:end]]
		if !ok {
			at = i + 1
			continue
		}
		if i > from {
			parts = append(parts, lit(rest[from:i]))
		}
		parts = append(parts, expr(e))
		from, at = end, end
	}
	if from < len(rest) {
		parts = append(parts, lit(rest[from:]))
	}
	return parts
}

// markPrefix and markSuffix begin and end the JSON encoding of every
// marker Marks.Mark makes ("\x00herald:kind:col\x00", NUL escaped).
const (
	markPrefix = `"\u0000herald:`
	markSuffix = `\u0000"`
)
