// Package pgform renders a column value in the JSON form of the column's
// declared database type, for the types whose stored text is a syntax of
// the database's own: arrays, ranges and multiranges, json and jsonb, and
// PostgreSQL's geometric types. Every other type is jsonform's business:
// [Handles] says which declared types are this package's.
//
// The forms (the table in jsonform's package doc and the README repeats
// them):
//
//   - arrays of any element type, any number of dimensions: JSON lists
//     (nested for each dimension), each element in its element type's form,
//     NULL elements null; explicit bounds ("[0:1]={1,2}") are dropped: a
//     list starts at its first element. box[]'s ';' delimiter is honoured.
//   - ranges (int4range, int8range, numrange, tsrange, tstzrange,
//     daterange): {"lower","upper","lower_inc","upper_inc","is_empty"},
//     an unbounded side null and not inclusive, the empty range
//     {"lower":null,"upper":null,"lower_inc":false,"upper_inc":false,
//     "is_empty":true}; the bounds in their subtype's form.
//   - multiranges: lists of ranges.
//   - json, jsonb: the JSON itself, compacted, whatever the Go field (a
//     string or []byte field holding JSON text is embedded, not quoted);
//     text that is not JSON (SQLite does not check a JSON column) stays a
//     string.
//   - point: a GeoJSON Point {"type":"Point","coordinates":[x,y]}; lseg
//     and an open path: a LineString; polygon and a closed path: a Polygon
//     of one ring, closed (its first point repeated last).
//   - box: {"high":[x,y],"low":[x,y]}; circle: {"center":[x,y],"radius":r};
//     line (Ax + By + C = 0): {"a":A,"b":B,"c":C}.
//   - MySQL's and MariaDB's spatial types (point, linestring, polygon, the
//     multi… types, geometrycollection), read as the server's SRID-prefixed
//     WKB: GeoJSON (Point, LineString, Polygon, MultiPoint,
//     MultiLineString, MultiPolygon, GeometryCollection), the SRID dropped.
//     A column declared GEOMETRY (any of them) is GeoJSON when its value
//     is MySQL's geometry bytes; any other value (PostGIS declares that
//     name too) keeps the form of its Go value (jsonform), as a type this
//     package does not handle.
//
// Elements and bounds: integers are JSON numbers; float4/float8 numbers,
// NaN and ±Infinity the strings "NaN", "Infinity", "-Infinity"; numeric
// a string holding the number as stored ("12.50"); booleans true/false;
// timestamptz RFC 3339 with its offset, timestamp RFC 3339 in UTC (as the
// drivers read a timestamp column), "infinity" as it is; bytea base64;
// json/jsonb embedded; every other element type (text, uuid, date, inet,
// enums, …) its text as a string.
package pgform

import (
	"bytes"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/jsonform"
)

// kind is what a declared type's form is.
type kind uint8

const (
	kNone kind = iota
	kInt
	kFloat
	kNumeric
	kBool
	kJSON
	kTimestamptz
	kTimestamp
	kBytea
	kText
	kRange
	kMultirange
	kPoint
	kLseg
	kPath
	kPolygon
	kBox
	kCircle
	kLine
	kSpatial  // MySQL's spatial types without a PostgreSQL namesake (linestring, multipolygon, …)
	kGeometry // geometry: MySQL's any-shape type, and PostGIS's
)

// Type is a declared column type parsed: its base type and how many array
// dimensions it has.
type Type struct {
	Base string // lower case, modifiers dropped: "int4", "timestamp with time zone"
	Dims int    // array dimensions: "int[][]" 2, "_int4" 1
	kind kind
}

