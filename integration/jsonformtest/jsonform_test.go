package jsonform_test

import (
	"bytes"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/heraldgo/herald/jsonform"
)

var errBoom = errors.New("boom")

type (
	status   string
	level    int
	celsius  float64
	blob     []byte
	byteLike byte

	orderUUID   [16]byte // named like a UUID
	digest      [16]byte // just 16 bytes
	stringerID  [16]byte // String gives the canonical text
	otherString [16]byte // String gives something else

	marshaler      struct{}
	badMarshaler   struct{}
	failMarshaler  struct{}
	ptrMarshaler   struct{ N int }
	rawJSON        []byte // like gorm.io/datatypes.JSON
	textOnly       struct{}
	jsonAndText    struct{}
	failText       struct{}
	failTextString string
	failJSONInt    int
	valuerAndText  struct{}
	failValuer     struct{}
	selfValuer     struct{}
	keyText        struct{ id int }
	collidingKey   struct{ id int }
	utf8Marshaler  struct{}
	ptrText        struct{ s string }
	ptrDecimal     struct{ c int64 }
	customZero     struct{ n int }
	cyclicNode     struct{ Next *cyclicNode }
	stamp          time.Time // defined as time.Time: no methods
	treeNode       struct {
		Name string     `json:"name"`
		Kids []treeNode `json:"kids,omitempty"`
	}
	pingValuer     struct{}
	pongValuer     struct{}
	selfPointer    *selfPointer
	unexportedBase struct{ Inner int }
)

func (s stringerID) String() string { return uuid.UUID(s).String() }
func (otherString) String() string  { return "not a uuid" }
func (marshaler) MarshalJSON() ([]byte, error) {
	return []byte(" { \"x\" : [1, 2],\n \"s\": \"a b\" } "), nil
}
func (badMarshaler) MarshalJSON() ([]byte, error)  { return []byte(`{"x":`), nil }
func (failMarshaler) MarshalJSON() ([]byte, error) { return nil, errBoom }
func (p *ptrMarshaler) MarshalJSON() ([]byte, error) {
	return []byte(`{"n":` + strconv.Itoa(p.N) + `}`), nil
}
func (j rawJSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}
func (textOnly) MarshalText() ([]byte, error)       { return []byte("text <form>"), nil }
func (jsonAndText) MarshalJSON() ([]byte, error)    { return []byte(`"from json"`), nil }
func (jsonAndText) MarshalText() ([]byte, error)    { return []byte("from text"), nil }
func (failText) MarshalText() ([]byte, error)       { return nil, errBoom }
func (failTextString) MarshalText() ([]byte, error) { return nil, errBoom }
func (failJSONInt) MarshalJSON() ([]byte, error)    { return nil, errBoom }
func (valuerAndText) Value() (driver.Value, error)  { return int64(7), nil }
func (valuerAndText) MarshalText() ([]byte, error)  { return []byte("from text"), nil }
func (failValuer) Value() (driver.Value, error)     { return nil, errBoom }
func (selfValuer) Value() (driver.Value, error)     { return selfValuer{}, nil }
func (k keyText) MarshalText() ([]byte, error)      { return []byte("k" + strconv.Itoa(k.id)), nil }
func (collidingKey) MarshalText() ([]byte, error)   { return []byte("same"), nil }
func (utf8Marshaler) MarshalJSON() ([]byte, error) {
	return []byte("[\"a\xffb\u2028\"]"), nil
}
func (p *ptrText) MarshalText() ([]byte, error) { return []byte("ptr:" + p.s), nil }
func (d *ptrDecimal) Coefficient() *big.Int     { return big.NewInt(d.c) }
func (*ptrDecimal) Exponent() int32             { return -3 }
func (z customZero) IsZero() bool               { return z.n == 42 }
func (pingValuer) Value() (driver.Value, error) { return pongValuer{}, nil }
func (pongValuer) Value() (driver.Value, error) { return pingValuer{}, nil }

// A struct with every json tag rule.
type (
	tagBase struct {
		ID     int    `json:"id"`
		Hidden string `json:"-"`
		Dash   string `json:"-,"` //nolint:staticcheck // SA5008: a field named "-" on purpose, as encoding/json allows
	}
	tagExtra struct {
		More int `json:"more"`
	}
	tagged struct {
		tagBase
		Name      string     `json:"name"`
		Note      string     `json:"note,omitempty"`
		At        time.Time  `json:"at,omitzero"`
		Count     int        `json:"count,string"`
		secret    string     // unexported: skipped
		Plain     bool       // no tag: the Go name
		Skipped   *int       `json:"skipped,omitempty"`
		Custom    customZero `json:"custom,omitzero"`
		BadTag    int        `json:"a\"b"` //nolint:staticcheck // SA5008: an invalid tag name on purpose; the Go name is used
		*tagExtra            // nil: its fields are absent
	}
	conflictA struct{ X, OnlyA int }
	conflictB struct{ X int }
	conflict  struct {
		conflictA
		conflictB
		Y int
	}
	dominated struct {
		conflictA
		X string `json:"X"` // shallower: wins
	}
	withUnexportedEmbedded struct {
		unexportedBase
		Outer int
	}
)

type outcome struct {
	json   string // the expected output when typ is ""
	path   string // the expected Error.Path; ending in "…", its start
	typ    string // the expected Error.Type
	reason string // a substring of Error.Reason
}

func is(j string) outcome                    { return outcome{json: j} }
func fails(path, typ, reason string) outcome { return outcome{path: path, typ: typ, reason: reason} }

type row struct {
	name   string
	path   string // the root given to MarshalPath
	in     any
	strict outcome
	field  *outcome // nil: as in strict mode
}

