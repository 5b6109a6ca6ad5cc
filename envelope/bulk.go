package envelope

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/uuidtext"
)

// maxArrayRows bounds the events of one array INSERT.
const maxArrayRows = 100000

// writeCapturedArrays (internal/outbox.WriteArrays) is Write for large batches on PostgreSQL
// through a driver that binds Go slices as arrays (pgx's database/sql
// driver does; lib/pq does not): each chunk of up to 100,000 messages is
// one
//
//	INSERT INTO outbox (…) SELECT … FROM unnest($1::text::uuid[], $3::json[], …) WITH ORDINALITY … ORDER BY u.ord RETURNING sequence
//
// binding at most nine parameters whatever the number of events (the ids
// as one array literal, a topic every event shares once: insertArrays), where
// Write's multi-row VALUES binds eight per event and the server
// parses them all: for ten thousand events it costs about a third. The
// first chunk takes the key locks as Write does. The events, their order
// and the result are those of Write, and so is atomicity: given a
// *sql.DB or *sql.Conn, the chunks run in one transaction of its own, so
// a failing chunk leaves none of the call's events committed. On SQLite,
// and for messages with an idempotency key or Extra columns, it is
// Write.
func (w *Writer) writeCapturedArrays(ctx context.Context, q Querier, ms []Message) (*WriteResult, error) {
	if w.d != Postgres || len(ms) < 2 {
		return w.write(ctx, q, ms)
	}
	for i := range ms {
		if ms[i].IdempotencyKey != "" || len(ms[i].Extra) > 0 {
			return w.write(ctx, q, ms)
		}
	}
	now := w.now().UTC().Truncate(time.Microsecond)
	rows := make([]row, len(ms))
	var locks keyLocks
	ch := headersFromContext(ctx)
	ids, err := newIDs(len(ms))
	if err != nil {
		return nil, err
	}
	for i := range ms {
		if err := w.prepare(&rows[i], &ms[i], ch, ids, i, len(ms)); err != nil {
			return nil, err
		}
		if rows[i].okey != "" {
			if locks == nil {
				locks = keyLocks{}
			}
			locks.add(rows[i].okey, !rows[i].rowKey)
		}
	}
	if b, ok := q.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	}); ok && len(rows) > w.arrayRows() {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("herald/envelope: begin: %w", err)
		}
		res, err := w.writeArrays(ctx, tx, rows, locks, now)
		if err != nil {
			_ = tx.Rollback()
			return nil, w.unmigrated(err)
		}
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("herald/envelope: commit: %w", err)
		}
		return res, nil
	}
	res, err := w.writeArrays(ctx, q, rows, locks, now)
	return res, w.unmigrated(err)
}

// arrayRows bounds the events of one array INSERT; a variable so that a
// test can make chunks small.
func (w *Writer) arrayRows() int {
	if w.maxArrayRows > 0 {
		return w.maxArrayRows
	}
	return maxArrayRows
}

func (w *Writer) writeArrays(ctx context.Context, q Querier, rows []row, locks keyLocks, now time.Time) (*WriteResult, error) {
	res := &WriteResult{Events: make([]*Event, len(rows))}
	for start := 0; start < len(rows); start += w.arrayRows() {
		chunk := rows[start:min(len(rows), start+w.arrayRows())]
		seqs, err := w.insertArrays(ctx, q, chunk, now, locks)
		if err != nil {
			return nil, err
		}
		locks = nil                      // the first INSERT took them
		evs := make([]Event, len(chunk)) // one allocation for the chunk's events
		for i := range chunk {
			r := &chunk[i]
			s := seqs[i]
			var next *time.Time
			if !r.at.IsZero() {
				t := r.at
				next = &t
			}
			evs[i] = Event{Sequence: s, ID: r.id, Topic: r.topic, Payload: r.eventPayload(),
				Headers: cloneHeaders(r.hdrs), OrderingKey: r.okey, Tenant: r.tenant, CreatedAt: now, NextAttemptAt: next}
			res.Events[start+i] = &evs[i]
			if !slices.Contains(res.Topics, r.topic) {
				res.Topics = append(res.Topics, r.topic)
			}
		}
	}
	return res, nil
}

