package jsonform

import "unicode/utf8"

// maxDepth is encoding/json's limit on nesting: json.Valid rejects deeper
// documents, and so does appendValidCompact.
const maxDepth = 10000

// plain marks the bytes a string copies as they are: printable ASCII other
// than '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendValidCompact appends src compacted as appendCompact does and
// reports whether src is valid JSON as json.Valid does, in one pass over
// src (json.Valid then appendCompact took twice as long). On false, dst's
// spare capacity may have been written to.
func appendValidCompact(dst, src []byte) ([]byte, bool) {
	c := compactor{src: src, dst: dst}
	c.space()
	if !c.value() {
		return dst, false
	}
	c.space()
	if c.i != len(src) {
		return dst, false
	}
	return append(c.dst, src[c.start:]...), true
}

// compactor walks src from i; the bytes from start to i are still to be
// copied to dst.
type compactor struct {
	src      []byte
	dst      []byte
	i, start int
	depth    int
}

// space skips white space, dropping it from the output.
func (c *compactor) space() {
	if c.i >= len(c.src) || !isSpace(c.src[c.i]) {
		return
	}
	c.dst = append(c.dst, c.src[c.start:c.i]...)
	for c.i < len(c.src) && isSpace(c.src[c.i]) {
		c.i++
	}
	c.start = c.i
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func (c *compactor) value() bool {
	if c.i >= len(c.src) {
		return false
	}
	switch b := c.src[c.i]; {
	case b == '{':
		return c.composite(true, '}')
	case b == '[':
		return c.composite(false, ']')
	case b == '"':
		return c.string()
	case b == '-' || '0' <= b && b <= '9':
		return c.number()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	}
	return false
}

func (c *compactor) literal(l string) bool {
	if len(c.src)-c.i < len(l) || string(c.src[c.i:c.i+len(l)]) != l {
		return false
	}
	c.i += len(l)
	return true
}

// next skips white space and reports whether the next byte is b, then
// steps over it.
func (c *compactor) next(b byte) bool {
	c.space()
	if c.i < len(c.src) && c.src[c.i] == b {
		c.i++
		return true
	}
	return false
}

// composite steps over an object (keyed: its members' keys and colons)
// or an array, from its opening bracket to end, its closing one.
func (c *compactor) composite(keyed bool, end byte) bool {
	if c.depth++; c.depth > maxDepth {
		return false
	}
	c.i++ // '{' or '['
	if c.next(end) {
		c.depth--
		return true
	}
	for {
		c.space()
		if keyed && (c.i >= len(c.src) || c.src[c.i] != '"' || !c.string() || !c.next(':')) {
			return false
		}
		c.space()
		if !c.value() {
			return false
		}
		if c.next(end) {
			c.depth--
			return true
		}
		if c.i >= len(c.src) || c.src[c.i] != ',' {
			return false
		}
		c.i++
	}
}

// string steps over a string, replacing invalid UTF-8 with \ufffd and
// escaping U+2028 and U+2029, as appendCompact does.
func (c *compactor) string() bool {
	src := c.src
	i := c.i + 1 // '"'
	for {
		for i < len(src) && plain[src[i]] {
			i++
		}
		if i >= len(src) {
			return false
		}
		switch b := src[i]; {
		case b == '"':
			c.i = i + 1
			return true
		case b == '\\':
			if i+1 >= len(src) {
				return false
			}
			switch src[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(src)-i < 6 || !isHex(src[i+2]) || !isHex(src[i+3]) || !isHex(src[i+4]) || !isHex(src[i+5]) {
					return false
				}
				i += 6
			default:
				return false
			}
		case b < 0x20:
			return false
		default:
			r, size := decodeRune(src[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				c.dst = append(c.dst, src[c.start:i]...)
				c.dst = append(c.dst, `\ufffd`...)
				c.start = i + size
			case r == '\u2028' || r == '\u2029':
				c.dst = append(c.dst, src[c.start:i]...)
				c.dst = append(c.dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
				c.start = i + size
			}
			i += size
		}
	}
}

func isHex(b byte) bool { return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F' }

func (c *compactor) number() bool {
	n := numberLen(c.src[c.i:])
	if n <= 0 {
		return false
	}
	c.i += n
	return true
}