func ptr[T any](v T) *T { return &v }

func mustUUID(s string) uuid.UUID { return uuid.MustParse(s) }

const uuidText = "0191d0c2-7d5a-7cc0-9f5e-3c1c1bfa6a11"

func rows() []row {
	u := mustUUID(uuidText)
	at := time.Date(2026, 10, 6, 12, 0, 0, 500_000_000, time.UTC)
	plus2 := time.FixedZone("", 2*3600)
	var nilMap map[string]int
	var nilSlice []int
	var nilIface error

	cycle := &cyclicNode{}
	cycle.Next = cycle
	var sp selfPointer
	sp = &sp
	selfMap := map[string]any{}
	selfMap["self"] = selfMap

	return []row{
		// nil, pointers, interfaces
		{name: "nil", in: nil, strict: is(`null`)},
		{name: "nil pointer", in: (*int)(nil), strict: is(`null`)},
		{name: "nil interface in a map", in: map[string]any{"e": nilIface}, strict: is(`{"e":null}`)},
		{name: "pointer followed", in: ptr(5), strict: is(`5`)},
		{name: "pointer to pointer", in: ptr(ptr("x")), strict: is(`"x"`)},
		{name: "interface value", in: []error{nil, nil}, strict: is(`[null,null]`)},
		{name: "interface holding a struct", in: []any{struct{ A int }{1}}, strict: is(`[{"A":1}]`)},

		// bool, string, integers, enums
		{name: "bool", in: []bool{true, false}, strict: is(`[true,false]`)},
		{name: "string escaped like encoding/json", in: "héllo \"q\" \\ <&> \n\t\r\b\f\x01\x7f", strict: is(`"héllo \"q\" \\ <&> \n\t\r\b\f\u0001` + "\x7f" + `"`)},
		{name: "string invalid UTF-8", in: "a\xffb\xc3", strict: is(`"a\ufffdb\ufffd"`)},
		{name: "string line separators", in: "a\u2028b\u2029", strict: is(`"a\u2028b\u2029"`)},
		{name: "ints", in: []any{int(-1), int8(math.MinInt8), int16(math.MaxInt16), int32(math.MinInt32), int64(math.MinInt64), int64(math.MaxInt64)},
			strict: is(`[-1,-128,32767,-2147483648,-9223372036854775808,9223372036854775807]`)},
		{name: "uints", in: []any{uint(1), uint8(255), uint16(65535), uint32(math.MaxUint32), uint64(math.MaxUint64), uintptr(7)},
			strict: is(`[1,255,65535,4294967295,18446744073709551615,7]`)},
		{name: "enum of string", in: status("active"), strict: is(`"active"`)},
		{name: "enum of int", in: []level{1, 3}, strict: is(`[1,3]`)},
		{name: "named float", in: celsius(21.5), strict: is(`21.5`)},

		// floats
		{name: "float64", in: 1.5, strict: is(`1.5`)},
		{name: "float64 shortest", in: 0.1, strict: is(`0.1`)},
		{name: "float64 large", in: 1e21, strict: is(`1e+21`)},
		{name: "float64 below 1e21", in: 1e20, strict: is(`100000000000000000000`)},
		{name: "float64 small", in: 1e-7, strict: is(`1e-7`)},
		{name: "float64 1e-6", in: 1e-6, strict: is(`0.000001`)},
		{name: "float64 negative zero", in: math.Copysign(0, -1), strict: is(`-0`)},
		{name: "float32 with 32-bit precision", in: float32(0.1), strict: is(`0.1`)},
		{name: "float32 max", in: float32(math.MaxFloat32), strict: is(`3.4028235e+38`)},
		{name: "float64 NaN", in: math.NaN(), strict: fails("", "float64", "NaN is not a JSON number"), field: ptr(is(`"NaN"`))},
		{name: "float64 +Inf", in: math.Inf(1), strict: fails("", "float64", "+Inf is not a JSON number"), field: ptr(is(`"Infinity"`))},
		{name: "float64 -Inf", in: math.Inf(-1), strict: fails("", "float64", "-Inf is not a JSON number"), field: ptr(is(`"-Infinity"`))},
		{name: "float32 NaN", in: float32(math.NaN()), strict: fails("", "float32", "NaN"), field: ptr(is(`"NaN"`))},
		{name: "named float Inf in a struct", path: "payload", in: struct{ T celsius }{celsius(math.Inf(1))},
			strict: fails("payload.T", "jsonform_test.celsius", "+Inf"), field: ptr(is(`{"T":"Infinity"}`))},
		{name: "NaN in a row", in: map[string]any{"score": math.NaN(), "id": 1},
			strict: fails("score", "float64", "NaN"), field: ptr(is(`{"id":1,"score":"NaN"}`))},

		// decimals keep their scale
		{name: "decimal from string keeps scale", in: decimal.RequireFromString("12.50"), strict: is(`"12.50"`)},
		{name: "decimal.New", in: decimal.New(1250, -2), strict: is(`"12.50"`)},
		{name: "decimal zero with scale", in: decimal.RequireFromString("0.00"), strict: is(`"0.00"`)},
		{name: "decimal negative", in: decimal.RequireFromString("-3.10"), strict: is(`"-3.10"`)},
		{name: "decimal positive exponent", in: decimal.New(12, 3), strict: is(`"12000"`)},
		{name: "decimal fraction below one", in: decimal.New(-5, -3), strict: is(`"-0.005"`)},
		{name: "decimal zero value", in: decimal.Decimal{}, strict: is(`"0"`)},
		{name: "decimal beyond int64", in: decimal.RequireFromString("-123456789012345678901234567890.120"), strict: is(`"-123456789012345678901234567890.120"`)},
		{name: "decimal of 18 and 19 digits", in: []decimal.Decimal{decimal.New(999999999999999999, -18), decimal.New(math.MinInt64, -2)},
			strict: is(`["0.999999999999999999","-92233720368547758.08"]`)},
		{name: "decimal pointer", in: ptr(decimal.New(7, -1)), strict: is(`"0.7"`)},
		{name: "decimal nil pointer", in: (*decimal.Decimal)(nil), strict: is(`null`)},
		{name: "decimal in a struct field", in: struct {
			Fee decimal.Decimal `json:"fee"`
		}{decimal.New(0, -2)}, strict: is(`{"fee":"0.00"}`)},
		{name: "decimal exponent beyond NUMERIC", path: "payload", in: map[string]any{"x": decimal.New(1, 200000)},
			strict: fails("payload.x", "decimal.Decimal", "beyond the range")},
		{name: "decimal scale beyond NUMERIC", in: decimal.New(1, -20000), strict: fails("", "decimal.Decimal", "beyond the range")},
		{name: "decimal.NullDecimal valid", in: decimal.NewNullDecimal(decimal.RequireFromString("12.50")), strict: is(`"12.50"`)},
		{name: "decimal.NullDecimal invalid", in: decimal.NullDecimal{}, strict: is(`null`)},
		{name: "decimal with pointer methods, not addressable", in: map[string]ptrDecimal{"d": {c: 1250}}, strict: is(`{"d":"1.250"}`)},
		{name: "pgtype.Numeric", in: pgtype.Numeric{Int: big.NewInt(1250), Exp: -2, Valid: true}, strict: is(`"12.50"`)},
		{name: "pgtype.Numeric NULL", in: pgtype.Numeric{}, strict: is(`null`)},
		{name: "pgtype.Numeric NaN", in: pgtype.Numeric{NaN: true, Valid: true}, strict: fails("", "pgtype.Numeric", "NaN"), field: ptr(is(`"NaN"`))},
		{name: "pgtype.Numeric -Infinity", in: pgtype.Numeric{InfinityModifier: pgtype.NegativeInfinity, Valid: true},
			strict: fails("", "pgtype.Numeric", "-Inf"), field: ptr(is(`"-Infinity"`))},
		{name: "big.Int", in: new(big.Int).Exp(big.NewInt(10), big.NewInt(30), nil), strict: is(`"1000000000000000000000000000000"`)},
		{name: "big.Int negative", in: big.NewInt(-42), strict: is(`"-42"`)},
		{name: "big.Int nil", in: (*big.Int)(nil), strict: is(`null`)},
		{name: "big.Int value field", in: struct{ N big.Int }{*big.NewInt(9)}, strict: is(`{"N":"9"}`)},
		{name: "big.Rat finite decimal", in: big.NewRat(1, 8), strict: is(`"0.125"`)},
		{name: "big.Rat negative decimal", in: big.NewRat(-3, 20), strict: is(`"-0.15"`)},
		{name: "big.Rat integer", in: big.NewRat(10, 2), strict: is(`"5"`)},
		{name: "big.Rat without a finite decimal", in: big.NewRat(1, 3), strict: is(`"1/3"`)},
		{name: "big.Rat 7/30", in: big.NewRat(7, 30), strict: is(`"7/30"`)},
		{name: "big.Float", in: big.NewFloat(1.5), strict: is(`"1.5"`)},
		{name: "big.Float large", in: new(big.Float).SetInt64(1 << 62), strict: is(`"4611686018427387904"`)},
		{name: "big.Float +Inf", in: new(big.Float).SetInf(false), strict: fails("", "big.Float", "+Inf"), field: ptr(is(`"Infinity"`))},
		{name: "big.Float -Inf", in: new(big.Float).SetInf(true), strict: fails("", "big.Float", "-Inf"), field: ptr(is(`"-Infinity"`))},
		{name: "big.Float exponent beyond NUMERIC", in: new(big.Float).SetMantExp(big.NewFloat(0.5), 1<<20), strict: fails("", "big.Float", "beyond the range")},

		// uuids
		{name: "uuid.UUID", in: u, strict: is(`"` + uuidText + `"`)},
		{name: "uuid pointer", in: &u, strict: is(`"` + uuidText + `"`)},
		{name: "uuid.NullUUID valid", in: uuid.NullUUID{UUID: u, Valid: true}, strict: is(`"` + uuidText + `"`)},
		{name: "uuid.NullUUID invalid", in: uuid.NullUUID{}, strict: is(`null`)},
		{name: "uuid in a struct", in: struct{ ID uuid.UUID }{u}, strict: is(`{"ID":"` + uuidText + `"}`)},
		{name: "16-byte type named UUID", in: orderUUID(u), strict: is(`"` + uuidText + `"`)},
		{name: "16-byte Stringer with canonical text", in: stringerID(u), strict: is(`"` + uuidText + `"`)},
		{name: "16-byte Stringer with other text", in: otherString{1, 2}, strict: is(`[1,2,0,0,0,0,0,0,0,0,0,0,0,0,0,0]`)},
		{name: "plain [16]byte", in: digest{0xff}, strict: is(`[255,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]`)},
		{name: "pgtype.UUID", in: pgtype.UUID{Bytes: u, Valid: true}, strict: is(`"` + uuidText + `"`)},

		// times
		{name: "time.Time UTC with fraction", in: at, strict: is(`"2026-10-06T12:00:00.5Z"`)},
		{name: "time.Time with offset", in: time.Date(2026, 1, 2, 3, 4, 5, 0, plus2), strict: is(`"2026-01-02T03:04:05+02:00"`)},
		{name: "time.Time nanoseconds", in: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC), strict: is(`"2026-01-02T03:04:05.123456789Z"`)},
		{name: "time.Time pointer in a struct", in: struct{ At *time.Time }{&at}, strict: is(`{"At":"2026-10-06T12:00:00.5Z"}`)},
		{name: "time.Time nil pointer", in: struct{ At *time.Time }{}, strict: is(`{"At":null}`)},
		{name: "time.Time year 10000", path: "payload", in: map[string]any{"at": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
			strict: fails("payload.at", "time.Time", "year outside of range")},
		{name: "type defined as time.Time", in: stamp(at), strict: is(`"2026-10-06T12:00:00.5Z"`)},
		{name: "sql.NullTime", in: sql.NullTime{Time: at, Valid: true}, strict: is(`"2026-10-06T12:00:00.5Z"`)},
		{name: "date-only type (pgtype.Date)", in: pgtype.Date{Time: at, Valid: true}, strict: is(`"2026-10-06"`)},
		{name: "time-only type (pgtype.Time)", in: pgtype.Time{Microseconds: (12*3600+30)*1e6 + 250000, Valid: true}, strict: is(`"12:00:30.250000"`)},
		{name: "time.Duration", in: 1500 * time.Millisecond, strict: is(`1.5`), field: ptr(is(`1500000000`))},
		{name: "time.Duration whole", in: 90 * time.Second, strict: is(`90`), field: ptr(is(`90000000000`))},
		{name: "time.Duration negative nanosecond", in: -time.Nanosecond, strict: is(`-0.000000001`), field: ptr(is(`-1`))},
		{name: "time.Duration in a struct", in: struct{ D time.Duration }{100}, strict: is(`{"D":0.0000001}`), field: ptr(is(`{"D":100}`))},
		{name: "time.Duration zero and min", in: []time.Duration{0, math.MinInt64}, strict: is(`[0,-9223372036.854775808]`), field: ptr(is(`[0,-9223372036854775808]`))},

		// network types
		{name: "net.IP v4", in: net.IPv4(192, 0, 2, 1), strict: is(`"192.0.2.1"`)},
		{name: "net.IP 4 bytes", in: net.IP{192, 0, 2, 1}, strict: is(`"192.0.2.1"`)},
		{name: "net.IP v6", in: net.ParseIP("2001:db8::1"), strict: is(`"2001:db8::1"`)},
		{name: "net.IP nil", in: net.IP(nil), strict: is(`null`)},
		{name: "net.IP empty", in: net.IP{}, strict: is(`""`)},
		{name: "net.IP bad length", in: net.IP{1, 2, 3}, strict: fails("", "net.IP", "invalid net.IP"), field: ptr(is(`"AQID"`))},
		// In field mode a column value whose own form fails gets the form
		// of what database/sql stores; inside a list, or when database/sql
		// refuses it too (a struct), it stays an error.
		{name: "net.IP bad length, in a list", in: []any{net.IP{1, 2, 3}}, strict: fails("[0]", "net.IP", "invalid net.IP")},
		{name: "net.IP bad length, by pointer", in: &net.IP{1, 2, 3}, strict: fails("", "net.IP", "invalid net.IP"), field: ptr(is(`"AQID"`))},
		{name: "string kind, MarshalText fails", in: failTextString("as stored"), strict: fails("", "jsonform_test.failTextString", "MarshalText failed: boom"), field: ptr(is(`"as stored"`))},
		{name: "struct, MarshalText fails", in: failText{}, strict: fails("", "jsonform_test.failText", "MarshalText failed: boom")},
		{name: "int kind, MarshalJSON fails", in: failJSONInt(7), strict: fails("", "jsonform_test.failJSONInt", "MarshalJSON failed: boom"), field: ptr(is(`7`))},
		{name: "*net.IPNet", in: &net.IPNet{IP: net.IP{192, 0, 2, 0}, Mask: net.CIDRMask(24, 32)}, strict: is(`"192.0.2.0/24"`)},
		{name: "*net.IPNet invalid", in: &net.IPNet{}, strict: fails("", "net.IPNet", "invalid net.IPNet")},
		{name: "netip.Addr", in: netip.MustParseAddr("2001:db8::1"), strict: is(`"2001:db8::1"`)},
		{name: "netip.Addr with zone", in: netip.MustParseAddr("fe80::1%eth\"0"), strict: is(`"fe80::1%eth\"0"`)},
		{name: "netip.Addr zero", in: netip.Addr{}, strict: is(`""`)},
		{name: "netip.Prefix", in: netip.MustParsePrefix("192.0.2.0/24"), strict: is(`"192.0.2.0/24"`)},
		{name: "netip.Prefix invalid", in: netip.PrefixFrom(netip.MustParseAddr("192.0.2.0"), 40), strict: fails("", "netip.Prefix", "invalid netip.Prefix")},
		{name: "netip.AddrPort", in: netip.MustParseAddrPort("[2001:db8::1]:8080"), strict: is(`"[2001:db8::1]:8080"`)},

		// bytes and raw JSON
		{name: "[]byte base64", in: []byte("hi?"), strict: is(`"aGk/"`)},
		{name: "[]byte nil", in: []byte(nil), strict: is(`null`)},
		{name: "[]byte empty", in: []byte{}, strict: is(`""`)},
		{name: "named byte slice", in: blob{0xfb, 0xff}, strict: is(`"+/8="`)},
		{name: "slice of a named byte", in: []byteLike{1, 2}, strict: is(`"AQI="`)},
		{name: "byte array", in: [4]byte{1, 2, 3, 4}, strict: is(`[1,2,3,4]`)},
		{name: "json.RawMessage compacted", in: json.RawMessage(" {\"a\" : [1, 2] }\n"), strict: is(`{"a":[1,2]}`)},
		{name: "json.RawMessage empty", in: json.RawMessage{}, strict: is(`null`)},
		{name: "json.RawMessage invalid", path: "payload", in: map[string]any{"raw": json.RawMessage(`{"a":`)},
			strict: fails("payload.raw", "json.RawMessage", "not valid JSON")},
		{name: "json.RawMessage in a struct", in: struct{ R json.RawMessage }{json.RawMessage(`[true]`)}, strict: is(`{"R":[true]}`)},
		{name: "datatypes.JSON-like", in: rawJSON(`{ "k": "v" }`), strict: is(`{"k":"v"}`)},
		{name: "datatypes.JSON-like invalid", in: rawJSON(`{`), strict: fails("", "jsonform_test.rawJSON", "MarshalJSON output is not valid JSON"), field: ptr(is(`"ew=="`))},
		{name: "json.Number", in: json.Number("12.50"), strict: is(`12.50`)},
		{name: "json.Number empty", in: json.Number(""), strict: is(`0`)},
		{name: "json.Number invalid", in: json.Number("12,5"), strict: fails("", "json.Number", "not a JSON number")},

		// methods
		{name: "json.Marshaler compacted", in: marshaler{}, strict: is(`{"x":[1,2],"s":"a b"}`)},
		{name: "json.Marshaler invalid output", in: badMarshaler{}, strict: fails("", "jsonform_test.badMarshaler", "not valid JSON")},
		{name: "json.Marshaler error", path: "p", in: []any{failMarshaler{}}, strict: fails("p[0]", "jsonform_test.failMarshaler", "MarshalJSON failed: boom")},
		{name: "json.Marshaler output made valid UTF-8", in: utf8Marshaler{}, strict: is(`["a\ufffdb\u2028"]`)},
		{name: "pointer json.Marshaler, not addressable", in: map[string]ptrMarshaler{"m": {N: 3}}, strict: is(`{"m":{"n":3}}`)},
		{name: "pointer json.Marshaler, addressable", in: []ptrMarshaler{{N: 4}}, strict: is(`[{"n":4}]`)},
		{name: "encoding.TextMarshaler", in: textOnly{}, strict: is(`"text <form>"`)},
		{name: "encoding.TextMarshaler error", in: failText{}, strict: fails("", "jsonform_test.failText", "MarshalText failed: boom")},
		{name: "pointer TextMarshaler, not addressable", in: []any{ptrText{"a"}}, strict: is(`["ptr:a"]`)},
		{name: "json.Marshaler before TextMarshaler", in: jsonAndText{}, strict: is(`"from json"`)},
		{name: "driver.Valuer before TextMarshaler", in: valuerAndText{}, strict: is(`7`)},
		{name: "sql.NullString", in: []sql.NullString{{String: "s", Valid: true}, {}}, strict: is(`["s",null]`)},
		{name: "sql.NullInt64", in: []sql.NullInt64{{Int64: 7, Valid: true}, {}}, strict: is(`[7,null]`)},
		{name: "sql.NullBool", in: sql.NullBool{Bool: true, Valid: true}, strict: is(`true`)},
		{name: "sql.NullFloat64 NaN", in: sql.NullFloat64{Float64: math.NaN(), Valid: true}, strict: fails("", "float64", "NaN"), field: ptr(is(`"NaN"`))},
		{name: "sql.Null[decimal] keeps scale", in: sql.Null[decimal.Decimal]{V: decimal.RequireFromString("12.50"), Valid: true}, strict: is(`"12.50"`)},
		{name: "sql.Null[int] invalid", in: sql.Null[int]{V: 3}, strict: is(`null`)},
		{name: "sql.Null[uuid]", in: sql.Null[uuid.UUID]{V: u, Valid: true}, strict: is(`"` + uuidText + `"`)},
		{name: "pgtype.Text", in: pgtype.Text{String: "t", Valid: true}, strict: is(`"t"`)},
		{name: "pgtype.Float8 NaN", in: pgtype.Float8{Float64: math.NaN(), Valid: true}, strict: fails("", "float64", "NaN"), field: ptr(is(`"NaN"`))},
		{name: "pgtype.Float4 NULL", in: pgtype.Float4{}, strict: is(`null`)},
		{name: "driver.Valuer error", path: "payload", in: map[string]any{"v": failValuer{}}, strict: fails("payload.v", "jsonform_test.failValuer", "Value failed: boom")},
		{name: "driver.Valuer returning itself", in: selfValuer{}, strict: fails("", "jsonform_test.selfValuer", "returned its own type")},

		// maps
		{name: "map[string]any sorted", in: map[string]any{"b": 2, "a": 1, "c": []any{}}, strict: is(`{"a":1,"b":2,"c":[]}`)},
		{name: "map with string-kind keys", in: map[status]level{"z": 1, "y": 2}, strict: is(`{"y":2,"z":1}`)},
		{name: "map of strings sorted bytewise", in: map[string]string{"é": "1", "z": "2", "Z": "3"}, strict: is(`{"Z":"3","z":"2","é":"1"}`)},
		{name: "map nil", in: nilMap, strict: is(`null`)},
		{name: "map empty", in: map[string]int{}, strict: is(`{}`)},
		{name: "map with uuid keys", in: map[uuid.UUID]int{u: 1}, strict: is(`{"` + uuidText + `":1}`)},
		{name: "map with decimal keys", in: map[decimal.Decimal]int{decimal.New(1250, -2): 1}, strict: is(`{"12.50":1}`)},
		{name: "map with time keys", in: map[time.Time]bool{at: true}, strict: is(`{"2026-10-06T12:00:00.5Z":true}`)},
		{name: "map with TextMarshaler keys", in: map[keyText]int{{2}: 2, {1}: 1}, strict: is(`{"k1":1,"k2":2}`)},
		{name: "map with colliding key texts", in: map[collidingKey]int{{1}: 1, {2}: 2}, strict: fails("", "map[jsonform_test.collidingKey]int", "same text")},
		{name: "map with int keys: pairs", in: map[int]string{2: "b", -1: "a", 10: "c"}, strict: is(`[[-1,"a"],[10,"c"],[2,"b"]]`)},
		{name: "map with bool keys: pairs", in: map[bool]int{true: 1, false: 0}, strict: is(`[[false,0],[true,1]]`)},
		{name: "map with any keys: pairs", in: map[any]int{"s": 1, 2: 2, nil: 0}, strict: is(`[["s",1],[2,2],[null,0]]`)},
		{name: "map with NaN keys", in: map[float64]int{math.NaN(): 2, math.NaN(): 1, 1: 0},
			strict: fails("", "float64", "NaN"), field: ptr(is(`[["NaN",1],["NaN",2],[1,0]]`))},
		{name: "map pair value error path", path: "payload", in: map[int]any{3: complex(1, 2)}, strict: fails("payload[3]", "complex128", "unsupported type complex128")},
		{name: "map of maps", in: map[string]map[string]int{"o": {"i": 1}}, strict: is(`{"o":{"i":1}}`)},

		// structs
		{name: "struct json tags", in: tagged{tagBase: tagBase{ID: 1, Hidden: "h", Dash: "d"}, Name: "n", Count: 3, Plain: true, Custom: customZero{42}, BadTag: 5, secret: "s"},
			strict: is(`{"id":1,"-":"d","name":"n","count":"3","Plain":true,"BadTag":5}`)},
		{name: "struct omitempty and omitzero kept", in: tagged{Note: "x", At: at, Skipped: ptr(0), Custom: customZero{1}, tagExtra: &tagExtra{More: 9}},
			strict: is(`{"id":0,"-":"","name":"","note":"x","at":"2026-10-06T12:00:00.5Z","count":"0","Plain":false,"skipped":0,"custom":{},"BadTag":0,"more":9}`)},
		{name: "struct conflicting embedded fields cancel", in: conflict{Y: 1}, strict: is(`{"OnlyA":0,"Y":1}`)},
		{name: "struct shallower field dominates", in: dominated{X: "top"}, strict: is(`{"OnlyA":0,"X":"top"}`)},
		{name: "struct unexported embedded promotes exported", in: withUnexportedEmbedded{unexportedBase{1}, 2}, strict: is(`{"Inner":1,"Outer":2}`)},
		{name: "struct empty", in: struct{}{}, strict: is(`{}`)},
		{name: "struct pointer", in: &struct{ A string }{"a"}, strict: is(`{"A":"a"}`)},

		// slices and arrays
		{name: "slice nil", in: nilSlice, strict: is(`null`)},
		{name: "slice empty", in: []int{}, strict: is(`[]`)},
		{name: "slice of strings", in: []string{"a", "b"}, strict: is(`["a","b"]`)},
		{name: "array", in: [3]int{1, 2, 3}, strict: is(`[1,2,3]`)},
		{name: "nested slices", in: [][]any{{1, "a"}, nil, {}}, strict: is(`[[1,"a"],null,[]]`)},

		// no JSON form
		{name: "complex128", in: complex(1, 2), strict: fails("", "complex128", "unsupported type complex128")},
		{name: "complex64", in: complex64(1), strict: fails("", "complex64", "unsupported type complex64")},
		{name: "chan", in: make(chan int), strict: fails("", "chan int", "unsupported type chan int")},
		{name: "func", in: func() {}, strict: fails("", "func()", "unsupported type func()")},
		{name: "unsafe.Pointer", in: unsafe.Pointer(nil), strict: fails("", "unsafe.Pointer", "unsupported type unsafe.Pointer")},
		{name: "func field even when nil", in: struct{ F func() }{}, strict: fails("F", "func()", "unsupported type")},
		{name: "nil pointer to chan is null", in: (*chan int)(nil), strict: is(`null`)},
		{name: "payload path", path: "payload", in: map[string]any{"items": []any{0, 1, 2, map[string]any{"price": complex(1, 2)}}},
			strict: fails("payload.items[3].price", "complex128", "unsupported type complex128")},
		{name: "root path and index", in: []any{0, make(chan int)}, strict: fails("[1]", "chan int", "unsupported")},
		{name: "struct field path", path: "payload", in: struct {
			Items []struct {
				Price complex64 `json:"price"`
			} `json:"items"`
		}{Items: make([]struct {
			Price complex64 `json:"price"`
		}, 2)}, strict: fails("payload.items[0].price", "complex64", "unsupported")},

		// cycles
		{name: "pointer cycle", in: cycle, strict: fails("Next.Next.Next…", "*jsonform_test.cyclicNode", "too deep or cyclic")},
		{name: "self pointer", in: sp, strict: fails("", "jsonform_test.selfPointer", "too deep or cyclic")},
		{name: "recursive type, finite value", in: treeNode{Name: "a", Kids: []treeNode{{Name: "b"}, {Name: "c", Kids: []treeNode{{Name: "d"}}}}},
			strict: is(`{"name":"a","kids":[{"name":"b"},{"name":"c","kids":[{"name":"d"}]}]}`)},
		{name: "valuers returning each other", in: pingValuer{}, strict: fails("", "jsonform_test.pingValuer", "too deep or cyclic")},
		{name: "map cycle", in: selfMap, strict: fails("self.self.self…", "map[string]interface {}", "too deep or cyclic")},
	}
}