// Parse reads a declared column type ("text[]", "INTEGER ARRAY",
// "numeric(10,2)[][]", "_int4", "tstzrange", "JSONB").
func Parse(decl string) Type {
	s := strings.ToLower(strings.TrimSpace(decl))
	// Drop type modifiers: varchar(20), numeric(10,2), timestamp(3) with time zone.
	for {
		i := strings.IndexByte(s, '(')
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i:], ')')
		if j < 0 {
			break
		}
		s = s[:i] + s[i+j+1:]
	}
	s = strings.Join(strings.Fields(s), " ")
	t := Type{}
	for {
		switch {
		case strings.HasSuffix(s, "]"):
			i := strings.LastIndexByte(s, '[')
			if i < 0 {
				return Type{Base: s}
			}
			s = strings.TrimSpace(s[:i])
			t.Dims++
			continue
		case strings.HasSuffix(s, " array"):
			s = strings.TrimSuffix(s, " array")
			t.Dims++
			continue
		}
		break
	}
	if t.Dims == 0 && strings.HasPrefix(s, "_") && len(s) > 1 {
		s, t.Dims = s[1:], 1
	}
	t.Base = s
	t.kind = kindOf(s)
	if t.kind == kGeometry && t.Dims > 0 {
		t.kind = kText // PostGIS's geometry[]: an array of text, as before
	}
	return t
}

func kindOf(base string) kind {
	switch base {
	case "smallint", "int2", "integer", "int", "int4", "bigint", "int8", "smallserial", "serial", "bigserial",
		"serial2", "serial4", "serial8", "oid":
		return kInt
	case "real", "float4", "double precision", "float8", "float":
		return kFloat
	case "numeric", "decimal":
		return kNumeric
	case "boolean", "bool":
		return kBool
	case "json", "jsonb":
		return kJSON
	case "timestamptz", "timestamp with time zone":
		return kTimestamptz
	case "timestamp", "timestamp without time zone":
		return kTimestamp
	case "bytea":
		return kBytea
	case "int4range", "int8range", "numrange", "tsrange", "tstzrange", "daterange":
		return kRange
	case "int4multirange", "int8multirange", "nummultirange", "tsmultirange", "tstzmultirange", "datemultirange":
		return kMultirange
	case "point":
		return kPoint
	case "lseg":
		return kLseg
	case "path":
		return kPath
	case "polygon":
		return kPolygon
	case "box":
		return kBox
	case "circle":
		return kCircle
	case "line":
		return kLine
	case "linestring", "multipoint", "multilinestring", "multipolygon", "geometrycollection", "geomcollection":
		return kSpatial
	case "geometry":
		// PostGIS declares that name too: only MySQL's geometry bytes have
		// this package's form (Append).
		return kGeometry
	}
	return kText
}

// Handles reports whether values of the declared type have a form of this
// package's: an array, a range or multirange, json or jsonb, a geometric
// type. Every other declared type is rendered by jsonform from the Go
// value.
func Handles(decl string) bool { return Parse(decl).handled() }

func (t Type) handled() bool {
	if t.Dims > 0 {
		return true
	}
	switch t.kind {
	case kJSON, kRange, kMultirange, kPoint, kLseg, kPath, kPolygon, kBox, kCircle, kLine, kSpatial, kGeometry:
		return true
	}
	return false
}

// subtype is a range's (or multirange's) bound type.
func subtype(base string) kind {
	switch {
	case strings.HasPrefix(base, "int"):
		return kInt
	case strings.HasPrefix(base, "num"):
		return kNumeric
	case strings.HasPrefix(base, "tstz"):
		return kTimestamptz
	case strings.HasPrefix(base, "ts"):
		return kTimestamp
	}
	return kText // date
}

// Append appends v, a value of a column declared as decl, in the
// declared type's form (see the package doc). v is what the ORM holds:
// a driver.Valuer (pq.StringArray, datatypes.JSON) is rendered from the
// value it gives; text (string, []byte) is read in the database's syntax
// for the type; a Go list for an array column is rendered element by
// element; anything else, and every type Handles refuses, is jsonform's
// (Field mode). path names the column in errors.
func Append(dst []byte, path, decl string, v any) ([]byte, error) {
	t := Parse(decl)
	if !t.handled() || (t.kind == kGeometry && !holdsMySQLGeometry(v)) {
		return jsonform.Append(dst, path, v, jsonform.Field)
	}
	return appendValue(dst, path, t, v)
}

