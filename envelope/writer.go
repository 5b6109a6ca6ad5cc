package envelope

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/capturedjson"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/outboxsql"
	"github.com/heraldgo/herald/jsonform"
)

// Writer inserts events into the outbox table. It is safe for concurrent
// use; one Writer serves a whole service.
type Writer struct {
	d         Dialect
	t         Table
	now       func() time.Time
	lockClass string // advisory lock classid of the table's key locks, as SQL

	maxArrayRows int  // tests: writeCapturedArrays's chunk size; 0 = maxArrayRows
	noKeyLocks   bool // tests: a MySQL writer that takes no key locks

	mu   sync.Mutex
	cols map[string]bool // the table's columns, read when Extra is first used
}

// NewWriter returns a Writer for the table ("" = DefaultTable) in dialect d.
func NewWriter(d Dialect, table string) (*Writer, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	t, err := ParseTable(d, table)
	if err != nil {
		return nil, err
	}
	return &Writer{d: d, t: t, now: time.Now, lockClass: lockClassSQL(t)}, nil
}

// Dialect returns the writer's dialect.
func (w *Writer) Dialect() Dialect { return w.d }

// Table returns the writer's table.
func (w *Writer) Table() Table { return w.t }

// WriteResult is what a Write did.
type WriteResult struct {
	// Events has one event per message, in message order. For an
	// idempotency key that was already stored (or repeats within the call)
	// it is the stored event, unchanged.
	Events []*Event
	// Topics are the distinct topics of the events this call inserted (not
	// those found under an existing idempotency key): what to signal a
	// wakeup with after commit.
	Topics []string
}

// Write validates every message, then inserts them: one multi-row INSERT
// per run of consecutive messages of the same shape (same extra columns,
// with or without an idempotency key), split to stay under the dialect's
// bind-parameter limit, then one SELECT for idempotency keys that were
// already stored. On PostgreSQL a run of several events without Extra
// columns is an INSERT … SELECT FROM unnest(…) binding one array literal
// per column (any driver); otherwise a multi-row VALUES.
//
// On PostgreSQL the first INSERT also takes a transaction-scoped advisory
// lock for the ordering keys of the call before it draws any sequence
// value, so that writers of one key are serialized and a key's sequence
// order is its commit order, whoever wrote its events (Write, a captured
// row change, Enqueue), while writers of different keys do not wait on each
// other (but for the bucket sharing the package documentation describes).
// SQLite has one writer at a time, which orders every key already.
//
// q is the caller's transaction (*sql.Tx) to commit the events with the
// caller's writes; given a *sql.DB or *sql.Conn (anything with BeginTx),
// Write runs its statements in a transaction of its own and the events
// commit before it returns. A Querier that is neither a transaction nor can
// begin one runs each statement as it comes: give it one message shape
// below the bind-parameter limit, or a transaction. Nothing is written
// when a message is rejected (ErrValidation): every check runs before the
// first statement.
func (w *Writer) Write(ctx context.Context, q Querier, ms []Message) (*WriteResult, error) {
	if outboxsql.Arrays(ctx) { // internal/outbox.WriteArrays
		return w.writeCapturedArrays(ctx, q, ms)
	}
	return w.write(ctx, q, ms)
}

// row is one validated message, ready to bind.
type row struct {
	id      uuid.UUID
	topic   string
	payload string
	pbytes  []byte // payload's bytes when no one else holds them, else nil
	headers string
	hdrs    map[string]string
	okey    string
	ikey    string
	tenant  string
	at      time.Time // DeliverAt
	extra   map[string]any
	shape   string // sorted extra column names, and whether an idempotency key is set
	dupOf   int    // index of an earlier message with the same idempotency key, or -1
	rowKey  bool   // the key is its row's own, and the row is locked (a capturedjson.RowKeyed payload)
	i, n    int    // the message's index, and the call's message count
}

// eventPayload returns the payload for the row's Event: bytes of its own.
func (r *row) eventPayload() json.RawMessage {
	if r.pbytes != nil {
		return r.pbytes
	}
	return json.RawMessage(r.payload)
}

// where names a field of the row's message: "Message.Topic" in a call
// with one message, "Message[2].Topic" otherwise.
func (r *row) where(field string) string {
	if r.n == 1 {
		return "Message." + field
	}
	return "Message[" + itoa(int64(r.i)) + "]." + field
}

