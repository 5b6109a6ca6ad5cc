package waljudge

import (
	"fmt"
	"strconv"
	"strings"
)

// Value is one column of a row change as test_decoding prints it:
// name[type]:value.
type Value struct {
	Type string // PostgreSQL's type name (format_type): "bigint", "timestamp with time zone", "text[]"
	Text string // the value in PostgreSQL's text output form, unquoted
	// Null: the column is NULL. Unchanged: an unchanged TOASTed value the
	// log does not repeat (compared as unknown).
	Null, Unchanged bool
}

// Row is a row image: column name (unquoted) -> value, and the column
// order.
type Row struct {
	Cols   []string
	Values map[string]Value
}

// Change is one row change: Op is INSERT, UPDATE, DELETE or TRUNCATE; New
// is the row after an INSERT or UPDATE, Old the row before an UPDATE or
// DELETE (the whole row under REPLICA IDENTITY FULL, else its key or
// nothing).
type Change struct {
	Table    string // as test_decoding names it: schema.table, quoted where needed
	Op       string
	Old, New *Row
}

// Message is a logical decoding message (pg_logical_emit_message).
type Message struct {
	Transactional   bool
	Prefix, Content string
}

// Txn is one committed transaction: its row changes and its transactional
// messages, in log order.
type Txn struct {
	XID      uint32
	Changes  []Change
	Messages []Message
}

// Decoder assembles the rows of pg_logical_slot_get_changes (test_decoding
// with include-xids) into committed transactions and non-transactional
// messages. Feed it every row in order.
type Decoder struct {
	open map[uint32]*Txn
}

// Feed takes one row (its xid and data column) and returns the
// transaction it commits, or the non-transactional message it is, or
// neither.
func (d *Decoder) Feed(xid uint32, data string) (*Txn, *Message, error) {
	if d.open == nil {
		d.open = map[uint32]*Txn{}
	}
	txn := func() *Txn {
		t := d.open[xid]
		if t == nil {
			t = &Txn{XID: xid}
			d.open[xid] = t
		}
		return t
	}
	switch {
	case strings.HasPrefix(data, "BEGIN"):
		txn()
		return nil, nil, nil
	case strings.HasPrefix(data, "COMMIT"):
		t := txn()
		delete(d.open, xid)
		return t, nil, nil
	case strings.HasPrefix(data, "message: "):
		m, err := parseMessage(data)
		if err != nil {
			return nil, nil, err
		}
		if !m.Transactional {
			return nil, &m, nil
		}
		t := txn()
		t.Messages = append(t.Messages, m)
		return nil, nil, nil
	case strings.HasPrefix(data, "table "):
		c, err := ParseChange(data)
		if err != nil {
			return nil, nil, err
		}
		t := txn()
		t.Changes = append(t.Changes, c)
		return nil, nil, nil
	}
	return nil, nil, fmt.Errorf("waljudge: unknown test_decoding line %.80q", data)
}

// parseMessage parses "message: transactional: 1 prefix: P, sz: N content:C".
func parseMessage(data string) (Message, error) {
	var m Message
	rest, ok := strings.CutPrefix(data, "message: transactional: ")
	if !ok || len(rest) < 2 {
		return m, fmt.Errorf("waljudge: bad message line %.80q", data)
	}
	m.Transactional = rest[0] == '1'
	rest, ok = strings.CutPrefix(rest[1:], " prefix: ")
	if !ok {
		return m, fmt.Errorf("waljudge: bad message line %.80q", data)
	}
	i := strings.Index(rest, ", sz: ")
	if i < 0 {
		return m, fmt.Errorf("waljudge: bad message line %.80q", data)
	}
	m.Prefix = rest[:i]
	rest = rest[i+len(", sz: "):]
	j := strings.Index(rest, " content:")
	if j < 0 {
		return m, fmt.Errorf("waljudge: bad message line %.80q", data)
	}
	n, err := strconv.Atoi(rest[:j])
	if err != nil {
		return m, fmt.Errorf("waljudge: bad message size in %.80q", data)
	}
	m.Content = rest[j+len(" content:"):]
	if len(m.Content) > n {
		m.Content = m.Content[:n]
	}
	return m, nil
}

