package jsonform_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/heraldgo/herald/jsonform"
)

// fuzzRecord is a struct of column-like fields, so the struct path is
// fuzzed as well as maps.
type fuzzRecord struct {
	ID      int64           `json:"id"`
	Name    string          `json:"name,omitempty"`
	Score   float64         `json:"score"`
	Ratio   float32         `json:"ratio,omitzero"`
	Fee     decimal.Decimal `json:"fee"`
	At      *time.Time      `json:"at"`
	Key     uuid.UUID       `json:"key"`
	Data    []byte          `json:"data"`
	Count   uint64          `json:"count,string"`
	Raw     json.RawMessage `json:"raw,omitempty"`
	Tags    []string        `json:"tags"`
	Nested  map[string]any  `json:"nested"`
	Ignored string          `json:"-"`
}

// FuzzMarshal builds values of real column types from the fuzzed inputs
// and checks, in both modes: no panic; output is compact, valid UTF-8 JSON
// or the error is an *Error matching ErrUnsupported; floats never fail in
// field mode; the forms read back to the values (floats, decimals with
// their scale, times, strings as encoding/json writes them); output is the
// same every time and Append appends exactly it.
func FuzzMarshal(f *testing.F) {
	type seed struct {
		i     int64
		u     uint64
		f64   uint64
		f32   uint32
		s     string
		b     []byte
		sec   int64
		nsec  int64
		coef  int64
		exp   int32
		shape uint16
	}
	seeds := []seed{
		{i: 7, u: 42, f64: math.Float64bits(1.5), f32: math.Float32bits(0.1), s: "plain", b: []byte("bytes"), sec: 1791288000, nsec: 500_000_000, coef: 1250, exp: -2},
		{i: math.MinInt64, u: math.MaxUint64, f64: 0x7ff8000000000001, f32: 0x7fc00000, s: "a\xffb\xc3", b: nil, coef: 0, exp: -2, shape: 1},                  // NaN, invalid UTF-8
		{i: math.MaxInt64, f64: 0x7ff0000000000000, f32: 0x7f800000, s: "\u2028\u2029\x00\"\\<>&", b: []byte{}, coef: -310, exp: -2, shape: 2},                // +Inf
		{i: -1, f64: 0xfff0000000000000, f32: 0xff800000, s: "日本語", b: []byte{0xff, 0xfe}, coef: 12, exp: 3, shape: 3},                                        // -Inf
		{f64: 0x8000000000000000, f32: 0x80000000, s: "", b: []byte(`{"a":[1,2]}`), coef: math.MinInt64, exp: -18, shape: 4},                                  // -0, raw JSON
		{f64: 1, f32: 1, s: "12.50", b: []byte{192, 0, 2, 1}, coef: math.MaxInt64, exp: 0, shape: 5},                                                          // subnormals, an IPv4
		{f64: math.Float64bits(math.MaxFloat64), f32: math.Float32bits(math.MaxFloat32), s: "1e21", b: bytes.Repeat([]byte{0xab}, 16), exp: 200000, shape: 6}, // a uuid's bytes
		{f64: math.Float64bits(1e21), f32: math.Float32bits(1e-7), sec: 253402300800, coef: 1, exp: -16384, shape: 7},                                         // year 10000
		{sec: -62135596801, nsec: -1, coef: 5, exp: math.MaxInt32, shape: 8},                                                                                  // year -1
		{sec: 1e15, coef: 5, exp: math.MinInt32, shape: 0x1ff, s: "\xed\xa0\x80", b: bytes.Repeat([]byte{'['}, 2000)},                                         // deep raw JSON
		{i: 86400, u: 3, coef: 999999999999999999, exp: -18, shape: 0x2ff, s: `{"k": "v"}`},                                                                   // an offset of a day
		{i: 1, u: 8, shape: 0xfff, s: "-0.5e-3", b: []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}},                                       // an IPv6
	}
	for _, s := range seeds {
		f.Add(s.i, s.u, s.f64, s.f32, s.s, s.b, s.sec, s.nsec, s.coef, s.exp, s.shape)
	}
	f.Fuzz(func(t *testing.T, i int64, u uint64, f64 uint64, f32 uint32, s string, b []byte, sec, nsec, coef int64, exp int32, shape uint16) {
		fl64, fl32 := math.Float64frombits(f64), math.Float32frombits(f32)
		at := time.Unix(sec, nsec).In(time.FixedZone("", int(i%(48*3600))))
		// The row's decimals keep small exponents: a decimal of exponent
		// 131072 is 131072 characters, and a row holds several, which
		// would slow every run (and the minimizing of every input) down.
		// checkDecimal covers the whole exponent range once per run.
		// Big coefficients come from at most 64 of the fuzzed bytes (154
		// digits): converting longer ones to decimal costs time that buys
		// no coverage.
		coefBytes := b[:min(len(b), 64)]
		dec := decimal.New(coef, exp%1000)
		bigDec := decimal.NewFromBigInt(new(big.Int).SetBytes(coefBytes), exp%1000)
		var id uuid.UUID
		copy(id[:], b)

		row := map[string]any{
			"int":        i,
			"uint":       u,
			"float64":    fl64,
			"float32":    fl32,
			"string":     s,
			"bytes":      b,
			"time":       at,
			"decimal":    dec,
			"big_dec":    bigDec,
			"null_dec":   decimal.NullDecimal{Decimal: dec, Valid: shape&1 == 0},
			"uuid":       id,
			"null_str":   sql.NullString{String: s, Valid: shape&2 == 0},
			"null_float": sql.NullFloat64{Float64: fl64, Valid: shape&4 == 0},
			"null_time":  sql.NullTime{Time: at, Valid: shape&8 == 0},
			"duration":   time.Duration(i),
			"ip":         net.IP(b),
			"raw":        json.RawMessage(b),
			"raw_string": json.RawMessage(s),
			"number":     json.Number(s),
			"rat":        big.NewRat(i%1_000_000, int64(u%1_000_000)+1),
			"big_int":    new(big.Int).SetBytes(coefBytes),
			"nil":        nil,
			"list":       []any{i, s, []any{fl64, nil}, map[string]any{s: b}},
			"pairs":      map[float64]string{fl64: s, float64(fl32): s},
			"by_int":     map[int64]any{i: dec, int64(u): at},
			s:            s, // fuzzed keys
		}
		if !math.IsNaN(fl64) {
			row["big_float"] = new(big.Float).SetFloat64(fl64)
		}
		rec := fuzzRecord{ID: i, Name: s, Score: fl64, Ratio: fl32, Fee: dec, At: &at, Key: id, Data: b, Count: u,
			Raw: json.RawMessage(b), Tags: strings.Split(s, ","), Nested: map[string]any{"row": []any{i, s}}}

		var v any = row
		switch shape % 4 {
		case 1:
			v = rec
		case 2:
			v = []any{row, &rec}
		case 3:
			v = map[string]any{"before": rec, "after": row}
		}
		for range (shape >> 2) % 8 {
			v = []any{v}
		}

		for _, mode := range []jsonform.Mode{jsonform.Strict, jsonform.Field} {
			// Column by column, so that one value without a form (a raw
			// message of random bytes) does not hide the others' output.
			for _, x := range row {
				checkMarshal(t, x, mode)
			}
			out := checkMarshal(t, v, mode)
			if out == nil {
				continue
			}
			again, _ := jsonform.Marshal(v, mode)
			if !bytes.Equal(out, again) {
				t.Fatalf("%s: output not deterministic:\n%s\n%s", mode, out, again)
			}
			prefix := []byte(`{"payload":`)
			appended, err := jsonform.Append(prefix, "payload", v, mode)
			if err != nil || !bytes.Equal(appended, append(prefix[:len(prefix):len(prefix)], out...)) {
				t.Fatalf("%s: Append = %s, %v; want the prefix and %s", mode, appended, err, out)
			}
		}

		// Floats never fail in field mode, and read back to themselves.
		for _, x := range []any{fl64, fl32, sql.NullFloat64{Float64: fl64, Valid: true}, []float64{fl64}} {
			out, err := jsonform.Marshal(x, jsonform.Field)
			if err != nil {
				t.Fatalf("field mode %T %v: %v", x, x, err)
			}
			if !json.Valid(out) {
				t.Fatalf("field mode %T %v: invalid %q", x, x, out)
			}
		}
		checkFloat(t, fl64, 64)
		checkFloat(t, float64(fl32), 32)

		// Strings are escaped exactly as encoding/json escapes them.
		if got, want := string(jsonform.AppendString(nil, s)), encodingJSON(t, s); got != want {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}

		checkDecimal(t, decimal.New(coef, exp), coef, exp)
		checkTime(t, at)
	})
}

