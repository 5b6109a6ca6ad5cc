package relay

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
)

// leaseColumns are the columns the lease returns: envelope.EventColumns
// without the four whose values the relay knows already (lease_until and
// leased_by it just set; published_at and dead_lettered_at are NULL for
// any event it can lease). leaseScanner reads them; Config.ExtraColumns
// follow.
const leaseColumns = "sequence, id, topic, payload, headers, ordering_key, idempotency_key, created_at, attempts, last_error, next_attempt_at"

// leaseScanner scans the rows of one lease. Its destinations are reused
// from row to row, so a row costs only the allocations its Event keeps
// (the event, its payload, strings and headers): it runs once per
// delivered event, on the relay's critical path.
type leaseScanner struct {
	extra      []string
	name       string
	leaseUntil time.Time

	seq                 int64
	id                  uuid.UUID
	topic               string
	payload             []byte
	headers             sql.RawBytes // parsed before the next row
	okey, ikey, lastErr sql.NullString
	created, next       envelope.NullTime
	attempts            int
	xv                  []any
	dest                []any
}

func newLeaseScanner(extra []string, name string, leaseUntil time.Time) *leaseScanner {
	s := &leaseScanner{extra: extra, name: name, leaseUntil: leaseUntil}
	s.dest = []any{&s.seq, &s.id, &s.topic, &s.payload, &s.headers, &s.okey, &s.ikey, &s.created, &s.attempts, &s.lastErr, &s.next}
	if len(extra) > 0 {
		s.xv = make([]any, len(extra))
		for i := range s.xv {
			s.dest = append(s.dest, &s.xv[i])
		}
	}
	return s
}

// scan reads one row of leaseColumns (and the extras) into a new Event:
// what envelope.ScanEvent does for EventColumns, with the headers object
// decoded by a fast path (encoding/json was half of ScanEvent's cost).
func (s *leaseScanner) scan(rows *sql.Rows) (*envelope.Event, error) {
	s.payload = nil // database/sql copies into a nil slice: the event keeps it
	if err := rows.Scan(s.dest...); err != nil {
		return nil, fmt.Errorf("herald/relay: scan leased event: %w", err)
	}
	lu := s.leaseUntil
	e := &envelope.Event{
		Sequence: s.seq, ID: s.id, Topic: s.topic, Payload: json.RawMessage(s.payload),
		OrderingKey: s.okey.String, IdempotencyKey: s.ikey.String, CreatedAt: s.created.Time,
		Attempts: s.attempts, LastError: s.lastErr.String, NextAttemptAt: s.next.Ptr(),
		LeaseUntil: &lu, LeasedBy: s.name,
	}
	if len(s.headers) > 0 && string(s.headers) != "{}" {
		h, err := decodeHeaders(s.headers)
		if err != nil {
			return nil, fmt.Errorf("herald/relay: event %d: headers: %w", e.Sequence, err)
		}
		e.Headers = h
	}
	if len(s.extra) > 0 {
		e.Extra = make(map[string]any, len(s.extra))
		for i, c := range s.extra {
			v := s.xv[i]
			if b, ok := v.([]byte); ok { // drivers may reuse the buffer
				v = slices.Clone(b)
			}
			e.Extra[c] = v
			s.xv[i] = nil
		}
	}
	return e, nil
}

// decodeHeaders decodes a JSON object of strings. The common case — no
// escapes, valid UTF-8, as both dialects store what the writer wrote — is
// parsed by hand; anything else goes through encoding/json, so the result
// is always what json.Unmarshal gives.
func decodeHeaders(b []byte) (map[string]string, error) {
	if m, ok := fastHeaders(b); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func fastHeaders(b []byte) (map[string]string, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	m := make(map[string]string, 2)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, skipSpace(b, i+1) == len(b)
	}
	for {
		k, j, ok := plainString(b, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		v, j, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return nil, false
		}
		m[k] = v
		i = skipSpace(b, j)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return m, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainString reads a JSON string at b[i] that has no escapes and no
// control characters and is valid UTF-8; ok is false otherwise.
func plainString(b []byte, i int) (s string, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			raw := b[i+1 : j]
			if !utf8.Valid(raw) {
				return "", j, false
			}
			return string(raw), j + 1, true
		case c == '\\' || c < 0x20:
			return "", j, false
		}
	}
	return "", len(b), false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
