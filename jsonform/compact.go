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

// What appendValidCompact expects next.
const (
	wantValue = iota // a value
	wantKey          // an object member's key, then its colon
	wantNext         // after a value: a comma, its container's end, or the end of src
)

// appendValidCompact appends src without insignificant white space and
// reports whether src is valid JSON as json.Valid does, in one pass over
// src (json.Valid then a compaction took twice as long). Inside strings it
// replaces invalid UTF-8 with \ufffd and escapes U+2028 and U+2029, which
// json.Valid lets through. dst's spare capacity may be written to: on
// false, and on true up to 16 bytes past the end of what it returns
// (skipSpace).
//
// It walks src in one loop with a stack of the open containers' closing
// brackets, not a call per token: a payload of short tokens spent most
// of its time in calls (BenchmarkAppendValidCompact).
func appendValidCompact(dst, src []byte) ([]byte, bool) {
	var open [32]byte
	stack := open[:0] // the closing bracket of each open container, innermost last
	out := dst
	n := len(src)
	i, start := 0, 0 // src[start:i] is still to be copied to out
	want := wantValue
	for {
		if i < n && src[i] <= ' ' {
			out, i = skipSpace(out, src, start, i)
			start = i
		}
		switch want {
		case wantValue:
			if i >= n {
				return dst, false
			}
			switch b := src[i]; b {
			case '{', '[':
				if len(stack) == maxDepth {
					return dst, false
				}
				end := byte(']')
				if b == '{' {
					end, want = '}', wantKey
				}
				i++
				if i < n && src[i] <= ' ' {
					out, i = skipSpace(out, src, start, i)
					start = i
				}
				if i < n && src[i] == end {
					i++
					want = wantNext
				} else {
					stack = append(stack, end)
				}
			case '"':
				var ok bool
				if out, i, start, ok = scanString(out, src, i, start); !ok {
					return dst, false
				}
				want = wantNext
			case 't', 'f', 'n':
				l := "null"
				switch b {
				case 't':
					l = "true"
				case 'f':
					l = "false"
				}
				if n-i < len(l) || string(src[i:i+len(l)]) != l {
					return dst, false
				}
				i += len(l)
				want = wantNext
			default:
				if b != '-' && !isDigit(b) {
					return dst, false
				}
				l := numberLen(src[i:])
				if l < 0 {
					return dst, false
				}
				i += l
				want = wantNext
			}
		case wantKey:
			if i >= n || src[i] != '"' {
				return dst, false
			}
			var ok bool
			if out, i, start, ok = scanString(out, src, i, start); !ok {
				return dst, false
			}
			if i < n && src[i] <= ' ' {
				out, i = skipSpace(out, src, start, i)
				start = i
			}
			if i >= n || src[i] != ':' {
				return dst, false
			}
			i++
			want = wantValue
		default: // wantNext
			if len(stack) == 0 {
				if i != n {
					return dst, false
				}
				return append(out, src[start:]...), true
			}
			if i >= n {
				return dst, false
			}
			switch end := stack[len(stack)-1]; src[i] {
			case ',':
				i++
				want = wantValue
				if end == '}' {
					want = wantKey
				}
			case end:
				i++
				stack = stack[:len(stack)-1]
			default:
				return dst, false
			}
		}
	}
}

// skipSpace appends src[start:i] to out and returns the index of the
// first byte from i on that is not white space, dropping the white space.
// A run of up to 16 bytes, the usual one between two spaces of a payload
// written with a space after each ':' and ',', is copied as one 16-byte
// block when out has the room and src the bytes: about a fifth of the
// time a compaction took went to appends of such runs
// (BenchmarkAppendValidCompact). The block's tail lands in out's spare
// capacity, which later bytes overwrite or the caller never sees.
func skipSpace(out, src []byte, start, i int) ([]byte, int) {
	if w := len(out); i-start <= 16 && len(src)-start >= 16 && cap(out)-w >= 16 {
		*(*[16]byte)(out[w : w+16]) = [16]byte(src[start : start+16])
		out = out[:w+i-start]
	} else {
		out = append(out, src[start:i]...)
	}
	for i < len(src) && isSpace(src[i]) {
		i++
	}
	return out, i
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// scanString steps over the string at src[i] (its opening quote), replacing
// invalid UTF-8 with \ufffd and escaping U+2028 and U+2029; it returns out,
// the index after the closing quote and the new start of what is still to
// be copied.
func scanString(out, src []byte, i, start int) ([]byte, int, int, bool) {
	i++ // '"'
	for {
		for i < len(src) && plain[src[i]] {
			i++
		}
		if i >= len(src) {
			return out, i, start, false
		}
		switch b := src[i]; {
		case b == '"':
			return out, i + 1, start, true
		case b == '\\':
			if i+1 >= len(src) {
				return out, i, start, false
			}
			switch src[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(src)-i < 6 || !isHex(src[i+2]) || !isHex(src[i+3]) || !isHex(src[i+4]) || !isHex(src[i+5]) {
					return out, i, start, false
				}
				i += 6
			default:
				return out, i, start, false
			}
		case b < 0x20:
			return out, i, start, false
		default:
			r, size := decodeRune(src[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				out = append(out, src[start:i]...)
				out = append(out, `\ufffd`...)
				start = i + size
			case r == '\u2028' || r == '\u2029':
				out = append(out, src[start:i]...)
				out = append(out, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
				start = i + size
			}
			i += size
		}
	}
}

func isHex(b byte) bool { return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F' }
