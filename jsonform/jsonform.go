package jsonform

import (
	"bytes"
	"database/sql/driver"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Mode says how values without a JSON number form are treated.
type Mode int

const (
	// Strict is for enqueued payloads and headers: NaN and ±Inf are errors,
	// like every other value without a JSON form. Any Mode value other than
	// Field acts as Strict.
	Strict Mode = iota
	// Field is for captured database column values: a column may hold NaN
	// or ±Inf, so they become the strings "NaN", "Infinity" and "-Infinity";
	// a value whose own form fails (a failing MarshalJSON or MarshalText, a
	// net.IP of 9 bytes) gets the form of what database/sql stores for it
	// (driver.DefaultParameterConverter: bytes as base64, a string kind as
	// the string), and is an error only when that has none either; a
	// time.Duration is the int64 nanoseconds its column stores, not seconds.
	Field
)

// String returns "strict" or "field".
func (m Mode) String() string {
	if m == Field {
		return "field"
	}
	if m == Strict {
		return "strict"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ErrUnsupported is matched with errors.Is for every value that has no JSON
// form. It is always wrapped by an [*Error] saying where and what.
var ErrUnsupported = errors.New("herald/jsonform: value has no JSON form")

// MaxDepth is how deeply values may nest (pointers, interfaces, maps,
// slices, arrays and structs each count one level). A deeper value, which
// is what a pointer or map cycle looks like, is rejected with an [*Error].
const MaxDepth = 1000

// Error says where a value without a JSON form was met and what it was.
// It unwraps to [ErrUnsupported]; when a method of the value failed
// (MarshalJSON, MarshalText, Value), errors.Is and errors.As also see that
// method's error, which is kept in Err.
type Error struct {
	// Path is where the value sits: object keys as ".key", list indices as
	// "[3]", keys of maps that encode as pair lists as "[key JSON]", under
	// the path given to MarshalPath or Append ("payload.items[3].price").
	// It is empty for the root of Marshal.
	Path string
	// Type is the Go type of the value at Path ("complex128", "chan int").
	Type string
	// Reason says why the value has no JSON form ("unsupported type
	// complex128", "NaN is not a JSON number").
	Reason string
	// Err is the error returned by the value's own method (MarshalJSON,
	// MarshalText, Value), or nil.
	Err error

	// segs holds the path, innermost segment first, while the error travels
	// up through the containers; finish turns it into Path. Building the
	// path only on the way out keeps the success path free of allocations.
	segs []segment
	// ownForm: the value's own form failed (its MarshalJSON or MarshalText,
	// a net.IP of a bad length); in Field mode the root value then gets
	// the form of what database/sql stores for it.
	ownForm bool
}

// Error returns "herald/jsonform: <path>: <reason>". A path longer than
// 256 bytes (a cycle's) is shortened in the middle with "…"; Path keeps it
// whole.
func (e *Error) Error() string {
	if e.Path == "" {
		return "herald/jsonform: " + e.Reason
	}
	return "herald/jsonform: " + shortPath(e.Path) + ": " + e.Reason
}

func shortPath(p string) string {
	const head, tail = 128, 96
	if len(p) <= 256 {
		return p
	}
	i, j := head, len(p)-tail
	for i > 0 && !utf8.RuneStart(p[i]) {
		i--
	}
	for j < len(p) && !utf8.RuneStart(p[j]) {
		j++
	}
	return p[:i] + "…" + p[j:]
}

// Unwrap returns ErrUnsupported.
func (e *Error) Unwrap() error { return ErrUnsupported }

// Is reports whether the error of the value's failing method matches
// target, so that errors.Is sees through to it as well as to ErrUnsupported.
func (e *Error) Is(target error) bool {
	return e.Err != nil && errors.Is(e.Err, target)
}

// As finds the first error in Err's chain that matches target.
func (e *Error) As(target any) bool {
	return e.Err != nil && errors.As(e.Err, target)
}

type segKind uint8

const (
	segKey     segKind = iota // .key
	segIndex                  // [3]
	segBracket                // [key JSON]
)

type segment struct {
	kind  segKind
	index int
	key   string
}

func (e *Error) atKey(key string) *Error {
	e.segs = append(e.segs, segment{kind: segKey, key: key})
	return e
}

func (e *Error) atIndex(i int) *Error {
	e.segs = append(e.segs, segment{kind: segIndex, index: i})
	return e
}

func (e *Error) atBracket(key string) *Error {
	e.segs = append(e.segs, segment{kind: segBracket, key: key})
	return e
}

// finish builds Path from root and the segments gathered on the way up.
func (e *Error) finish(root string) {
	var b strings.Builder
	b.WriteString(root)
	for i := len(e.segs) - 1; i >= 0; i-- {
		s := e.segs[i]
		switch s.kind {
		case segKey:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		case segIndex:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		case segBracket:
			b.WriteByte('[')
			b.WriteString(s.key)
			b.WriteByte(']')
		}
	}
	e.Path = b.String()
	e.segs = nil
}

func newError(t reflect.Type, reason string) *Error {
	return &Error{Type: typeName(t), Reason: reason}
}

func unsupported(t reflect.Type) *Error {
	return newError(t, "unsupported type "+typeName(t))
}

func typeName(t reflect.Type) string {
	if t == nil {
		return "nil"
	}
	return t.String()
}

// Marshal returns the JSON form of v. Errors name paths from the root ("",
// "items[3].price").
func Marshal(v any, mode Mode) ([]byte, error) {
	return Append(nil, "", v, mode)
}

// MarshalPath returns the JSON form of v; errors name paths under path
// ("payload" gives "payload.items[3].price").
func MarshalPath(path string, v any, mode Mode) ([]byte, error) {
	return Append(nil, path, v, mode)
}

// Append appends the JSON form of v to dst and returns the extended slice.
// Errors name paths under path. On error it returns dst as it was.
// Append may use dst's spare capacity as scratch space: on error, and on
// success past the end of the slice it returns (up to 16 bytes: raw JSON
// is compacted in blocks). Append allocates only where a
// value's own methods, map key sorting beyond 32 keys, or reflection over
// maps and big numbers require it; common column values (strings, numbers,
// times, uuids, decimals that fit 18 digits, []byte, map[string]any, []any)
// are appended without allocating.
func Append(dst []byte, path string, v any, mode Mode) ([]byte, error) {
	n := len(dst)
	out, err := appendAny(state{mode: mode}, dst, v)
	if err != nil && mode == Field && err.ownForm && len(err.segs) == 0 {
		if sv, ok := storedValue(v); ok {
			if out, e := appendAny(state{mode: mode}, dst[:n], sv); e == nil {
				return out, nil
			}
		}
	}
	if err != nil {
		err.finish(path)
		return dst[:n], err
	}
	return out, nil
}

// storedValue returns what database/sql hands the driver for a column value
// whose own JSON form failed (a MarshalJSON or MarshalText that returns an
// error, a net.IP of 9 bytes): driver.DefaultParameterConverter's value
// ([]byte, string, int64, float64, bool or time.Time), when it is of
// another type than v. ok is false when database/sql would refuse v too,
// or would store v itself.
func storedValue(v any) (any, bool) {
	// database/sql follows pointers; a cycle of them must not recurse here.
	rv := reflect.ValueOf(v)
	for range MaxDepth {
		if !rv.IsValid() || rv.Kind() != reflect.Pointer {
			break
		}
		if _, ok := rv.Interface().(driver.Valuer); ok || rv.IsNil() {
			break
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() || rv.Kind() == reflect.Pointer {
		return nil, false
	}
	sv, err := driver.DefaultParameterConverter.ConvertValue(rv.Interface())
	if err != nil || sv == nil || reflect.TypeOf(sv) == rv.Type() {
		return nil, false
	}
	return sv, true
}

// Valid reports whether raw is valid JSON (json.Valid).
func Valid(raw []byte) bool { return json.Valid(raw) }

// state travels down the value by copy: the mode and how deep we are.
type state struct {
	mode  Mode
	depth int
}

// enter returns the state one level deeper, or an error naming t once the
// value nests beyond MaxDepth.
func (st state) enter(t reflect.Type) (state, *Error) {
	st.depth++
	if st.depth > MaxDepth {
		return st, newError(t, "too deep or cyclic: nesting exceeds "+strconv.Itoa(MaxDepth)+" levels")
	}
	return st, nil
}

var (
	float32Type      = reflect.TypeFor[float32]()
	float64Type      = reflect.TypeFor[float64]()
	mapStringAnyType = reflect.TypeFor[map[string]any]()
	sliceAnyType     = reflect.TypeFor[[]any]()
	timeType         = reflect.TypeFor[time.Time]()
	rawMessageType   = reflect.TypeFor[json.RawMessage]()
)

// appendAny is the entry for a dynamic value. The common column types are
// switched on directly, without reflection; everything else goes through
// the per-type encoders.
func appendAny(st state, dst []byte, x any) ([]byte, *Error) {
	switch x := x.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return appendString(dst, x), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case float64:
		return appendFloat(st, dst, x, 64, float64Type)
	case float32:
		return appendFloat(st, dst, float64(x), 32, float32Type)
	case []byte:
		if x == nil {
			return append(dst, "null"...), nil
		}
		return appendBase64(dst, x), nil
	case time.Time:
		return appendTime(dst, x)
	case uuid.UUID:
		return appendUUID(dst, x), nil
	case json.RawMessage:
		return appendRawMessage(dst, x)
	case map[string]any:
		return appendMapStringAny(st, dst, x)
	case []any:
		return appendSliceAny(st, dst, x)
	}
	v := reflect.ValueOf(x)
	return typeEncoder(v.Type())(st, dst, v)
}

func appendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// mapEntryAny is one key and value of a map[string]any, gathered to sort.
type mapEntryAny struct {
	key string
	val any
}

func appendMapStringAny(st state, dst []byte, m map[string]any) ([]byte, *Error) {
	if m == nil {
		return append(dst, "null"...), nil
	}
	st, err := st.enter(mapStringAnyType)
	if err != nil {
		return dst, err
	}
	// A row rarely has more than 32 columns: the entries then stay on the
	// stack.
	var buf [32]mapEntryAny
	entries := buf[:0]
	for k, v := range m {
		entries = append(entries, mapEntryAny{k, v})
	}
	slices.SortFunc(entries, func(a, b mapEntryAny) int { return strings.Compare(a.key, b.key) })
	dst = append(dst, '{')
	for i := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, entries[i].key)
		dst = append(dst, ':')
		if dst, err = appendAny(st, dst, entries[i].val); err != nil {
			return dst, err.atKey(entries[i].key)
		}
	}
	return append(dst, '}'), nil
}

func appendSliceAny(st state, dst []byte, s []any) ([]byte, *Error) {
	if s == nil {
		return append(dst, "null"...), nil
	}
	st, err := st.enter(sliceAnyType)
	if err != nil {
		return dst, err
	}
	dst = append(dst, '[')
	for i, x := range s {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = appendAny(st, dst, x); err != nil {
			return dst, err.atIndex(i)
		}
	}
	return append(dst, ']'), nil
}

// AppendScaled is Append in Field mode for a value of a decimal column
// declared with a scale (numeric(10,2): scale 2): a decimal whose JSON form
// is a string holding a number with fewer fractional digits than scale
// ("12.5", "0") is written with exactly scale of them ("12.50", "0.00"),
// as PostgreSQL returns the column. A value is never changed: one with
// more fractional digits ("1.005", which PostgreSQL would have rounded on
// the way in and SQLite stores as given) is written as it is. Any other
// form (null, a JSON number of a float or integer field, text that is not
// a number) is Append's.
func AppendScaled(dst []byte, path string, v any, scale int) ([]byte, error) {
	n := len(dst)
	out, err := Append(dst, path, v, Field)
	if err != nil || scale < 0 || scale > maxScale {
		return out, err
	}
	s := out[n:]
	if len(s) < 3 || s[0] != '"' || s[len(s)-1] != '"' || !plainDecimal(s[1:len(s)-1]) {
		return out, nil
	}
	digits := s[1 : len(s)-1]
	if bytes.ContainsAny(digits, "eE") {
		var r big.Rat
		if _, ok := r.SetString(string(digits)); !ok {
			return out, nil
		}
		t := r.FloatString(scale)
		if back, ok := new(big.Rat).SetString(t); !ok || back.Cmp(&r) != 0 {
			return out, nil // more digits than the scale: as it is
		}
		out = append(out[:n], '"')
		out = append(out, t...)
		return append(out, '"'), nil
	}
	frac := 0
	if i := bytes.IndexByte(digits, '.'); i >= 0 {
		frac = len(digits) - i - 1
	}
	if frac >= scale {
		return out, nil
	}
	out = out[:len(out)-1] // the closing quote
	if frac == 0 {
		out = append(out, '.')
	}
	for range scale - frac {
		out = append(out, '0')
	}
	return append(out, '"'), nil
}

// maxScale is NUMERIC's largest scale.
const maxScale = 16383

// plainDecimal reports whether b is a plain decimal number: an optional
// minus, digits, an optional fraction, an optional exponent of at most
// five digits.
func plainDecimal(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == start {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		f := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == f {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		e := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == e || i-e > 5 {
			return false
		}
	}
	return i == len(b)
}