func (w *Writer) write(ctx context.Context, q Querier, ms []Message) (*WriteResult, error) {
	if len(ms) == 0 {
		return &WriteResult{}, nil
	}
	now := w.now().UTC().Truncate(time.Microsecond)
	rows := make([]row, len(ms))
	firstKey := map[string]int{}
	ch := headersFromContext(ctx)
	ids, err := newIDs(len(ms))
	if err != nil {
		return nil, err
	}
	for i := range ms {
		if err := w.prepare(&rows[i], &ms[i], ch, ids, i, len(ms)); err != nil {
			return nil, err
		}
		rows[i].dupOf = -1
		if k := rows[i].ikey; k != "" {
			k = tenantKey(rows[i].tenant, k)
			if j, ok := firstKey[k]; ok {
				rows[i].dupOf = j
			} else {
				firstKey[k] = i
			}
		}
	}
	if err := w.extraColumns(ctx, q, rows); err != nil {
		return nil, err
	}

	var locks keyLocks
	if w.d == Postgres || w.d == MySQL {
		for i := range rows {
			if rows[i].okey != "" && rows[i].dupOf < 0 {
				if locks == nil {
					locks = keyLocks{}
				}
				locks.add(rows[i].okey, !rows[i].rowKey)
			}
		}
	}

	// Statements: one INSERT per chunk of each run (the first takes the key
	// locks), and the SELECT of stored idempotency keys. More than one
	// needs a transaction.
	if b, ok := q.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	}); ok && (len(firstKey) > 0 || w.statements(rows) > 1 || w.d == MySQL) {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("herald/envelope: begin: %w", err)
		}
		res, err := w.run(ctx, tx, rows, locks, now)
		if err != nil {
			_ = tx.Rollback()
			return nil, w.unmigrated(err)
		}
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("herald/envelope: commit: %w", err)
		}
		return res, nil
	}
	res, err := w.run(ctx, q, rows, locks, now)
	return res, w.unmigrated(err)
}

// unmigrated (internal/outbox.Unmigrated) returns err as an ErrConfiguration naming envelope.Migrate
// when it is the database's answer that the outbox table does not exist
// (PostgreSQL's undefined_table, 42P01, about it; SQLite's "no such
// table"): a write or Enqueue before the outbox was migrated. Any other
// error, and nil, is returned as it is. Capture paths that insert events
// in a statement of their own pass its error through it.
func (w *Writer) unmigrated(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if msg := outboxsql.Unmigrated(string(w.d), w.t.Name, err); msg != "" {
		return &Error{Kind: ErrConfiguration, Where: "outbox table " + w.t.Name, Msg: msg, Err: err}
	}
	return err
}