// holdsMySQLGeometry reports whether v (through Valuers and pointers, as
// appendValue reads it) is text or bytes holding MySQL's geometry bytes.
func holdsMySQLGeometry(v any) bool {
	for range 8 {
		if v == nil {
			return false
		}
		if vr, ok := v.(driver.Valuer); ok {
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
				return false
			}
			x, err := vr.Value()
			if err != nil {
				return false
			}
			v = x
			continue
		}
		rv := reflect.ValueOf(v)
		switch {
		case rv.Kind() == reflect.Pointer:
			if rv.IsNil() {
				return false
			}
			v = rv.Elem().Interface()
			continue
		case rv.Kind() == reflect.String:
			return isMySQLGeometry(rv.String())
		case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
			return isMySQLGeometry(string(rv.Bytes()))
		}
		return false
	}
	return false
}

func appendValue(dst []byte, path string, t Type, v any) ([]byte, error) {
	for range 8 { // a Valuer giving a Valuer, pointers to pointers: a few levels
		if v == nil {
			return append(dst, "null"...), nil
		}
		if vr, ok := v.(driver.Valuer); ok {
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
				return append(dst, "null"...), nil
			}
			x, err := vr.Value()
			if err != nil {
				return dst, fmt.Errorf("herald/pgform: %s: Value: %w", path, err)
			}
			v = x
			continue
		}
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Pointer {
			if rv.IsNil() {
				return append(dst, "null"...), nil
			}
			v = rv.Elem().Interface()
			continue
		}
		break
	}
	switch x := v.(type) {
	case string:
		return appendText(dst, path, t, x)
	case []byte:
		return appendText(dst, path, t, string(x))
	}
	rv := reflect.ValueOf(v)
	// A named string or byte type (type WKT string; json.RawMessage) holds
	// text as a string does: a row read back into the model's field type
	// holds the database's text (MySQL's WKB for a spatial column).
	switch {
	case rv.Kind() == reflect.String:
		return appendText(dst, path, t, rv.String())
	case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
		if rv.IsNil() {
			return append(dst, "null"...), nil
		}
		return appendText(dst, path, t, string(rv.Bytes()))
	}
	if t.Dims > 0 {
		switch rv.Kind() {
		case reflect.Slice, reflect.Array:
			if rv.Kind() == reflect.Slice && rv.IsNil() {
				return append(dst, "null"...), nil
			}
			elem := Type{Base: t.Base, Dims: t.Dims - 1, kind: t.kind}
			dst = append(dst, '[')
			for i := range rv.Len() {
				if i > 0 {
					dst = append(dst, ',')
				}
				var err error
				if dst, err = appendValue(dst, path+"["+strconv.Itoa(i)+"]", elem, rv.Index(i).Interface()); err != nil {
					return dst, err
				}
			}
			return append(dst, ']'), nil
		}
	}
	return jsonform.Append(dst, path, v, jsonform.Field)
}

