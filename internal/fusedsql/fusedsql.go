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
// expression (of "herald_row"'s columns) that gives its value's JSON as
// jsonb.
type Marks map[string]string

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
	b.WriteString(`, "herald_event" AS (INSERT INTO `)
	b.WriteString(e.Writer.Table().Quoted)
	b.WriteString(` (id, topic, payload, headers, ordering_key, created_at) SELECT `)
	b.WriteString(ph(id.String()))
	b.WriteByte(',')
	b.WriteString(ph(e.Topic))
	b.WriteByte(',')
	b.WriteString(SplicePayload(e.Payload, e.Marks, ph))
	b.WriteString(`,` + HeadersSQL(e.Headers, ph, "::json") + `,`)
	keySQL := "NULL"
	switch {
	case e.Key.hasPK:
		keySQL = "(" + ph(e.Key.pre) + "::text||" + Row + "." + names.Quote(e.GenCol) + "::text||" + ph(e.Key.post) + "::text)"
	case e.Key.text != "":
		keySQL = ph(e.Key.text) + "::text"
	}
	b.WriteString(keySQL)
	b.WriteByte(',')
	b.WriteString(ph(e.At.Truncate(time.Microsecond)))
	b.WriteString(` FROM ` + Row)
	if keySQL != "NULL" {
		// The key's advisory lock, evaluated before the event's sequence
		// value is drawn (see outbox.KeyLockSQL).
		b.WriteString(` WHERE ` + outbox.KeyLockSQL(e.Writer, keySQL, e.RowKeyed))
	}
	b.WriteByte(')')
	return nil
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
// marks, as a json expression that concatenates its text around the text
// of each marker's jsonb expression. jsonb prints a scalar as jsonform
// does, but for U+2028 and U+2029, which jsonform escapes; a NULL
// expression is JSON null. The payload column is json, so the event holds
// exactly these bytes, in the key order and compact form of every other
// path (a jsonb merge would sort the keys and add spaces).
func SplicePayload(payload []byte, marks Marks, ph func(any) string) string {
	parts := Splice(payload, marks,
		func(lit string) string { return ph(lit) + "::text" },
		func(expr string) string {
			return `COALESCE(replace(replace((` + expr + `)::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')`
		})
	return "(" + strings.Join(parts, "||") + ")::json"
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