// prepare validates m into r; ch are the write's context headers
// (headersFromContext), added where m does not set them.
func (w *Writer) prepare(r *row, m *Message, ch map[string]string, ids io.Reader, i, n int) error {
	r.i, r.n = i, n
	where := r.where
	switch l := utf8.RuneCountInString(m.Topic); {
	case l == 0:
		return validationf(where("Topic"), "empty topic")
	case l > MaxTopicLength:
		return validationf(where("Topic"), "%d characters, longer than %d", l, MaxTopicLength)
	}
	if why := checkText(m.Topic); why != "" {
		return validationf(where("Topic"), "%s", why)
	}
	if l := utf8.RuneCountInString(m.IdempotencyKey); l > MaxKeyLength {
		return validationf(where("IdempotencyKey"), "%d characters, longer than %d", l, MaxKeyLength)
	}
	if why := checkText(m.IdempotencyKey); why != "" {
		return validationf(where("IdempotencyKey"), "%s", why)
	}
	if l := utf8.RuneCountInString(m.Tenant); l > MaxKeyLength {
		return validationf(where("Tenant"), "%d characters, longer than %d", l, MaxKeyLength)
	}
	if why := checkText(m.Tenant); why != "" {
		return validationf(where("Tenant"), "%s", why)
	}
	if l := utf8.RuneCountInString(m.OrderingKey); l > MaxKeyLength {
		return validationf(where("OrderingKey"), "%d characters, longer than %d", l, MaxKeyLength)
	}
	if why := checkText(m.OrderingKey); why != "" {
		return validationf(where("OrderingKey"), "%s", why)
	}
	if !m.DeliverAt.IsZero() {
		if why := checkTime(m.DeliverAt); why != "" {
			return validationf(where("DeliverAt"), "%s", why)
		}
	}
	rowKey := false
	var pb []byte // the payload's text
	switch p := m.Payload.(type) {
	case capturedjson.JSON: // a captured change's envelope
		pb = p
	case capturedjson.RowKeyed:
		pb, rowKey = p, true
	default:
		var dst []byte
		if raw, ok := m.Payload.(json.RawMessage); ok {
			dst = make([]byte, 0, len(raw)) // compacting never lengthens it
		}
		b, err := jsonform.Append(dst, "payload", m.Payload, jsonform.Strict)
		if err != nil {
			return wrapValidation(where("Payload"), "has no JSON form", err)
		}
		pb = b
		r.pbytes = b // ours alone: the Event's Payload can share it
	}
	if why := checkJSONText(pb); why != "" {
		return validationf(where("Payload"), "%s", why)
	}
	r.payload = string(pb)
	for k := range m.Headers {
		if k == "" {
			return validationf(where("Headers"), "empty header name")
		}
		if why := checkText(k); why != "" {
			return validationf(where("Headers"), "header name %q %s", k, why)
		}
		if why := checkText(m.Headers[k]); why != "" {
			return validationf(where("Headers"), "header %q: value %s", k, why)
		}
	}
	hdrs := withContextHeaders(m.Headers, ch)
	if len(hdrs) == 0 {
		r.headers = "{}"
	} else {
		r.headers = string(appendHeadersJSON(nil, hdrs))
	}
	var shape strings.Builder
	if m.IdempotencyKey != "" {
		shape.WriteString("!")
	}
	if len(m.Extra) > 0 {
		cols := make([]string, 0, len(m.Extra))
		for c := range m.Extra {
			switch {
			case isOwnColumn(c):
				return validationf(where("Extra"), "column %q is one of the outbox table's own columns; Extra fills only your extra columns", c)
			case !names.IsIdentifier(c):
				return validationf(where("Extra"), "column %q is not an identifier", c)
			}
			if why := checkExtraValue(m.Extra[c]); why != "" {
				return validationf(where("Extra"), "column %q: value %s", c, why)
			}
			cols = append(cols, c)
		}
		sort.Strings(cols)
		for _, c := range cols {
			shape.WriteString(c)
			shape.WriteByte(',')
		}
	}
	id, err := uuid.NewV7FromReader(ids)
	if err != nil {
		return fmt.Errorf("herald/envelope: new event id: %w", err)
	}
	*r = row{id: id, topic: m.Topic, payload: r.payload, pbytes: r.pbytes, headers: r.headers, hdrs: hdrs,
		okey: m.OrderingKey, ikey: m.IdempotencyKey, tenant: m.Tenant, at: m.DeliverAt, extra: m.Extra, shape: shape.String(),
		rowKey: rowKey, i: i, n: n}
	return nil
}

// ownInsertColumns are the columns every INSERT binds, before extras.
var ownInsertColumns = []string{"id", "topic", "payload", "headers", "ordering_key", "idempotency_key", "created_at", "next_attempt_at"}

type run struct {
	start, end int // rows[start:end], duplicates of earlier keys skipped when binding
	extras     []string
	idem       bool
	tenant     bool // a row of the run has a tenant: the INSERT names the column
}

// tenantKey is an idempotency key as the table's unique index sees it:
// with its tenant (schema version 6).
func tenantKey(tenant, key string) string { return tenant + "\x00" + key }

// tenantColumn is the INSERT's column list after next_attempt_at for a
// run with tenants.
func (r run) tenantColumn() string {
	if r.tenant {
		return ", tenant"
	}
	return ""
}

// ownColumns is the number of own columns the run's INSERT binds.
func (r run) ownColumns() int {
	if r.tenant {
		return len(ownInsertColumns) + 1
	}
	return len(ownInsertColumns)
}

func (w *Writer) runs(rows []row) []run {
	var out []run
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].shape == rows[i].shape {
			j++
		}
		r := run{start: i, end: j, idem: rows[i].ikey != ""}
		for k := i; k < j; k++ {
			r.tenant = r.tenant || rows[k].tenant != ""
		}
		for c := range rows[i].extra {
			r.extras = append(r.extras, c)
		}
		sort.Strings(r.extras)
		out = append(out, r)
		i = j
	}
	return out
}

func (w *Writer) chunkRows(r run) int {
	per := r.ownColumns() + len(r.extras)
	return (w.d.maxBindParams() - 2) / per // 2: the key locks' arrays
}