func cloneHeaders(h map[string]string) map[string]string {
	if h == nil {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}

// insertArrays inserts rows with one unnest INSERT and returns their
// sequences, in the rows' order.
//
// The ids are bound as one array literal in a text parameter. Bound as a
// []string to uuid[], pgx first tries the binary form, fails, formats the
// whole slice into its error and falls back to text (BenchmarkInsertForms);
// bound as [][16]byte, it cannot encode them at all in its exec and
// simple_protocol modes, the modes a transaction pooler needs
// (TestWriteArraysExecModes). A topic shared by every row, the usual
// batch, is bound once.
func (w *Writer) insertArrays(ctx context.Context, q Querier, rows []row, now time.Time, locks keyLocks) ([]int64, error) {
	n := len(rows)
	var ids strings.Builder
	ids.Grow(n*37 + 1)
	ids.WriteByte('{')
	var buf [36]byte
	payloads := make([]string, n)
	oneTopic := true
	for i := range rows {
		r := &rows[i]
		if i > 0 {
			ids.WriteByte(',')
		}
		ids.Write(uuidtext.Append(buf[:0], r.id))
		payloads[i] = r.payload
		oneTopic = oneTopic && r.topic == rows[0].topic
	}
	ids.WriteByte('}')
	c := atDefault(rows, nil)
	u := unnestInsert{}
	u.array("id", "text::uuid", ids.String())
	if oneTopic {
		u.scalar("topic", rows[0].topic)
	} else {
		topics := make([]string, n)
		for i := range rows {
			topics[i] = rows[i].topic
		}
		u.array("topic", "varchar", topics)
	}
	u.array("payload", "json", payloads)
	u.optional(c.headers, "headers", "'{}'::json", "json", func() any {
		headers := make([]string, n)
		for i := range rows {
			headers[i] = rows[i].headers
		}
		return headers
	})
	u.optional(c.keys, "ordering_key", "NULL", "varchar", func() any {
		keys := make([]*string, n)
		for i := range rows {
			if rows[i].okey != "" {
				keys[i] = &rows[i].okey
			}
		}
		return keys
	})
	u.scalar("created_at", now)
	if !c.tenant { // a column of its own only when an event has a tenant: the table may predate version 6
		tenants := make([]string, n)
		for i := range rows {
			tenants[i] = rows[i].tenant
		}
		u.array("tenant", "varchar", tenants)
	}
	u.optional(c.next, "next_attempt_at", "NULL", "timestamptz", func() any {
		next := make([]*time.Time, n)
		for i := range rows {
			if !rows[i].at.IsZero() {
				t := rows[i].at
				next[i] = &t
			}
		}
		return next
	})
	var b strings.Builder
	u.write(&b, w.t.Quoted)
	args := u.args
	if len(locks) > 0 {
		// A one-time filter: the locks are taken before the first row is
		// read, so before any sequence value is drawn.
		var cond string
		cond, args = w.lockCond(locks, args, true)
		b.WriteString(" WHERE " + cond)
	}
	// ORDER BY u.ord draws the sequences in the rows' order (the column's
	// default is evaluated in the projection above the ordered scan), so
	// the i-th smallest sequence returned is the i-th row's, whatever
	// order RETURNING sends them in.
	b.WriteString(" ORDER BY u.ord RETURNING sequence")
	res, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, poolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
	}
	defer res.Close()
	seqs := make([]int64, 0, n)
	for res.Next() {
		var s int64
		if err := res.Scan(&s); err != nil {
			return nil, poolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
		}
		seqs = append(seqs, s)
	}
	if err := res.Err(); err != nil {
		return nil, poolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
	}
	if len(seqs) != n {
		return nil, fmt.Errorf("herald/envelope: insert events into %s: %d events returned, want %d", w.t.Name, len(seqs), n)
	}
	if !slices.IsSorted(seqs) {
		slices.Sort(seqs)
	}
	return seqs, nil
}

// unnestInsert builds "INSERT INTO t (cols) SELECT exprs FROM
// unnest($1::type[], …) WITH ORDINALITY AS u(…, ord)": a column is an
// array bound as one parameter, a scalar bound once, or a constant — what
// a chunk whose every row leaves a column at its default (no headers, no
// ordering key, no DeliverAt: the usual batch) writes instead of an array
// of 1000 equal elements for the server to parse (BenchmarkWrite).
type unnestInsert struct {
	cols, exprs, arrays, names []string
	args                       []any
}

func (u *unnestInsert) bind(v any) string {
	u.args = append(u.args, v)
	return "$" + strconv.Itoa(len(u.args))
}

func (u *unnestInsert) array(col, typ string, v any) {
	name := "c" + strconv.Itoa(len(u.names))
	u.cols = append(u.cols, col)
	u.exprs = append(u.exprs, "u."+name)
	u.arrays = append(u.arrays, u.bind(v)+"::"+typ+"[]")
	u.names = append(u.names, name)
}

func (u *unnestInsert) scalar(col string, v any) {
	u.cols = append(u.cols, col)
	u.exprs = append(u.exprs, u.bind(v))
}

// optional is column col: the constant sql when every row leaves it at
// its default (atDefault), else the array values() builds.
func (u *unnestInsert) optional(atDefault bool, col, sql, typ string, values func() any) {
	if atDefault {
		u.cols = append(u.cols, col)
		u.exprs = append(u.exprs, sql)
		return
	}
	u.array(col, typ, values())
}

func (u *unnestInsert) write(b *strings.Builder, table string) {
	b.WriteString("INSERT INTO ")
	b.WriteString(table)
	b.WriteString(" (" + strings.Join(u.cols, ", ") + ") SELECT " + strings.Join(u.exprs, ", ") +
		" FROM unnest(" + strings.Join(u.arrays, ", ") + ") WITH ORDINALITY AS u(" + strings.Join(u.names, ", ") + ", ord)")
}

// columnsAtDefault says which optional columns every row of a chunk
// leaves at its default: no headers ('{}'), no ordering key, no
// idempotency key, no DeliverAt (NULL).
type columnsAtDefault struct{ headers, keys, ikeys, next, tenant bool }

// atDefault reports columnsAtDefault of the rows at the indexes batch,
// or of every row when batch is nil.
func atDefault(rows []row, batch []int) columnsAtDefault {
	c := columnsAtDefault{true, true, true, true, true}
	see := func(r *row) {
		c.headers = c.headers && r.headers == "{}"
		c.keys = c.keys && r.okey == ""
		c.ikeys = c.ikeys && r.ikey == ""
		c.next = c.next && r.at.IsZero()
		c.tenant = c.tenant && r.tenant == ""
	}
	if batch == nil {
		for i := range rows {
			see(&rows[i])
		}
	}
	for _, i := range batch {
		see(&rows[i])
	}
	return c
}

// newIDs returns the random bits of n event ids (UUID v7,
// uuid.NewV7FromReader), read from crypto/rand at once: a read per event
// cost more than the rest of its id.
func newIDs(n int) (io.Reader, error) {
	if n <= 1 {
		return rand.Reader, nil // one id: read where it goes
	}
	b := make([]byte, 16*n)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("herald/envelope: new event ids: %w", err)
	}
	return bytes.NewReader(b), nil
}