func TestMarshal(t *testing.T) {
	t.Parallel()
	for _, r := range rows() {
		for _, mode := range []jsonform.Mode{jsonform.Strict, jsonform.Field} {
			want := r.strict
			if mode == jsonform.Field && r.field != nil {
				want = *r.field
			}
			t.Run(mode.String()+"/"+r.name, func(t *testing.T) {
				t.Parallel()
				got, err := jsonform.MarshalPath(r.path, r.in, mode)
				checkOutcome(t, got, err, want)
			})
		}
	}
}

func checkOutcome(t *testing.T, got []byte, err error, want outcome) {
	t.Helper()
	if want.typ == "" {
		if err != nil {
			t.Fatalf("error %v, want %s", err, want.json)
		}
		if string(got) != want.json {
			t.Fatalf("got  %s\nwant %s", got, want.json)
		}
		if !json.Valid(got) || !utf8.Valid(got) {
			t.Fatalf("output is not valid UTF-8 JSON: %q", got)
		}
		return
	}
	if err == nil {
		t.Fatalf("got %s, want an error", got)
	}
	if got != nil {
		t.Fatalf("got %q with the error, want nil", got)
	}
	if !errors.Is(err, jsonform.ErrUnsupported) {
		t.Fatalf("errors.Is(%v, ErrUnsupported) = false", err)
	}
	var e *jsonform.Error
	if !errors.As(err, &e) {
		t.Fatalf("errors.As(%v, *Error) = false", err)
	}
	pathOK := e.Path == want.path
	if prefix, ok := strings.CutSuffix(want.path, "…"); ok {
		pathOK = strings.HasPrefix(e.Path, prefix)
	}
	if !pathOK || e.Type != want.typ || !strings.Contains(e.Reason, want.reason) {
		t.Fatalf("got Path %q Type %q Reason %q\nwant Path %q Type %q Reason containing %q", e.Path, e.Type, e.Reason, want.path, want.typ, want.reason)
	}
	wantMsg := "herald/jsonform: " + e.Reason
	if e.Path != "" {
		wantMsg = "herald/jsonform: " + e.Path + ": " + e.Reason
	}
	if len(e.Path) <= 256 && err.Error() != wantMsg {
		t.Fatalf("Error() = %q, want %q", err.Error(), wantMsg)
	}
	if msg := err.Error(); len(msg) > 512 || !utf8.ValidString(msg) {
		t.Fatalf("Error() is %d bytes long or not UTF-8: %q", len(msg), msg)
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := jsonform.MarshalPath("payload", map[string]any{"items": []any{0, 1, 2, map[string]any{"price": complex(1, 2)}}}, jsonform.Strict)
	const want = "herald/jsonform: payload.items[3].price: unsupported type complex128"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	if !errors.Is(err, jsonform.ErrUnsupported) {
		t.Fatal("not ErrUnsupported")
	}
	if u := errors.Unwrap(err); u != jsonform.ErrUnsupported { //nolint:errorlint // Unwrap must return the sentinel itself

		t.Fatalf("Unwrap() = %v, want ErrUnsupported", u)
	}
}

// TestErrorCause pins that the error of a value's own method is seen
// through the *Error, beside ErrUnsupported.
func TestErrorCause(t *testing.T) {
	t.Parallel()
	for _, v := range []any{failValuer{}, failMarshaler{}, failText{}} {
		_, err := jsonform.Marshal(v, jsonform.Strict)
		if !errors.Is(err, errBoom) || !errors.Is(err, jsonform.ErrUnsupported) {
			t.Fatalf("%T: errors.Is(%v, errBoom and ErrUnsupported) = false", v, err)
		}
		var e *jsonform.Error
		if !errors.As(err, &e) || !errors.Is(e.Err, errBoom) {
			t.Fatalf("%T: Err = %v, want errBoom", v, e.Err)
		}
	}
	_, err := jsonform.Marshal(math.NaN(), jsonform.Strict)
	if errors.Is(err, errBoom) {
		t.Fatal("a NaN error matches an unrelated cause")
	}
}

func TestDepthLimit(t *testing.T) {
	t.Parallel()
	nest := func(n int) any {
		var v any = 1
		for range n {
			v = []any{v}
		}
		return v
	}
	if _, err := jsonform.Marshal(nest(jsonform.MaxDepth), jsonform.Strict); err != nil {
		t.Fatalf("%d levels: %v", jsonform.MaxDepth, err)
	}
	_, err := jsonform.Marshal(nest(jsonform.MaxDepth+1), jsonform.Strict)
	var e *jsonform.Error
	if !errors.As(err, &e) || !strings.Contains(e.Reason, "too deep or cyclic") {
		t.Fatalf("%d levels: %v, want too deep", jsonform.MaxDepth+1, err)
	}
	if want := strings.Repeat("[0]", jsonform.MaxDepth); e.Path != want {
		t.Fatalf("path %.40q…, want %d× [0]", e.Path, jsonform.MaxDepth)
	}
}

func TestAppend(t *testing.T) {
	t.Parallel()
	dst := []byte(`{"payload":`)
	out, err := jsonform.Append(dst, "payload", map[string]any{"a": 1}, jsonform.Strict)
	if err != nil || string(out) != `{"payload":{"a":1}` {
		t.Fatalf("got %s, %v", out, err)
	}
	out, err = jsonform.Append(dst, "payload", map[string]any{"a": 1, "b": make(chan int)}, jsonform.Strict)
	if err == nil || string(out) != `{"payload":` {
		t.Fatalf("on error got %q, %v; want dst unchanged", out, err)
	}
}

// TestAppendStringMatchesEncodingJSON pins AppendString to encoding/json's
// escaping with HTML escaping off.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	var all strings.Builder
	for c := range 256 {
		all.WriteByte(byte(c))
	}
	for _, s := range []string{"", "plain", "<a&b>", all.String(), "\u2028\u2029", "\xed\xa0\x80", "日本語", "\U0001F600", "a\x00b"} {
		if got, want := string(jsonform.AppendString(nil, s)), encodingJSON(t, s); got != want {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
	}
}

func encodingJSON(t testing.TB, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// TestFloatsMatchEncodingJSON pins the number form to encoding/json's.
func TestFloatsMatchEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{0, 1, -1, 0.1, 1e-6, 9.999999e-7, 1e20, 1e21, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, 5e-324, 1.7976931348623157e308} {
		vs := []any{f}
		if f32 := float32(f); !math.IsInf(float64(f32), 0) {
			vs = append(vs, f32)
		}
		for _, v := range vs {
			got, err := jsonform.Marshal(v, jsonform.Strict)
			if err != nil {
				t.Fatal(err)
			}
			if want := encodingJSON(t, v); string(got) != want {
				t.Fatalf("%T %v: got %s, encoding/json %s", v, v, got, want)
			}
		}
	}
}

// TestStructsMatchEncodingJSON pins the struct rules to encoding/json's for
// values both can encode.
func TestStructsMatchEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, v := range []any{
		tagged{tagBase: tagBase{ID: 1, Dash: "d"}, Name: "n", Count: 3, Custom: customZero{42}, tagExtra: &tagExtra{2}},
		conflict{Y: 1},
		dominated{X: "x"},
		withUnexportedEmbedded{unexportedBase{1}, 2},
		struct {
			S string  `json:"s,string"`
			F float64 `json:",string"`
			B *bool   `json:"b,string"`
			N *int    `json:"n,string"`
		}{S: "q\"", F: 1.5, N: ptr(4)},
	} {
		got, err := jsonform.Marshal(v, jsonform.Strict)
		if err != nil {
			t.Fatal(err)
		}
		if want := encodingJSON(t, v); string(got) != want {
			t.Fatalf("%T: got  %s\nencoding/json %s", v, got, want)
		}
	}
}