func (w *Writer) statements(rows []row) int {
	n := 0
	for _, r := range w.runs(rows) {
		c := w.chunkRows(r)
		n += (r.end - r.start + c - 1) / c
	}
	return n
}

func (w *Writer) run(ctx context.Context, q Querier, rows []row, locks keyLocks, now time.Time) (*WriteResult, error) {
	seq := make(map[uuid.UUID]int64, len(rows))
	for _, r := range w.runs(rows) {
		chunk := w.chunkRows(r)
		var batch []int
		for i := r.start; i < r.end; i++ {
			if rows[i].dupOf >= 0 {
				continue
			}
			batch = append(batch, i)
			if len(batch) == chunk {
				if err := w.insert(ctx, q, rows, batch, r, now, seq, locks); err != nil {
					return nil, err
				}
				batch, locks = batch[:0], nil // the first INSERT took the locks
			}
		}
		if len(batch) > 0 {
			if err := w.insert(ctx, q, rows, batch, r, now, seq, locks); err != nil {
				return nil, err
			}
			locks = nil
		}
	}
	res := &WriteResult{Events: make([]*Event, len(rows))}
	var stored []string // idempotency keys whose event was already there
	for i := range rows {
		r := &rows[i]
		s, ok := seq[r.id]
		if !ok {
			if r.dupOf < 0 && !slices.Contains(stored, r.ikey) {
				stored = append(stored, r.ikey)
			}
			continue
		}
		var next *time.Time
		if !r.at.IsZero() {
			t := r.at
			next = &t
		}
		res.Events[i] = &Event{Sequence: s, ID: r.id, Topic: r.topic, Payload: r.eventPayload(),
			Headers: maps.Clone(r.hdrs), OrderingKey: r.okey, IdempotencyKey: r.ikey, Tenant: r.tenant, CreatedAt: now, NextAttemptAt: next, Extra: maps.Clone(r.extra)}
		if !slices.Contains(res.Topics, r.topic) {
			res.Topics = append(res.Topics, r.topic)
		}
	}
	byKey := map[string]*Event{}
	if len(stored) > 0 {
		found, err := w.selectByIdempotencyKey(ctx, q, stored)
		if err != nil {
			return nil, err
		}
		byKey = found
	}
	for i := range rows {
		if res.Events[i] != nil {
			byKey[tenantKey(rows[i].tenant, rows[i].ikey)] = res.Events[i]
			continue
		}
	}
	for i := range rows {
		if res.Events[i] != nil {
			continue
		}
		e, ok := byKey[tenantKey(rows[i].tenant, rows[i].ikey)]
		if !ok {
			// ON CONFLICT skipped the row, yet the key's event is not
			// visible: it was committed after this transaction's snapshot
			// (REPEATABLE READ / SERIALIZABLE).
			return nil, fmt.Errorf("herald/envelope: idempotency key %q is taken by an event this transaction cannot see (committed after its snapshot); retry the transaction", rows[i].ikey)
		}
		res.Events[i] = e
	}
	return res, nil
}

