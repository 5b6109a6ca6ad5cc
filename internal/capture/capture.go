// Package capture is the part of change capture that every capture path
// shares: a model's envelope.Options compiled against its schema (Compile,
// ModelInfo, Spec), and what a Spec makes of a statement's changes — topic,
// ordering key, the envelope JSON, the messages Writer.Write stores.
// gormcapture, entcapture (and the glue entcapturegen generates, through
// entcapturert), internal/fusedsql and the test packages use it; users
// declare envelope.Options and never see a Spec.
package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"unicode/utf8"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturedjson"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/pgform"
	"github.com/heraldgo/herald/internal/topictemplate"
	"github.com/heraldgo/herald/jsonform"
)

// The envelope's own keys, in the order they are written. Extension keys
// must not collide with them.
var envelopeKeys = []string{"model", "operation", "pk", "changed", "before", "after", "occurred_at"}

// isEnvelopeKey reports whether k is one of the envelope's own keys.
func isEnvelopeKey(k string) bool { return slices.Contains(envelopeKeys, k) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func validationf(where, format string, args ...any) error {
	return &envelope.Error{Kind: envelope.ErrValidation, Where: where, Msg: fmt.Sprintf(format, args...)}
}

func configurationf(where, format string, args ...any) error {
	return &envelope.Error{Kind: envelope.ErrConfiguration, Where: where, Msg: fmt.Sprintf(format, args...)}
}

func wrapValidation(where, msg string, err error) error {
	return &envelope.Error{Kind: envelope.ErrValidation, Where: where, Msg: msg, Err: err}
}

// ModelInfo describes a captured model to Compile; the ORM integration
// fills it from its schema.
type ModelInfo struct {
	Name             string   // Go type name: "Loan"
	Table            string   // "loans"
	Columns          []string // every column, in table order
	PrimaryKey       []string // primary-key columns, in order
	Sensitive        []string // columns left out unless named in Fields
	DefaultNamespace string   // used when envelope.Options.Namespace is ""
	// Scales gives the declared scale of decimal columns (numeric(10,2):
	// 2). A decimal value of such a column with fewer fractional digits is
	// padded to that many ("12.50", "0.00"), as PostgreSQL returns it,
	// whatever the database held (SQLite keeps 12.5); see
	// jsonform.AppendScaled.
	Scales map[string]int
	// Types gives the declared database type of columns whose JSON form
	// comes from it rather than from the Go value ("text[]", "jsonb",
	// "tstzrange", "point"): arrays become lists, ranges objects, json
	// text is embedded, geometric types GeoJSON (the table in jsonform's
	// package doc). Columns of other types may be listed; they are
	// rendered from the Go value as if absent.
	Types map[string]string
}

// Spec is a model's capture declaration compiled against its schema: what
// capture code consults for every write.
type Spec struct {
	Options   envelope.Options
	Model     ModelInfo
	Namespace string
	Label     string // the envelope's "model": library.Loan

	columns []string // payload columns, in table order
	typed   bool     // a payload column has a type of pgform's
	topic   *topictemplate.Template
	key     *topictemplate.Template
	ops     map[envelope.Operation]bool
}

// Compile validates o against the model and returns its Spec. Errors match
// envelope.ErrConfiguration and name the model and the option.
func Compile(m ModelInfo, o envelope.Options) (*Spec, error) {
	if err := o.Validate(); err != nil {
		var e *envelope.Error
		if errors.As(err, &e) {
			e.Where = m.Name + " " + e.Where
		}
		return nil, err
	}
	if m.Name == "" || m.Table == "" || len(m.PrimaryKey) == 0 {
		return nil, configurationf(m.Name, "model needs a name, a table and a primary key to be captured")
	}
	cols := make(map[string]bool, len(m.Columns))
	for _, c := range m.Columns {
		cols[c] = true
	}
	check := func(option string, names []string) error {
		for _, n := range names {
			if !cols[n] {
				return configurationf(m.Name+" Options."+option, "no column %q in table %s (columns: %v)", n, m.Table, m.Columns)
			}
		}
		return nil
	}
	if err := check("Fields", o.Fields); err != nil {
		return nil, err
	}
	if err := check("Exclude", o.Exclude); err != nil {
		return nil, err
	}
	if o.Tenant != "" {
		if err := check("Tenant", []string{o.Tenant}); err != nil {
			return nil, err
		}
	}
	s := &Spec{Options: o, Model: m, Namespace: orDefault(o.Namespace, m.DefaultNamespace)}
	s.Label = names.Label(s.Namespace, m.Name)
	switch {
	case o.Fields != nil:
		for _, c := range m.Columns { // table order, whatever order Fields has
			if slices.Contains(o.Fields, c) {
				s.columns = append(s.columns, c)
			}
		}
	default:
		for _, c := range m.Columns {
			if !slices.Contains(o.Exclude, c) && (!slices.Contains(m.Sensitive, c) || c == o.Tenant) {
				s.columns = append(s.columns, c)
			}
		}
	}
	if o.Tenant != "" && !slices.Contains(s.columns, o.Tenant) { // Fields without it: read it all the same
		s.columns = nil
		for _, c := range m.Columns {
			if c == o.Tenant || slices.Contains(o.Fields, c) {
				s.columns = append(s.columns, c)
			}
		}
	}
	// A tenant is read in Go from the row: the fused statements, which
	// render events in SQL, leave the model to the Go path as they do a
	// typed one.
	s.typed = o.Tenant != ""
	for _, c := range s.columns {
		if pgform.Handles(m.Types[c]) {
			s.typed = true
		}
	}
	s.topic, _ = topictemplate.Parse(orDefault(o.Topic, envelope.DefaultTopic)) // o.Validate parsed both
	s.key, _ = topictemplate.Parse(orDefault(o.OrderingKey, envelope.DefaultOrderingKey))
	s.ops = map[envelope.Operation]bool{}
	for _, op := range o.Operations {
		s.ops[op] = true
	}
	if o.Operations == nil {
		for _, op := range envelope.AllOperations {
			s.ops[op] = true
		}
	}
	return s, nil
}

// RowKeyed reports whether every event's ordering key is its row's own:
// the default template "{label}:{pk}", no OrderingKeyFunc, not Unordered.
// Writers of such a key hold the row's lock (the write locks the rows it
// changes), so their events need the key's advisory lock only shared —
// enough to order them against an Enqueue of the same key, without making
// writers of different rows wait on each other. Any other key (a template
// without {pk}, one naming only {model} or {pk}, an OrderingKeyFunc) may be
// shared by rows that different transactions lock, so it is locked
// exclusively.
func (s *Spec) RowKeyed() bool {
	o := s.Options
	return !o.Unordered && o.OrderingKeyFunc == nil && (o.OrderingKey == "" || o.OrderingKey == envelope.DefaultOrderingKey)
}

// Typed reports whether a payload column's JSON form comes from its
// declared type (ModelInfo.Types: an array, range, json or geometric
// column), or the model names a tenant column (envelope.Options.Tenant),
// whose value the event's message needs in Go. A capture path that renders
// events in SQL leaves such a model's events to the Go path, so that every
// path prints one form.
func (s *Spec) Typed() bool { return s.typed }

// Captures reports whether the spec captures op.
func (s *Spec) Captures(op envelope.Operation) bool { return s.ops[op] }

// Columns returns the columns an event holds, in table order. The slice is
// the spec's own, shared by every goroutine that captures with it: read
// it, never write to it. Its capacity is its length, so an append to it
// (append(spec.Columns(), other)) always copies instead of writing into
// the spec's array — where two concurrent captures would overwrite each
// other's extra column.
func (s *Spec) Columns() []string { return s.columns[:len(s.columns):len(s.columns)] }

// NeedsBefore reports whether events of op need the row as it was.
func (s *Spec) NeedsBefore(op envelope.Operation) bool {
	switch op {
	case envelope.Deleted:
		return s.Options.Payload != envelope.Keys
	case envelope.Updated:
		return s.Options.Payload == envelope.BeforeAndAfter
	}
	return false
}

// NeedsAfter reports whether events of op need the row as the write left it.
func (s *Spec) NeedsAfter(op envelope.Operation) bool {
	return op != envelope.Deleted && s.Options.Payload != envelope.Keys
}

func (s *Spec) vars(c *envelope.Change) topictemplate.Vars {
	v := topictemplate.Vars{Namespace: s.Namespace, Model: s.Model.Name, Table: s.Model.Table, Operation: string(c.Operation)}
	if m, ok := c.PK.(map[string]any); ok {
		for _, k := range s.Model.PrimaryKey {
			v.PK = append(v.PK, m[k])
		}
	} else {
		v.PK = []any{c.PK}
	}
	return v
}

// Topic returns the change's topic.
func (s *Spec) Topic(c *envelope.Change) (string, error) {
	if s.Options.TopicFunc != nil {
		t := s.Options.TopicFunc(*c)
		if t == "" || utf8.RuneCountInString(t) > envelope.MaxTopicLength {
			return "", validationf(s.Label+" TopicFunc", "returned topic %q: want 1 to %d characters", truncate(t, 80), envelope.MaxTopicLength)
		}
		return t, nil
	}
	t := s.topic.Render(s.vars(c))
	if t == "" || utf8.RuneCountInString(t) > envelope.MaxTopicLength {
		return "", validationf(s.Label+" Topic", "template %q gives topic %q: want 1 to %d characters", s.topic.String(), truncate(t, 80), envelope.MaxTopicLength)
	}
	return t, nil
}

// OrderingKey returns the change's ordering key, "" when unordered.
func (s *Spec) OrderingKey(c *envelope.Change) (string, error) {
	switch {
	case s.Options.Unordered:
		return "", nil
	case s.Options.OrderingKeyFunc != nil:
		k := s.Options.OrderingKeyFunc(*c)
		if utf8.RuneCountInString(k) > envelope.MaxKeyLength {
			return "", validationf(s.Label+" OrderingKeyFunc", "returned a key of %d characters, longer than %d", utf8.RuneCountInString(k), envelope.MaxKeyLength)
		}
		return k, nil
	}
	return names.LimitKey(s.key.Render(s.vars(c)), envelope.MaxKeyLength), nil
}

// Messages turns one statement's changes of this model into outbox
// messages, in order: topic, ordering key, the envelope as payload, and what
// Extend or ExtendMany add. It runs inside the write's transaction. Each
// payload is a capturedjson.JSON, or capturedjson.RowKeyed when RowKeyed:
// the Writer stores it as it is and takes the key's lock shared.
func (s *Spec) Messages(ctx context.Context, cs []envelope.Change) ([]envelope.Message, error) {
	if col := s.Options.Tenant; col != "" {
		for i := range cs {
			c := &cs[i]
			row := c.After
			if c.Operation == envelope.Deleted || row == nil {
				row = c.Before
			}
			c.Tenant = row[col]
		}
	}
	exts, err := s.extensions(ctx, cs)
	if err != nil {
		return nil, err
	}
	ms := make([]envelope.Message, len(cs))
	rowKeyed := s.RowKeyed()
	for i := range cs {
		c := &cs[i]
		var ext *envelope.Extension
		if exts != nil {
			ext = exts[i]
		}
		m := &ms[i]
		if m.Topic, err = s.Topic(c); err != nil {
			return nil, err
		}
		if m.OrderingKey, err = s.OrderingKey(c); err != nil {
			return nil, err
		}
		p, err := s.AppendEnvelope(nil, c, ext)
		if err != nil {
			return nil, err
		}
		if rowKeyed {
			m.Payload = capturedjson.RowKeyed(p)
		} else {
			m.Payload = capturedjson.JSON(p)
		}
		if s.Options.Tenant != "" {
			m.Tenant = names.TenantText(c.Tenant)
		}
		if ext != nil {
			m.Headers, m.Extra = ext.Headers, ext.Extra
		}
	}
	return ms, nil
}

func (s *Spec) extensions(ctx context.Context, cs []envelope.Change) ([]*envelope.Extension, error) {
	switch {
	case s.Options.Extend != nil:
		exts := make([]*envelope.Extension, len(cs))
		for i := range cs {
			e, err := s.Options.Extend(ctx, cs[i])
			if err != nil {
				return nil, wrapValidation(s.Label+" Extend", "failed", err)
			}
			exts[i] = e
		}
		return exts, nil
	case s.Options.ExtendMany != nil:
		exts, err := s.Options.ExtendMany(ctx, cs)
		if err != nil {
			return nil, wrapValidation(s.Label+" ExtendMany", "failed", err)
		}
		if len(exts) != len(cs) {
			return nil, validationf(s.Label+" ExtendMany", "returned %d extensions for %d changes: want one (or nil) per change", len(exts), len(cs))
		}
		return exts, nil
	}
	return nil, nil
}

// AppendEnvelope appends the change's envelope JSON to dst: model,
// operation, pk, changed, then before/after as the payload mode says, then
// occurred_at, then the extension's keys (sorted).
func (s *Spec) AppendEnvelope(dst []byte, c *envelope.Change, ext *envelope.Extension) ([]byte, error) {
	dst, err := s.AppendEnvelopeHead(dst, c)
	if err != nil {
		return nil, err
	}
	return s.AppendEnvelopeTail(dst, c, ext)
}

// AppendEnvelopeHead appends the start of the change's envelope to dst, up
// to occurred_at's value: what depends on the change's model, operation
// and images, and not on its time. AppendEnvelopeTail appends the rest.
func (s *Spec) AppendEnvelopeHead(dst []byte, c *envelope.Change) ([]byte, error) {
	var err error
	dst = append(dst, `{"model":`...)
	dst = jsonform.AppendString(dst, s.Label)
	dst = append(dst, `,"operation":`...)
	dst = jsonform.AppendString(dst, string(c.Operation))
	dst = append(dst, `,"pk":`...)
	if m, ok := c.PK.(map[string]any); ok && len(s.Model.PrimaryKey) > 1 {
		dst = append(dst, '{')
		for i, k := range s.Model.PrimaryKey {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonform.AppendString(dst, k)
			dst = append(dst, ':')
			if dst, err = jsonform.Append(dst, k, m[k], jsonform.Field); err != nil {
				return nil, wrapValidation(s.Label, "primary key has no JSON form", err)
			}
		}
		dst = append(dst, '}')
	} else if dst, err = jsonform.Append(dst, "pk", c.PK, jsonform.Field); err != nil {
		return nil, wrapValidation(s.Label, "primary key has no JSON form", err)
	}
	dst = append(dst, `,"changed":`...)
	if c.Changed == nil || c.Operation != envelope.Updated {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, col := range c.Changed {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonform.AppendString(dst, col)
		}
		dst = append(dst, ']')
	}
	before, after := false, false
	switch s.Options.Payload {
	case envelope.After:
		before, after = c.Operation == envelope.Deleted, c.Operation != envelope.Deleted
	case envelope.BeforeAndAfter:
		before, after = true, true
	}
	if before {
		dst = append(dst, `,"before":`...)
		if dst, err = s.appendRow(dst, "before", c.Before, c.Operation == envelope.Inserted); err != nil {
			return nil, err
		}
	}
	if after {
		dst = append(dst, `,"after":`...)
		if dst, err = s.appendRow(dst, "after", c.After, c.Operation == envelope.Deleted); err != nil {
			return nil, err
		}
	}
	return append(dst, `,"occurred_at":`...), nil
}

// AppendEnvelopeTail appends the end of the change's envelope to dst,
// after AppendEnvelopeHead: occurred_at's value, the tenant, the
// extension's keys.
func (s *Spec) AppendEnvelopeTail(dst []byte, c *envelope.Change, ext *envelope.Extension) ([]byte, error) {
	var err error
	dst = jsonform.AppendString(dst, c.OccurredAt.UTC().Format(timeFormatJSON))
	if s.Options.Tenant != "" {
		dst = append(dst, `,"tenant":`...)
		if dst, err = jsonform.Append(dst, "tenant", c.Tenant, jsonform.Field); err != nil {
			return nil, wrapValidation(s.Label+" tenant", "has no JSON form", err)
		}
	}
	if ext != nil && len(ext.Payload) > 0 {
		keys := make([]string, 0, len(ext.Payload))
		for k := range ext.Payload {
			if isEnvelopeKey(k) || (k == "tenant" && s.Options.Tenant != "") {
				return nil, validationf(s.Label+" Extension.Payload", "key %q is the envelope's own (model, operation, pk, changed, before, after, occurred_at)", k)
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			dst = append(dst, ',')
			dst = jsonform.AppendString(dst, k)
			dst = append(dst, ':')
			if dst, err = jsonform.Append(dst, k, ext.Payload[k], jsonform.Strict); err != nil {
				return nil, wrapValidation(s.Label+" Extension.Payload", "value has no JSON form", err)
			}
		}
	}
	return append(dst, '}'), nil
}

const timeFormatJSON = "2006-01-02T15:04:05.999999999Z07:00"

func (s *Spec) appendRow(dst []byte, name string, row map[string]any, absent bool) ([]byte, error) {
	if absent || row == nil {
		return append(dst, "null"...), nil
	}
	dst = append(dst, '{')
	first := true
	for _, col := range s.columns {
		v, ok := row[col]
		if !ok {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = jsonform.AppendString(dst, col)
		dst = append(dst, ':')
		var err error
		if typ := s.Model.Types[col]; typ != "" && pgform.Handles(typ) { // before Scales: numeric(10,2)[] is an array
			dst, err = pgform.Append(dst, col, typ, v)
		} else if scale, ok := s.Model.Scales[col]; ok {
			dst, err = jsonform.AppendScaled(dst, col, v, scale)
		} else {
			dst, err = jsonform.Append(dst, col, v, jsonform.Field)
		}
		if err != nil {
			return nil, wrapValidation(s.Label+" "+name, "column value has no JSON form", err)
		}
	}
	return append(dst, '}'), nil
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