// TestDeterministic pins that maps come out the same every time.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	m := map[string]any{}
	pairs := map[int]string{}
	for i := range 100 {
		m[strconv.Itoa(i)] = i
		pairs[i] = strconv.Itoa(i)
	}
	first, _ := jsonform.Marshal([]any{m, pairs}, jsonform.Strict)
	for range 20 {
		again, _ := jsonform.Marshal([]any{m, pairs}, jsonform.Strict)
		if !bytes.Equal(first, again) {
			t.Fatalf("output changed:\n%s\n%s", first, again)
		}
	}
}

func TestModeString(t *testing.T) {
	t.Parallel()
	for m, want := range map[jsonform.Mode]string{jsonform.Strict: "strict", jsonform.Field: "field", 7: "Mode(7)"} {
		if m.String() != want {
			t.Fatalf("%d: %q, want %q", int(m), m.String(), want)
		}
	}
	// Unknown modes act as Strict.
	if _, err := jsonform.Marshal(math.NaN(), 7); !errors.Is(err, jsonform.ErrUnsupported) {
		t.Fatalf("mode 7: %v", err)
	}
}

func TestValid(t *testing.T) {
	t.Parallel()
	if !jsonform.Valid([]byte(`{"a":[1]}`)) || jsonform.Valid([]byte(`{"a":`)) {
		t.Fatal("Valid disagrees with json.Valid")
	}
}