// insert writes one chunk with one INSERT … RETURNING. When locks is not
// nil (PostgreSQL, the call's first INSERT), the statement takes the key
// locks before it draws a sequence value (see keyLockBuckets): one row as
// "INSERT … SELECT $1, … WHERE <locks>", several with the locks in the
// first row's created_at (lockCond).
func (w *Writer) insert(ctx context.Context, q Querier, rows []row, batch []int, r run, now time.Time, seq map[uuid.UUID]int64, locks keyLocks) error {
	if w.d == MySQL {
		return w.insertMySQL(ctx, q, rows, batch, r, now, seq, locks)
	}
	if w.d == Postgres && len(batch) > 1 && len(r.extras) == 0 {
		return w.insertUnnest(ctx, q, rows, batch, r, now, seq, locks)
	}
	var b strings.Builder
	per := r.ownColumns() + len(r.extras)
	b.Grow(64 + len(batch)*per*5)
	b.WriteString("INSERT INTO ")
	b.WriteString(w.t.Quoted)
	b.WriteString(" (id, topic, payload, headers, ordering_key, idempotency_key, created_at, next_attempt_at")
	b.WriteString(r.tenantColumn())
	for _, c := range r.extras {
		b.WriteString(", ")
		b.WriteString(w.d.QuoteIdent(c))
	}
	args := make([]any, 0, len(batch)*per+2)
	var lockSQL string
	if len(locks) > 0 {
		lockSQL, args = w.lockCond(locks, args, false)
	}
	single := lockSQL != "" && len(batch) == 1
	if single {
		b.WriteString(") SELECT ")
	} else {
		b.WriteString(") VALUES ")
	}
	created := w.d.timeArg(now)
	for bi, i := range batch {
		if bi > 0 {
			b.WriteByte(',')
		}
		if !single {
			b.WriteByte('(')
		}
		for c := range per {
			if c > 0 {
				b.WriteByte(',')
			}
			ph := w.d.placeholder(len(args) + c + 1)
			if bi == 0 && c == 6 && lockSQL != "" && !single { // created_at
				ph = "CASE WHEN " + lockSQL + " THEN " + ph + "::timestamptz END"
			}
			b.WriteString(ph)
		}
		if !single {
			b.WriteByte(')')
		}
		row := &rows[i]
		var next any
		if !row.at.IsZero() {
			next = w.d.timeArg(row.at)
			if w.d == Postgres {
				// Microseconds, truncated: pgx does so, lib/pq sends
				// nanoseconds that PostgreSQL rounds; the same instant
				// whatever the driver or the form of the INSERT.
				next = row.at.Truncate(time.Microsecond)
			}
		}
		args = append(args, row.id.String(), row.topic, row.payload, row.headers, nullString(row.okey), nullString(row.ikey), created, next)
		if r.tenant {
			args = append(args, row.tenant)
		}
		for _, c := range r.extras {
			args = append(args, row.extra[c])
		}
	}
	if single {
		b.WriteString(" WHERE " + lockSQL)
	}
	if r.idem {
		b.WriteString(" ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING")
	}
	b.WriteString(" RETURNING sequence, id")
	return w.returning(ctx, q, b.String(), args, seq)
}

// insertUnnest writes a chunk of several events without Extra columns on
// PostgreSQL as one
//
//	INSERT INTO outbox (…) SELECT … FROM unnest($1::text::uuid[], …) WITH ORDINALITY AS u(…) ORDER BY u.ord RETURNING sequence, id
//
// binding each column as one array literal in a text parameter, so that
// every driver sends it (pgx, lib/pq; writeCapturedArrays binds Go slices,
// which only pgx can): at most ten parameters whatever the number of
// events, where a multi-row VALUES binds eight per event and the server
// parses, binds and plans them all (1000 events: about 1.3× the time of a
// bare unnest INSERT, against 1.1–1.2 for this form; BenchmarkWrite). A
// column every event of the chunk leaves at its default (headers, keys,
// DeliverAt) is a constant, not an array of equal elements to parse
// (unnestInsert). The
// events get their sequence values in message order (ORDER BY u.ord below
// the INSERT's projection, which draws them), and the key locks, a
// one-time condition, are taken before the first.
func (w *Writer) insertUnnest(ctx context.Context, q Querier, rows []row, batch []int, r run, now time.Time, seq map[uuid.UUID]int64, locks keyLocks) error {
	c := atDefault(rows, batch)
	// literal renders one column of the chunk as a PostgreSQL array literal.
	literal := func(size int, elem func(b *strings.Builder, r *row)) string {
		var b strings.Builder
		b.Grow(size + 2)
		b.WriteByte('{')
		for bi, i := range batch {
			if bi > 0 {
				b.WriteByte(',')
			}
			elem(&b, &rows[i])
		}
		b.WriteByte('}')
		return b.String()
	}
	size := 0
	for _, i := range batch {
		size += len(rows[i].payload) + len(rows[i].payload)/8 + 3
	}
	u := unnestInsert{}
	u.array("id", "text::uuid", literal(len(batch)*37, func(b *strings.Builder, r *row) { b.WriteString(r.id.String()) }))
	u.array("topic", "text::varchar", literal(0, func(b *strings.Builder, r *row) { appendArrayElement(b, r.topic) }))
	u.array("payload", "text::json", literal(size, func(b *strings.Builder, r *row) { appendArrayElement(b, r.payload) }))
	u.optional(c.headers, "headers", "'{}'::json", "text::json", func() any {
		return literal(0, func(b *strings.Builder, r *row) { appendArrayElement(b, r.headers) })
	})
	u.optional(c.keys, "ordering_key", "NULL", "text::varchar", func() any {
		return literal(0, func(b *strings.Builder, r *row) { appendNullableElement(b, r.okey) })
	})
	u.optional(c.ikeys, "idempotency_key", "NULL", "text::varchar", func() any {
		return literal(0, func(b *strings.Builder, r *row) { appendNullableElement(b, r.ikey) })
	})
	u.scalar("created_at", w.d.timeArg(now))
	if r.tenant {
		u.array("tenant", "text::varchar", literal(0, func(b *strings.Builder, r *row) { appendArrayElement(b, r.tenant) }))
	}
	u.optional(c.next, "next_attempt_at", "NULL", "text::timestamptz", func() any {
		return literal(0, func(b *strings.Builder, r *row) {
			if r.at.IsZero() {
				b.WriteString("NULL")
			} else {
				// Microseconds, truncated, as insert binds them.
				b.WriteString(r.at.UTC().Truncate(time.Microsecond).Format(`"2006-01-02T15:04:05.999999Z"`))
			}
		})
	})
	var b strings.Builder
	u.write(&b, w.t.Quoted)
	args := u.args
	if len(locks) > 0 {
		var cond string
		cond, args = w.lockCond(locks, args, true)
		b.WriteString(" WHERE " + cond)
	}
	b.WriteString(" ORDER BY u.ord")
	if r.idem {
		b.WriteString(" ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING")
	}
	b.WriteString(" RETURNING sequence, id")
	return w.returning(ctx, q, b.String(), args, seq)
}

