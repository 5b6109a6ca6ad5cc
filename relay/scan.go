package relay

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/heraldgo/herald/envelope"
)

// leaseColumns are the columns the lease returns: envelope.EventColumns
// without the four whose values the relay knows already (lease_until and
// leased_by it just set; published_at and dead_lettered_at are NULL for
// any event it can lease). scanLeased reads them; Config.ExtraColumns
// follow.
const leaseColumns = "sequence, id, topic, payload, headers, ordering_key, idempotency_key, created_at, attempts, last_error, next_attempt_at"

// scanLeased scans one leased row: envelope.ScanEvent for leaseColumns,
// with the headers object decoded by a fast path. It runs once per
// delivered event, on the relay's critical path, where ScanEvent's
// encoding/json decoding of the headers was half of the scan's cost.
func scanLeased(rows *sql.Rows, extra []string, name string, leaseUntil time.Time) (*envelope.Event, error) {
	var (
		e                   envelope.Event
		payload, headers    []byte
		okey, ikey, lastErr sql.NullString
		created, next       envelope.NullTime
	)
	dest := make([]any, 0, 11+len(extra))
	dest = append(dest, &e.Sequence, &e.ID, &e.Topic, &payload, &headers, &okey, &ikey, &created, &e.Attempts, &lastErr, &next)
	var xv []any
	if len(extra) > 0 {
		xv = make([]any, len(extra))
		for i := range xv {
			dest = append(dest, &xv[i])
		}
	}
	if err := rows.Scan(dest...); err != nil {
		return nil, fmt.Errorf("herald/relay: scan leased event: %w", err)
	}
	e.Payload = json.RawMessage(payload)
	if len(headers) > 0 && string(headers) != "{}" {
		h, err := decodeHeaders(headers)
		if err != nil {
			return nil, fmt.Errorf("herald/relay: event %d: headers: %w", e.Sequence, err)
		}
		e.Headers = h
	}
	e.OrderingKey, e.IdempotencyKey, e.LastError = okey.String, ikey.String, lastErr.String
	e.CreatedAt = created.Time
	e.NextAttemptAt = next.Ptr()
	e.LeasedBy = name
	lu := leaseUntil
	e.LeaseUntil = &lu
	if len(extra) > 0 {
		e.Extra = make(map[string]any, len(extra))
		for i, c := range extra {
			if b, ok := xv[i].([]byte); ok { // drivers may reuse the buffer
				xv[i] = slices.Clone(b)
			}
			e.Extra[c] = xv[i]
		}
	}
	return &e, nil
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