// appendText appends s, the database's text of a value of type t.
func appendText(dst []byte, path string, t Type, s string) ([]byte, error) {
	if t.Dims > 0 {
		return appendArray(dst, path, t, s)
	}
	switch t.kind {
	case kPoint, kLseg, kPath, kPolygon, kBox, kCircle, kLine, kSpatial, kGeometry:
		if isMySQLGeometry(s) {
			out, err := appendMySQLGeometry(dst, s)
			if err != nil {
				return dst, fmt.Errorf("herald/pgform: %s: %s value (MySQL geometry): %w", path, t.Base, err)
			}
			return out, nil
		}
		if t.kind == kSpatial { // not MySQL's format (PostGIS's hex EWKB, WKT): as it is
			return jsonform.AppendString(dst, s), nil
		}
	}
	out, err := appendScalar(dst, t.Base, t.kind, s)
	if err != nil {
		return dst, fmt.Errorf("herald/pgform: %s: %s value %q: %w", path, t.Base, short(s), err)
	}
	return out, nil
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// appendScalar appends the non-NULL text s of a value of base type k.
func appendScalar(dst []byte, base string, k kind, s string) ([]byte, error) {
	switch k {
	case kInt:
		s = strings.TrimSpace(s)
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return dst, fmt.Errorf("not an integer")
		}
		return append(dst, s...), nil
	case kFloat:
		return appendFloat(dst, s, base == "real" || base == "float4")
	case kBool:
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "t", "true", "1", "y", "yes", "on":
			return append(dst, "true"...), nil
		case "f", "false", "0", "n", "no", "off":
			return append(dst, "false"...), nil
		}
		return dst, fmt.Errorf("not a boolean")
	case kJSON:
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(s)); err != nil {
			return jsonform.AppendString(dst, s), nil //nolint:nilerr // SQLite keeps any text in a JSON column: not JSON, its form is the text
		}
		return jsonform.Append(dst, "", json.RawMessage(b.Bytes()), jsonform.Field)
	case kTimestamptz:
		if tm, ok := parseTime(s, true); ok {
			return jsonform.AppendString(dst, tm.Format(time.RFC3339Nano)), nil
		}
		return jsonform.AppendString(dst, s), nil // infinity, BC dates
	case kTimestamp:
		if tm, ok := parseTime(s, false); ok {
			return jsonform.AppendString(dst, tm.Format(time.RFC3339Nano)), nil
		}
		return jsonform.AppendString(dst, s), nil
	case kBytea:
		if h, ok := strings.CutPrefix(s, `\x`); ok {
			b, err := hex.DecodeString(h)
			if err != nil {
				return dst, fmt.Errorf("bad hex")
			}
			return jsonform.Append(dst, "", b, jsonform.Field)
		}
		return jsonform.Append(dst, "", []byte(s), jsonform.Field)
	case kRange:
		return appendRange(dst, subtype(base), strings.TrimSpace(s))
	case kMultirange:
		return appendMultirange(dst, subtype(base), strings.TrimSpace(s))
	case kPoint, kLseg, kPath, kPolygon, kBox, kCircle, kLine:
		return appendGeometry(dst, k, strings.TrimSpace(s))
	}
	return jsonform.AppendString(dst, s), nil
}

func appendFloat(dst []byte, s string, single bool) ([]byte, error) {
	s = strings.TrimSpace(s)
	var f float64
	switch strings.ToLower(s) {
	case "nan":
		f = math.NaN()
	case "infinity", "inf", "+infinity":
		f = math.Inf(1)
	case "-infinity", "-inf":
		f = math.Inf(-1)
	default:
		bits := 64
		if single {
			bits = 32
		}
		var err error
		if f, err = strconv.ParseFloat(s, bits); err != nil {
			return dst, fmt.Errorf("not a number")
		}
		if single {
			return jsonform.Append(dst, "", float32(f), jsonform.Field)
		}
	}
	return jsonform.Append(dst, "", f, jsonform.Field)
}

var (
	zoned = []string{
		"2006-01-02 15:04:05.999999999Z07:00:00",
		"2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07",
		time.RFC3339Nano,
	}
	unzoned = []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"}
)

// parseTime reads PostgreSQL's ISO output of a timestamptz (with its
// offset) or a timestamp (as UTC).
func parseTime(s string, zone bool) (time.Time, bool) {
	s = strings.TrimSpace(s)
	layouts := unzoned
	if zone {
		layouts = zoned
	}
	for _, l := range layouts {
		var tm time.Time
		var err error
		if zone {
			tm, err = time.Parse(l, s)
		} else {
			tm, err = time.ParseInLocation(l, s, time.UTC)
		}
		if err == nil {
			return tm, true
		}
	}
	return time.Time{}, false
}