// returning runs an INSERT … RETURNING sequence, id and records the
// sequence of each event inserted.
func (w *Writer) returning(ctx context.Context, q Querier, query string, args []any, seq map[uuid.UUID]int64) error {
	res, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return poolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
	}
	defer res.Close()
	for res.Next() {
		var s int64
		var id uuid.UUID
		if err := res.Scan(&s, &id); err != nil {
			return poolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
		}
		seq[id] = s
	}
	if err := res.Err(); err != nil {
		return poolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// selectByIdempotencyKey reads the stored events of keys: on PostgreSQL
// one statement binding the keys as one text[] parameter, on SQLite one
// per MaxBindParams keys.
func (w *Writer) selectByIdempotencyKey(ctx context.Context, q Querier, keys []string) (map[string]*Event, error) {
	out := make(map[string]*Event, len(keys))
	base := "SELECT " + EventColumns + ", tenant FROM " + w.t.Quoted + " WHERE idempotency_key "
	if w.d == Postgres {
		return out, w.selectEvents(ctx, q, base+"= ANY($1::text[])", []any{textArray(keys)}, out)
	}
	for start := 0; start < len(keys); start += w.d.maxBindParams() {
		chunk := keys[start:min(len(keys), start+w.d.maxBindParams())]
		var b strings.Builder
		b.WriteString(base)
		b.WriteString("IN (")
		args := make([]any, len(chunk))
		for i, k := range chunk {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(w.d.placeholder(i + 1))
			args[i] = k
		}
		b.WriteByte(')')
		if w.d == MySQL {
			// A locking read sees the newest committed row, the one ON
			// DUPLICATE KEY found, whatever the transaction's snapshot.
			b.WriteString(" LOCK IN SHARE MODE")
		}
		if err := w.selectEvents(ctx, q, b.String(), args, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (w *Writer) selectEvents(ctx context.Context, q Querier, query string, args []any, out map[string]*Event) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return poolerHint(fmt.Errorf("herald/envelope: select stored idempotency keys: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanEvent(rows, []string{"tenant"})
		if err != nil {
			return err
		}
		e.Tenant = names.TenantText(e.Extra["tenant"])
		e.Extra = nil
		out[tenantKey(e.Tenant, e.IdempotencyKey)] = e
	}
	if err := rows.Err(); err != nil {
		return poolerHint(fmt.Errorf("herald/envelope: select stored idempotency keys: %w", err))
	}
	return nil
}

// EventColumns lists the outbox table's columns of an Event, in the order
// of Event's fields, for a SELECT of your own.
const EventColumns = "sequence, id, topic, payload, headers, ordering_key, idempotency_key, created_at, attempts, last_error, next_attempt_at, lease_until, leased_by, published_at, dead_lettered_at"

// scanEvent (internal/outbox.ScanEvent) scans one row selected as EventColumns followed by the extra
// columns named in extra (loaded into Event.Extra).
func scanEvent(s interface{ Scan(dest ...any) error }, extra []string) (*Event, error) {
	e, err := outboxsql.ScanEvent(s, extra)
	return (*Event)(e), err
}
