package envelope

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// maxArrayRows bounds the events of one array INSERT.
const maxArrayRows = 100000

// WriteCapturedArrays is WriteCaptured for large batches on PostgreSQL
// through a driver that binds Go slices as arrays (pgx's database/sql
// driver does; lib/pq does not): each run of messages is one
//
//	INSERT INTO outbox (…) SELECT … FROM unnest($1::uuid[], $2::varchar[], …) WITH ORDINALITY … RETURNING sequence, id
//
// binding seven parameters whatever the number of events, where
// WriteCaptured's multi-row VALUES binds eight per event and the server
// parses them all: for ten thousand events it costs about a third. The
// events, their order and the result are those of WriteCaptured. On
// SQLite, and for messages with an idempotency key or Extra columns, it
// is WriteCaptured.
func (w *Writer) WriteCapturedArrays(ctx context.Context, q Querier, ms []Message) (*WriteResult, error) {
	if w.d != Postgres || len(ms) < 2 {
		return w.WriteCaptured(ctx, q, ms)
	}
	for i := range ms {
		if ms[i].IdempotencyKey != "" || len(ms[i].Extra) > 0 {
			return w.WriteCaptured(ctx, q, ms)
		}
	}
	now := w.now().UTC().Truncate(time.Microsecond)
	rows := make([]row, len(ms))
	for i := range ms {
		if err := w.prepare(&rows[i], &ms[i], i, len(ms)); err != nil {
			return nil, err
		}
	}
	res := &WriteResult{Events: make([]*Event, len(rows))}
	for start := 0; start < len(rows); start += maxArrayRows {
		chunk := rows[start:min(len(rows), start+maxArrayRows)]
		seq, err := w.insertArrays(ctx, q, chunk, now)
		if err != nil {
			return nil, err
		}
		for i := range chunk {
			r := &chunk[i]
			s, ok := seq[r.id]
			if !ok {
				return nil, fmt.Errorf("herald/envelope: insert events into %s: event %s not returned", w.t.Name, r.id)
			}
			var next *time.Time
			if !r.at.IsZero() {
				t := r.at
				next = &t
			}
			res.Events[start+i] = &Event{Sequence: s, ID: r.id, Topic: r.topic, Payload: []byte(r.payload),
				Headers: cloneHeaders(r.hdrs), OrderingKey: r.okey, CreatedAt: now, NextAttemptAt: next}
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

func (w *Writer) insertArrays(ctx context.Context, q Querier, rows []row, now time.Time) (map[uuid.UUID]int64, error) {
	n := len(rows)
	ids := make([]string, n)
	topics := make([]string, n)
	payloads := make([]string, n)
	headers := make([]string, n)
	keys := make([]*string, n)
	next := make([]*time.Time, n)
	for i := range rows {
		r := &rows[i]
		ids[i], topics[i], payloads[i], headers[i] = r.id.String(), r.topic, r.payload, r.headers
		if r.okey != "" {
			keys[i] = &r.okey
		}
		if !r.at.IsZero() {
			t := r.at
			next[i] = &t
		}
	}
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(w.t.Quoted)
	b.WriteString(" (id, topic, payload, headers, ordering_key, created_at, next_attempt_at)" +
		" SELECT u.id, u.topic, u.payload, u.headers, u.okey, $7, u.next" +
		" FROM unnest($1::uuid[], $2::varchar[], $3::json[], $4::json[], $5::varchar[], $6::timestamptz[])" +
		" WITH ORDINALITY AS u(id, topic, payload, headers, okey, next, ord) ORDER BY u.ord" +
		" RETURNING sequence, id")
	res, err := q.QueryContext(ctx, b.String(), ids, topics, payloads, headers, keys, next, now)
	if err != nil {
		return nil, PoolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
	}
	defer res.Close()
	seq := make(map[uuid.UUID]int64, n)
	for res.Next() {
		var s int64
		var id uuid.UUID
		if err := res.Scan(&s, &id); err != nil {
			return nil, PoolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
		}
		seq[id] = s
	}
	if err := res.Err(); err != nil {
		return nil, PoolerHint(fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err))
	}
	return seq, nil
}
