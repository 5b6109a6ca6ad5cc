package jsonform

import (
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldgo/herald/internal/uuidtext"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped exactly as encoding/json
// escapes it with HTML escaping off (json.Encoder.SetEscapeHTML(false)):
// `"` and `\` are escaped, control characters as \b \f \n \r \t or \u00XX,
// U+2028 and U+2029 as \u2028 and \u2029, and each byte of invalid UTF-8
// becomes \ufffd, so the result is always valid UTF-8.
func AppendString(dst []byte, s string) []byte {
	return appendString(dst, s)
}

func appendString[T ~string | ~[]byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := decodeRune(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid in JSON but end a line in JavaScript;
		// encoding/json escapes them unconditionally, and so do we.
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func decodeRune[T ~string | ~[]byte](s T) (rune, int) {
	// Converting at most utf8.UTFMax bytes keeps the conversion on the stack.
	n := min(len(s), utf8.UTFMax)
	return utf8.DecodeRuneInString(string(s[:n]))
}

// needsEscape reports whether s holds a byte that appendString would not
// copy as is.
func needsEscape(s []byte) bool {
	for _, b := range s {
		if b < 0x20 || b == '"' || b == '\\' || b >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// appendJSON appends raw, which a method produced as JSON, after checking
// that it is valid; it is compacted, and its strings made valid UTF-8 the
// way appendString makes them.
func appendJSON(dst, raw []byte, t reflect.Type, what string) ([]byte, *Error) {
	out, ok := appendValidCompact(slices.Grow(dst, len(raw)), raw)
	if !ok {
		return dst, newError(t, what+" is not valid JSON")
	}
	return out, nil
}

// appendFloat appends f like encoding/json does (ES6 number formatting:
// exponent form below 1e-6 and from 1e21 on), and non-finite values per
// mode.
func appendFloat(st state, dst []byte, f float64, bits int, t reflect.Type) ([]byte, *Error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return appendNonFinite(st, dst, math.IsNaN(f), f > 0, t)
	}
	abs := math.Abs(f)
	format := byte('f')
	// float32 cut-offs must be compared as float32 to be exact.
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

// appendNonFinite writes NaN or ±Inf in field mode and rejects it in strict
// mode.
func appendNonFinite(st state, dst []byte, nan, positive bool, t reflect.Type) ([]byte, *Error) {
	if st.mode == Field {
		switch {
		case nan:
			return append(dst, `"NaN"`...), nil
		case positive:
			return append(dst, `"Infinity"`...), nil
		default:
			return append(dst, `"-Infinity"`...), nil
		}
	}
	switch {
	case nan:
		return dst, newError(t, "NaN is not a JSON number")
	case positive:
		return dst, newError(t, "+Inf is not a JSON number")
	default:
		return dst, newError(t, "-Inf is not a JSON number")
	}
}

// appendTime appends t, quoted, in RFC 3339 with its offset and fractional
// seconds, if any.
func appendTime(dst []byte, t time.Time) ([]byte, *Error) {
	out, err := appendTimeText(append(dst, '"'), t)
	if err != nil {
		return dst, err
	}
	return append(out, '"'), nil
}

// appendTimeText appends t in RFC 3339 (time.RFC3339Nano). Its AppendText
// rejects what RFC 3339 cannot say: a year outside 0..9999, an offset of a
// day or more.
func appendTimeText(dst []byte, t time.Time) ([]byte, *Error) {
	out, err := t.AppendText(dst)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "Time.AppendText: ")
		return dst, newError(timeType, "time has no RFC 3339 form: "+msg)
	}
	return out, nil
}

// appendDuration appends d in seconds, exactly: 1500ms is 1.5, 1ns 0.000000001.
func appendDuration(dst []byte, d time.Duration) []byte {
	u := uint64(d)
	if d < 0 {
		dst = append(dst, '-')
		u = -u
	}
	dst = strconv.AppendUint(dst, u/1e9, 10)
	frac := u % 1e9
	if frac == 0 {
		return dst
	}
	var buf [9]byte
	for i := 8; i >= 0; i-- {
		buf[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := 9
	for buf[n-1] == '0' {
		n--
	}
	dst = append(dst, '.')
	return append(dst, buf[:n]...)
}

// appendUUID appends the canonical text of u, quoted.
func appendUUID(dst []byte, u [16]byte) []byte {
	dst = append(dst, '"')
	dst = uuidtext.Append(dst, u)
	return append(dst, '"')
}

// isUUIDText reports whether s is the canonical text of u, in either case.
func isUUIDText(s string, u [16]byte) bool {
	if len(s) != 36 {
		return false
	}
	var buf [36]byte
	want := uuidtext.Append(buf[:0], u)
	for i := range want {
		c := s[i]
		if 'A' <= c && c <= 'F' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// appendRawMessage appends raw JSON after validating it; empty is null.
func appendRawMessage(dst []byte, raw []byte) ([]byte, *Error) {
	if len(raw) == 0 {
		return append(dst, "null"...), nil
	}
	return appendJSON(dst, raw, rawMessageType, "json.RawMessage")
}

// appendNumber appends a json.Number after checking it is a JSON number;
// the empty Number is 0, as in encoding/json.
func appendNumber(dst []byte, n string, t reflect.Type) ([]byte, *Error) {
	if n == "" {
		return append(dst, '0'), nil
	}
	if !isJSONNumber(n) {
		return dst, newError(t, "json.Number "+strconv.Quote(n)+" is not a JSON number")
	}
	return append(dst, n...), nil
}

// isJSONNumber reports whether s is a number in JSON's grammar.
func isJSONNumber(s string) bool { return numberLen(s) == len(s) }

// numberLen returns the length of the number in JSON's grammar at the
// start of s, or -1 when s does not start with one: no digit where the
// grammar needs one (after '-', '.', 'e' and its sign).
func numberLen[T ~string | ~[]byte](s T) int {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i >= len(s):
		return -1
	case s[i] == '0':
		i++
	case '1' <= s[i] && s[i] <= '9':
		i = digitsEnd(s, i+1)
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		if i+1 >= len(s) || !isDigit(s[i+1]) {
			return -1
		}
		i = digitsEnd(s, i+1)
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return -1
		}
		i = digitsEnd(s, i)
	}
	return i
}

// digitsEnd returns the index of the first byte of s from i on that is not
// a decimal digit.
func digitsEnd[T ~string | ~[]byte](s T, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// PostgreSQL NUMERIC holds up to 131072 digits before the decimal point and
// 16383 after it. A decimal whose exponent goes beyond that is rejected
// rather than written out: decimal.New(1, 2e9) would otherwise be two
// gigabytes of zeros.
const (
	maxDecimalExp = 131072
	minDecimalExp = -16383
)

// appendDecimal appends the text of the decimal coefficient·10^exp, keeping
// its scale: 1250·10^-2 is 12.50, 0·10^-2 0.00, 12·10^3 12000. digits is the
// absolute value of the coefficient in decimal. The caller quotes it.
func appendDecimal(dst []byte, neg bool, digits []byte, exp int32, t reflect.Type) ([]byte, *Error) {
	zero := len(digits) == 1 && digits[0] == '0'
	if zero && exp >= 0 {
		return append(dst, '0'), nil
	}
	if exp > maxDecimalExp || exp < minDecimalExp {
		return dst, newError(t, "decimal exponent "+strconv.Itoa(int(exp))+
			" is beyond the range of PostgreSQL NUMERIC (131072 integer, 16383 fractional digits)")
	}
	if neg && !zero {
		dst = append(dst, '-')
	}
	switch {
	case exp >= 0:
		dst = append(dst, digits...)
		for range exp {
			dst = append(dst, '0')
		}
	default:
		scale := int(-exp)
		if len(digits) > scale {
			dst = append(dst, digits[:len(digits)-scale]...)
			dst = append(dst, '.')
			dst = append(dst, digits[len(digits)-scale:]...)
		} else {
			dst = append(dst, '0', '.')
			for range scale - len(digits) {
				dst = append(dst, '0')
			}
			dst = append(dst, digits...)
		}
	}
	return dst, nil
}

// appendDecimalInt64 is appendDecimal for a coefficient that fits an int64,
// without allocating.
func appendDecimalInt64(dst []byte, c int64, exp int32, t reflect.Type) ([]byte, *Error) {
	u := uint64(c)
	if c < 0 {
		u = -u
	}
	var buf [20]byte
	return appendDecimal(dst, c < 0, strconv.AppendUint(buf[:0], u, 10), exp, t)
}

// appendDecimalBig is appendDecimal for a big coefficient; nil is zero.
func appendDecimalBig(dst []byte, c *big.Int, exp int32, t reflect.Type) ([]byte, *Error) {
	if c == nil || c.IsInt64() {
		var i int64
		if c != nil {
			i = c.Int64()
		}
		return appendDecimalInt64(dst, i, exp, t)
	}
	digits := new(big.Int).Abs(c).Append(nil, 10)
	return appendDecimal(dst, c.Sign() < 0, digits, exp, t)
}