// appendArray reads PostgreSQL's array text: an optional bounds
// decoration ("[1:2]="), then nested braces of elements separated by ','
// (';' for box), each quoted ("…" with backslash escapes) or bare, NULL
// (bare, any case) null.
func appendArray(dst []byte, path string, t Type, s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		i := strings.IndexByte(s, '=')
		if i < 0 {
			return dst, fmt.Errorf("herald/pgform: %s: %s[] value %q: bounds without '='", path, t.Base, short(s))
		}
		s = strings.TrimSpace(s[i+1:])
	}
	delim := byte(',')
	if t.kind == kBox {
		delim = ';'
	}
	p := &arrayParser{s: s, delim: delim, base: t.Base, kind: t.kind}
	out, err := p.list(dst)
	if err == nil {
		p.skipSpace()
		if p.i != len(p.s) {
			err = fmt.Errorf("text after the array")
		}
	}
	if err != nil {
		return dst, fmt.Errorf("herald/pgform: %s: %s[] value %q: %w", path, t.Base, short(s), err)
	}
	return out, nil
}

type arrayParser struct {
	s     string
	i     int
	delim byte
	base  string
	kind  kind
}

func (p *arrayParser) skipSpace() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *arrayParser) list(dst []byte) ([]byte, error) {
	p.skipSpace()
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return dst, fmt.Errorf("want '{' at %d", p.i)
	}
	p.i++
	dst = append(dst, '[')
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return append(dst, ']'), nil
	}
	for n := 0; ; n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		p.skipSpace()
		var err error
		switch {
		case p.i < len(p.s) && p.s[p.i] == '{':
			dst, err = p.list(dst)
		case p.i < len(p.s) && p.s[p.i] == '"':
			var el string
			if el, err = p.quoted(); err == nil {
				dst, err = appendScalar(dst, p.base, p.kind, el)
			}
		default:
			start := p.i
			for p.i < len(p.s) && p.s[p.i] != p.delim && p.s[p.i] != '}' {
				p.i++
			}
			el := strings.TrimSpace(p.s[start:p.i])
			if strings.EqualFold(el, "NULL") {
				dst = append(dst, "null"...)
			} else {
				dst, err = appendScalar(dst, p.base, p.kind, el)
			}
		}
		if err != nil {
			return dst, err
		}
		p.skipSpace()
		if p.i >= len(p.s) {
			return dst, fmt.Errorf("unterminated array")
		}
		switch p.s[p.i] {
		case '}':
			p.i++
			return append(dst, ']'), nil
		case p.delim:
			p.i++
		default:
			return dst, fmt.Errorf("unexpected %q at %d", p.s[p.i], p.i)
		}
	}
}

// quoted reads a double-quoted element, backslash escaping any byte.
func (p *arrayParser) quoted() (string, error) {
	p.i++ // the opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch c {
		case '\\':
			if p.i+1 >= len(p.s) {
				return "", fmt.Errorf("unterminated escape")
			}
			b.WriteByte(p.s[p.i+1])
			p.i += 2
		case '"':
			p.i++
			return b.String(), nil
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", fmt.Errorf("unterminated quoted element")
}