// typicalRow is a captured row of ten columns of the usual types.
func typicalRow() map[string]any {
	return map[string]any{
		"id":         int64(7),
		"public_id":  mustUUID(uuidText),
		"title":      "Dune \"deluxe\"",
		"fee":        decimal.RequireFromString("12.50"),
		"rating":     4.5,
		"available":  true,
		"created_at": time.Date(2026, 10, 6, 12, 0, 0, 0, time.UTC),
		"cover":      []byte{0xde, 0xad, 0xbe, 0xef},
		"deleted_at": nil,
		"reader_id":  sql.NullInt64{Int64: 3, Valid: true},
	}
}

func TestTypicalRow(t *testing.T) {
	t.Parallel()
	got, err := jsonform.MarshalPath("after", typicalRow(), jsonform.Field)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"available":true,"cover":"3q2+7w==","created_at":"2026-10-06T12:00:00Z","deleted_at":null,` +
		`"fee":"12.50","id":7,"public_id":"` + uuidText + `","rating":4.5,"reader_id":3,"title":"Dune \"deluxe\""}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func BenchmarkAppendRow(b *testing.B) {
	row := typicalRow()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = jsonform.Append(buf[:0], "after", row, jsonform.Field); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf)), "bytes/row")
}

func BenchmarkAppendStruct(b *testing.B) {
	type loan struct {
		ID       int64           `json:"id"`
		PublicID uuid.UUID       `json:"public_id"`
		Fee      decimal.Decimal `json:"fee"`
		Status   status          `json:"status"`
		DueAt    time.Time       `json:"due_at"`
		ReaderID *int64          `json:"reader_id"`
	}
	v := &loan{ID: 1, PublicID: mustUUID(uuidText), Fee: decimal.New(1250, -2), Status: "lent", DueAt: time.Now(), ReaderID: ptr(int64(3))}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = jsonform.Append(buf[:0], "", v, jsonform.Strict); err != nil {
			b.Fatal(err)
		}
	}
}