// checkMarshal checks the invariant of one Marshal and returns its output,
// or nil when the value has no JSON form.
func checkMarshal(t *testing.T, v any, mode jsonform.Mode) []byte {
	t.Helper()
	out, err := jsonform.Marshal(v, mode)
	if err != nil {
		var e *jsonform.Error
		if !errors.Is(err, jsonform.ErrUnsupported) || !errors.As(err, &e) || e.Type == "" || e.Reason == "" {
			t.Fatalf("%s: error %v (%T) is not a complete *Error matching ErrUnsupported", mode, err, err)
		}
		if out != nil {
			t.Fatalf("%s: output %q beside error %v", mode, out, err)
		}
		return nil
	}
	if !json.Valid(out) || !utf8.Valid(out) {
		t.Fatalf("%s: output is not valid UTF-8 JSON: %q", mode, out)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, out); err != nil || !bytes.Equal(compact.Bytes(), out) {
		t.Fatalf("%s: output is not compact: %q", mode, out)
	}
	return out
}

func checkFloat(t *testing.T, f float64, bits int) {
	t.Helper()
	var v any = f
	if bits == 32 {
		v = float32(f)
	}
	out, err := jsonform.Marshal(v, jsonform.Strict)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		if !errors.Is(err, jsonform.ErrUnsupported) {
			t.Fatalf("strict %v: %s, %v; want ErrUnsupported", f, out, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("strict %v: %v", f, err)
	}
	if want := encodingJSON(t, v); string(out) != want {
		t.Fatalf("%T %v: %s, encoding/json %s", v, v, out, want)
	}
	back, err := strconv.ParseFloat(string(out), bits)
	if err != nil || back != f && !(back == 0 && f == 0) {
		t.Fatalf("%T %v: %s reads back as %v, %v", v, v, out, back, err)
	}
}

func checkDecimal(t *testing.T, d decimal.Decimal, coef int64, exp int32) {
	t.Helper()
	out, err := jsonform.Marshal(d, jsonform.Strict)
	if err != nil {
		if exp <= 131072 && exp >= -16383 {
			t.Fatalf("decimal %de%d: %v", coef, exp, err)
		}
		return
	}
	text, err := strconv.Unquote(string(out))
	if err != nil {
		t.Fatalf("decimal %de%d: %s is not a string", coef, exp, out)
	}
	if exp < 0 {
		_, frac, ok := strings.Cut(text, ".")
		if !ok || len(frac) != int(-exp) {
			t.Fatalf("decimal %de%d: %s lost its scale", coef, exp, text)
		}
	}
	if e := int(exp); e > -decimal.MaxDecodeExponent && e < decimal.MaxDecodeExponent {
		back, err := decimal.NewFromString(text)
		if err != nil || !back.Equal(d) {
			t.Fatalf("decimal %de%d: %s reads back as %v, %v", coef, exp, text, back, err)
		}
	}
}

func checkTime(t *testing.T, at time.Time) {
	t.Helper()
	out, err := jsonform.Marshal(at, jsonform.Strict)
	if err != nil {
		return // outside RFC 3339: checked by checkMarshal to be an *Error
	}
	text, err := strconv.Unquote(string(out))
	if err != nil {
		t.Fatalf("time %v: %s is not a string", at, out)
	}
	back, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		t.Fatalf("time %v: %s does not parse: %v", at, text, err)
	}
	if _, off := at.Zone(); off%60 == 0 && !back.Equal(at) {
		t.Fatalf("time %v: %s reads back as %v", at, text, back)
	}
}