// appendRange reads a range's text: "empty", or [ or ( , lower , upper ,
// ] or ); a bound may be quoted, an absent bound is unbounded.
func appendRange(dst []byte, sub kind, s string) ([]byte, error) {
	if strings.EqualFold(s, "empty") {
		return append(dst, `{"lower":null,"upper":null,"lower_inc":false,"upper_inc":false,"is_empty":true}`...), nil
	}
	if len(s) < 3 || (s[0] != '[' && s[0] != '(') || (s[len(s)-1] != ']' && s[len(s)-1] != ')') {
		return dst, fmt.Errorf("not a range")
	}
	lowerInc, upperInc := s[0] == '[', s[len(s)-1] == ']'
	lo, hi, ok := splitBounds(s[1 : len(s)-1])
	if !ok {
		return dst, fmt.Errorf("not a range")
	}
	var err error
	dst = append(dst, `{"lower":`...)
	if dst, err = appendBound(dst, sub, lo); err != nil {
		return dst, err
	}
	dst = append(dst, `,"upper":`...)
	if dst, err = appendBound(dst, sub, hi); err != nil {
		return dst, err
	}
	dst = append(dst, `,"lower_inc":`...)
	dst = strconv.AppendBool(dst, lowerInc && lo != nil)
	dst = append(dst, `,"upper_inc":`...)
	dst = strconv.AppendBool(dst, upperInc && hi != nil)
	return append(dst, `,"is_empty":false}`...), nil
}

func appendBound(dst []byte, sub kind, b *string) ([]byte, error) {
	if b == nil {
		return append(dst, "null"...), nil
	}
	base := map[kind]string{kInt: "int8", kNumeric: "numeric", kTimestamptz: "timestamptz", kTimestamp: "timestamp"}[sub]
	return appendScalar(dst, base, sub, *b)
}

// splitBounds splits a range's inside at its comma outside quotes; an
// empty side is nil (unbounded).
func splitBounds(in string) (lo, hi *string, ok bool) {
	var parts []string
	var b strings.Builder
	quoted, seen := false, false
	anyOf := []bool{}
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == '\\' && i+1 < len(in):
			b.WriteByte(in[i+1])
			i++
			seen = true
		case c == '"':
			if quoted && i+1 < len(in) && in[i+1] == '"' { // "" inside quotes
				b.WriteByte('"')
				i++
			} else {
				quoted = !quoted
			}
			seen = true
		case c == ',' && !quoted:
			parts = append(parts, b.String())
			anyOf = append(anyOf, seen)
			b.Reset()
			seen = false
		default:
			b.WriteByte(c)
			seen = true
		}
	}
	parts = append(parts, b.String())
	anyOf = append(anyOf, seen)
	if len(parts) != 2 || quoted {
		return nil, nil, false
	}
	if anyOf[0] {
		lo = &parts[0]
	}
	if anyOf[1] {
		hi = &parts[1]
	}
	return lo, hi, true
}

// appendMultirange reads "{}" or "{range,range,…}".
func appendMultirange(dst []byte, sub kind, s string) ([]byte, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return dst, fmt.Errorf("not a multirange")
	}
	in := s[1 : len(s)-1]
	dst = append(dst, '[')
	n := 0
	for i := 0; i < len(in); {
		c := in[i]
		if c == ',' || c == ' ' {
			i++
			continue
		}
		start, quoted := i, false
		if strings.HasPrefix(strings.ToLower(in[i:]), "empty") {
			i += len("empty")
		} else {
			for i < len(in) {
				c := in[i]
				i++
				if c == '\\' {
					i++
					continue
				}
				if c == '"' {
					quoted = !quoted
				}
				if !quoted && (c == ']' || c == ')') && i-1 > start {
					break
				}
			}
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		var err error
		if dst, err = appendRange(dst, sub, in[start:min(i, len(in))]); err != nil {
			return dst, err
		}
	}
	return append(dst, ']'), nil
}