// ParseChange parses one row-change line of test_decoding:
//
//	table public.users: INSERT: id[bigint]:1 name[text]:'jinzhu' deleted_at[timestamp with time zone]:null
//	table public.users: UPDATE: old-key: id[bigint]:1 … new-tuple: id[bigint]:1 …
//	table public.users: DELETE: id[bigint]:1 …
//	table public.users: TRUNCATE: (no-flags)
func ParseChange(data string) (Change, error) {
	var c Change
	rest, _ := strings.CutPrefix(data, "table ")
	name, rest, err := cutIdent(rest, ':')
	if err != nil {
		return c, fmt.Errorf("waljudge: %w in %.80q", err, data)
	}
	c.Table = name
	rest = strings.TrimPrefix(rest, " ")
	i := strings.Index(rest, ":")
	if i < 0 {
		return c, fmt.Errorf("waljudge: no operation in %.80q", data)
	}
	c.Op, rest = rest[:i], strings.TrimPrefix(rest[i+1:], " ")
	switch c.Op {
	case "TRUNCATE":
		return c, nil
	case "INSERT":
		c.New, err = parseRow(rest)
	case "DELETE":
		c.Old, err = parseRow(rest)
	case "UPDATE":
		if r, ok := strings.CutPrefix(rest, "old-key: "); ok {
			// The old row ends where " new-tuple: " starts outside a value:
			// parse the old row up to that marker.
			c.Old, r, err = parseRowUntil(r, "new-tuple: ")
			if err != nil {
				break
			}
			rest = r
		}
		rest = strings.TrimPrefix(rest, "new-tuple: ")
		c.New, err = parseRow(rest)
	default:
		return c, fmt.Errorf("waljudge: unknown operation %q in %.80q", c.Op, data)
	}
	if err != nil {
		return c, fmt.Errorf("waljudge: %w in %.120q", err, data)
	}
	return c, nil
}

func parseRow(s string) (*Row, error) {
	r, rest, err := parseRowUntil(s, "")
	if err == nil && rest != "" {
		err = fmt.Errorf("trailing %.40q", rest)
	}
	return r, err
}

// parseRowUntil parses columns until the input ends or a column would
// start with stop.
func parseRowUntil(s, stop string) (*Row, string, error) {
	r := &Row{Values: map[string]Value{}}
	if strings.HasPrefix(s, "(no-tuple-data)") {
		return nil, strings.TrimPrefix(strings.TrimPrefix(s, "(no-tuple-data)"), " "), nil
	}
	for s != "" {
		if stop != "" && strings.HasPrefix(s, stop) {
			break
		}
		name, rest, err := cutIdent(s, '[')
		if err != nil {
			return nil, "", err
		}
		j := strings.Index(rest, "]:")
		if j < 0 {
			return nil, "", fmt.Errorf("no type for column %s", name)
		}
		v := Value{Type: rest[:j]}
		rest = rest[j+2:]
		switch {
		case strings.HasPrefix(rest, "'"):
			var b strings.Builder
			k := 1
			for {
				if k >= len(rest) {
					return nil, "", fmt.Errorf("unterminated value of column %s", name)
				}
				if rest[k] == '\'' {
					if k+1 < len(rest) && rest[k+1] == '\'' {
						b.WriteByte('\'')
						k += 2
						continue
					}
					k++
					break
				}
				b.WriteByte(rest[k])
				k++
			}
			v.Text, rest = b.String(), rest[k:]
		default:
			k := strings.IndexByte(rest, ' ')
			if k < 0 {
				k = len(rest)
			}
			tok := rest[:k]
			rest = rest[k:]
			switch tok {
			case "null":
				v.Null = true
			case "unchanged-toast-datum":
				v.Unchanged = true
			default:
				v.Text = tok
			}
		}
		r.Cols = append(r.Cols, name)
		r.Values[name] = v
		s = strings.TrimPrefix(rest, " ")
	}
	return r, s, nil
}

// cutIdent reads an identifier, "quoted" with "" escapes or bare, up to
// the byte end, and returns it unquoted (a qualified name keeps its dot
// and the quotes of its parts) and what follows end.
func cutIdent(s string, end byte) (string, string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			j := i + 1
			for {
				if j >= len(s) {
					return "", "", fmt.Errorf("unterminated identifier")
				}
				if s[j] == '"' {
					if j+1 < len(s) && s[j+1] == '"' {
						j += 2
						continue
					}
					break
				}
				j++
			}
			if end == '[' { // a column: unquoted
				b.WriteString(strings.ReplaceAll(s[i+1:j], `""`, `"`))
			} else {
				b.WriteString(s[i : j+1])
			}
			i = j
		case end:
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("no %q after identifier", end)
}
