package relay

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/sqltime"
)

// leaseColumns are the columns the lease returns: envelope.EventColumns
// without the three whose values the relay knows already (leased_by it
// just set; published_at and dead_lettered_at are NULL for any event it
// can lease) and with tenant (schema version 6; MySQL 2), which
// EventColumns leaves out. leaseScanner reads them; Config.ExtraColumns
// follow.
const leaseColumns = "sequence, id, topic, payload, headers, ordering_key, idempotency_key, created_at, attempts, last_error, next_attempt_at, lease_until, tenant"

// leaseColumnNames are leaseColumns one by one, for DecodeError.
var leaseColumnNames = strings.Split(leaseColumns, ", ")

// DecodeError is the error of an outbox row the relay leased but cannot
// decode: a value of a column that is not what herald writes (headers that
// are not an object of strings, a payload that is not JSON, a time or an
// id that does not parse), left by a hand-written INSERT, another tool or
// an older version. It is that event's own failure, recorded like a failed
// delivery (attempts, last_error naming the column, dead-lettered at
// MaxAttempts, its ordering key held back); the other events of the batch
// are delivered. Observer.Failed and Observer.DeadLettered receive it as
// Err, with the Event holding what could be decoded.
type DecodeError struct {
	Sequence int64  // the row's sequence
	Column   string // the column that could not be decoded
	Err      error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("herald/relay: event %d: column %s cannot be decoded: %v", e.Sequence, e.Column, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// leaseScanner scans the rows of one lease. Its destinations are reused
// from row to row, so a row costs only the allocations its Event keeps
// (the event, its payload, strings and headers): it runs once per
// delivered event, on the relay's critical path.
type leaseScanner struct {
	extra        []string
	name         string
	checkPayload bool // the payload column does not validate JSON (SQLite TEXT)

	seq                 int64
	id                  uuid.UUID
	topic, tenant       string
	payload             []byte
	headers             bufBytes // copied into a reused buffer, parsed before the next row
	okey, ikey, lastErr sql.NullString
	created, next       sqltime.NullTime
	attempts            int
	leaseUntil          leaseTime
	pos                 int64  // herald_pos of leaseRunsPostgres, when the lease returns it
	tid                 string // the row's ctid, when a lease by lock returns it (leaseUnorderedLockedPostgres)
	xv                  []any
	dest                []any
}

func newLeaseScanner(extra []string, name string, checkPayload bool) *leaseScanner {
	s := &leaseScanner{extra: extra, name: name, checkPayload: checkPayload}
	s.dest = []any{&s.seq, &s.id, &s.topic, &s.payload, &s.headers, &s.okey, &s.ikey, &s.created, &s.attempts, &s.lastErr, &s.next, &s.leaseUntil, &s.tenant}
	if len(extra) > 0 {
		s.xv = make([]any, len(extra))
		for i := range s.xv {
			s.dest = append(s.dest, &s.xv[i])
		}
	}
	return s
}

// scan reads one row of leaseColumns (and the extras) into a new Event:
// what outbox.ScanEvent does for EventColumns, with the headers object
// decoded by a fast path (encoding/json was half of ScanEvent's cost). A
// row it cannot decode returns the event (Sequence set, the rest as far as
// it decoded) and a *DecodeError, or several joined; any other error means
// the row could not be read at all.
func (s *leaseScanner) scan(rows *sql.Rows) (*envelope.Event, error) {
	s.payload = nil // database/sql copies into a nil slice: the event keeps it
	var bad []error
	if err := rows.Scan(s.dest...); err != nil {
		if bad, err = s.rescan(rows); err != nil {
			return nil, err
		}
	}
	e := &envelope.Event{
		Sequence: s.seq, ID: s.id, Topic: s.topic, Payload: json.RawMessage(s.payload),
		OrderingKey: s.okey.String, IdempotencyKey: s.ikey.String, CreatedAt: s.created.Time,
		Attempts: s.attempts, LastError: s.lastErr.String, NextAttemptAt: s.next.Ptr(),
		LeasedBy: s.name, Tenant: s.tenant,
	}
	if s.leaseUntil.valid {
		lu := s.leaseUntil.t
		e.LeaseUntil = &lu
	}
	if s.checkPayload && !json.Valid(s.payload) {
		bad = append(bad, &DecodeError{Sequence: e.Sequence, Column: "payload", Err: errors.New("not valid JSON")})
	}
	if len(s.headers) > 0 && string(s.headers) != "{}" {
		h, err := decodeHeaders(s.headers)
		if err != nil {
			bad = append(bad, &DecodeError{Sequence: e.Sequence, Column: "headers", Err: err})
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
	if len(bad) > 0 {
		return e, errors.Join(bad...)
	}
	return e, nil
}

// rescan is the slow path of a row whose Scan failed: it finds each column
// that cannot be converted (scanning it alone, the others into any), then
// scans the rest, leaving the bad ones at their zero value. Only the
// sequence is indispensable: without it the row is not attributable.
func (s *leaseScanner) rescan(rows *sql.Rows) ([]error, error) {
	sink := make([]any, len(s.dest))
	probe := make([]any, len(s.dest))
	for i := range probe {
		probe[i] = &sink[i]
	}
	var failed []int
	var errs []error
	for i, d := range s.dest {
		probe[i] = d
		if err := rows.Scan(probe...); err != nil {
			failed = append(failed, i)
			errs = append(errs, err)
		}
		probe[i] = &sink[i]
	}
	if len(failed) > 0 && failed[0] == 0 {
		return nil, fmt.Errorf("herald/relay: scan leased event: %w", errs[0])
	}
	// Reset what a failed conversion may have left half-set, then scan the
	// good columns for real.
	s.seq, s.id, s.topic, s.tenant, s.payload = 0, uuid.UUID{}, "", "", nil
	s.headers = s.headers[:0]
	s.okey, s.ikey, s.lastErr = sql.NullString{}, sql.NullString{}, sql.NullString{}
	s.created, s.next, s.attempts, s.leaseUntil = sqltime.NullTime{}, sqltime.NullTime{}, 0, leaseTime{}
	copy(probe, s.dest)
	for _, i := range failed {
		probe[i] = &sink[i]
	}
	if err := rows.Scan(probe...); err != nil {
		return nil, fmt.Errorf("herald/relay: scan leased event: %w", err)
	}
	bad := make([]error, len(failed))
	for j, i := range failed {
		var col string
		if i < len(leaseColumnNames) {
			col = leaseColumnNames[i]
		} else {
			col = s.extra[i-len(leaseColumnNames)]
		}
		bad[j] = &DecodeError{Sequence: s.seq, Column: col, Err: errs[j]}
	}
	return bad, nil
}

// bufBytes scans a text or bytes column into a buffer it reuses from row
// to row: what sql.RawBytes saves, without RawBytes' rule that a row is
// scanned once (the slow path of leaseScanner scans a row again).
type bufBytes []byte

func (b *bufBytes) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*b = (*b)[:0]
	case []byte:
		*b = append((*b)[:0], x...)
	case string:
		*b = append((*b)[:0], x...)
	default:
		return fmt.Errorf("herald/relay: cannot scan %T into text", v)
	}
	return nil
}

// leaseTime scans the lease_until of a lease's rows, which all hold the
// same value: text (SQLite) is parsed once per lease, not once per row.
type leaseTime struct {
	t     time.Time
	valid bool
	raw   string
}

func (l *leaseTime) Scan(v any) error {
	switch x := v.(type) {
	case time.Time:
		l.t, l.valid = x, true
		return nil
	case string:
		if l.valid && x == l.raw {
			return nil
		}
		l.raw = x
	case []byte:
		if l.valid && string(x) == l.raw {
			return nil
		}
		l.raw = string(x)
	default:
		var n sqltime.NullTime
		err := n.Scan(v)
		l.t, l.valid, l.raw = n.Time, n.Valid, ""
		return err
	}
	var n sqltime.NullTime
	err := n.Scan(l.raw)
	l.t, l.valid = n.Time, n.Valid
	return err
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