// appendGeometry reads a geometric type's text: its numbers, in order,
// and for a path whether it is open ("[…]") or closed ("(…)").
func appendGeometry(dst []byte, k kind, s string) ([]byte, error) {
	nums, err := numbers(s)
	if err != nil {
		return dst, err
	}
	pairs := func(want int) error {
		if len(nums)%2 != 0 || (want > 0 && len(nums) != 2*want) || len(nums) == 0 {
			return fmt.Errorf("want %d points, have %d numbers", want, len(nums))
		}
		return nil
	}
	appendPoints := func(dst []byte, closed bool) []byte {
		dst = append(dst, '[')
		for i := 0; i < len(nums); i += 2 {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendPoint(dst, nums[i], nums[i+1])
		}
		if closed && (len(nums) < 4 || nums[0] != nums[len(nums)-2] || nums[1] != nums[len(nums)-1]) {
			dst = append(dst, ',')
			dst = appendPoint(dst, nums[0], nums[1])
		}
		return append(dst, ']')
	}
	switch k {
	case kPoint:
		if err := pairs(1); err != nil {
			return dst, err
		}
		dst = append(dst, `{"type":"Point","coordinates":`...)
		return append(appendPoint(dst, nums[0], nums[1]), '}'), nil
	case kLseg:
		if err := pairs(2); err != nil {
			return dst, err
		}
		dst = append(dst, `{"type":"LineString","coordinates":`...)
		return append(appendPoints(dst, false), '}'), nil
	case kPath, kPolygon:
		if err := pairs(0); err != nil {
			return dst, err
		}
		if k == kPath && strings.HasPrefix(s, "[") {
			dst = append(dst, `{"type":"LineString","coordinates":`...)
			return append(appendPoints(dst, false), '}'), nil
		}
		dst = append(dst, `{"type":"Polygon","coordinates":[`...)
		return append(appendPoints(dst, true), ']', '}'), nil
	case kBox:
		if err := pairs(2); err != nil {
			return dst, err
		}
		dst = append(dst, `{"high":`...)
		dst = appendPoint(dst, nums[0], nums[1])
		dst = append(dst, `,"low":`...)
		return append(appendPoint(dst, nums[2], nums[3]), '}'), nil
	case kCircle:
		if len(nums) != 3 {
			return dst, fmt.Errorf("want a center and a radius")
		}
		dst = append(dst, `{"center":`...)
		dst = appendPoint(dst, nums[0], nums[1])
		dst = append(dst, `,"radius":`...)
		dst = appendNum(dst, nums[2])
		return append(dst, '}'), nil
	case kLine:
		if len(nums) != 3 {
			return dst, fmt.Errorf("want three coefficients")
		}
		dst = append(dst, `{"a":`...)
		dst = appendNum(dst, nums[0])
		dst = append(dst, `,"b":`...)
		dst = appendNum(dst, nums[1])
		dst = append(dst, `,"c":`...)
		dst = appendNum(dst, nums[2])
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("not a geometric type")
}

func appendPoint(dst []byte, x, y float64) []byte {
	dst = append(dst, '[')
	dst = appendNum(dst, x)
	dst = append(dst, ',')
	dst = appendNum(dst, y)
	return append(dst, ']')
}

func appendNum(dst []byte, f float64) []byte {
	out, err := jsonform.Append(dst, "", f, jsonform.Field)
	if err != nil { // cannot happen in Field mode
		return append(dst, "null"...)
	}
	return out
}

// numbers returns the numbers in a geometric value's text, skipping its
// punctuation ( ) [ ] { } < > , and spaces.
func numbers(s string) ([]float64, error) {
	var out []float64
	for i := 0; i < len(s); {
		switch s[i] {
		case '(', ')', '[', ']', '{', '}', '<', '>', ',', ' ':
			i++
			continue
		}
		j := i
		for j < len(s) && !strings.ContainsRune("()[]{}<>, ", rune(s[j])) {
			j++
		}
		f, err := strconv.ParseFloat(s[i:j], 64)
		if err != nil {
			switch strings.ToLower(s[i:j]) {
			case "nan":
				f = math.NaN()
			case "infinity", "inf":
				f = math.Inf(1)
			case "-infinity", "-inf":
				f = math.Inf(-1)
			default:
				return nil, fmt.Errorf("%q is not a number", s[i:j])
			}
		}
		out = append(out, f)
		i = j
	}
	return out, nil
}
