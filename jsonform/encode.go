package jsonform

import (
	"bytes"
	"database/sql/driver"
	"encoding"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/uuidtext"
)

// encoderFunc appends the JSON form of v, whose type the encoder was built
// for. On error it returns an *Error whose path is relative to v; each
// container on the way up adds its segment.
type encoderFunc func(st state, dst []byte, v reflect.Value) ([]byte, *Error)

// textFunc appends the text of a value whose JSON form is a string, without
// the quotes: the same text serves as the string and as an object key.
type textFunc func(st state, dst []byte, v reflect.Value) ([]byte, *Error)

var encoderCache sync.Map // map[reflect.Type]encoderFunc

// typeEncoder returns the cached encoder for t, building it on first use.
func typeEncoder(t reflect.Type) encoderFunc {
	if f, ok := encoderCache.Load(t); ok {
		return f.(encoderFunc)
	}
	// A recursive type (type T struct{ Next *T }) asks for its own encoder
	// while it is being built; it gets this indirect one, which waits for
	// the real encoder when it is first called. Racing callers get it too,
	// briefly.
	build := sync.OnceValue(func() encoderFunc { return newTypeEncoder(t) })
	f, loaded := encoderCache.LoadOrStore(t, encoderFunc(func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		return build()(st, dst, v)
	}))
	if loaded {
		return f.(encoderFunc)
	}
	enc := build()
	encoderCache.Store(t, enc)
	return enc
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	valuerType        = reflect.TypeFor[driver.Valuer]()
	stringerType      = reflect.TypeFor[fmt.Stringer]()
	decimalType       = reflect.TypeFor[decimal]()
	shopspringType    = reflect.TypeFor[shopspringDecimal]()
	isZeroerType      = reflect.TypeFor[isZeroer]()

	durationType      = reflect.TypeFor[time.Duration]()
	numberType        = reflect.TypeFor[json.Number]()
	netIPType         = reflect.TypeFor[net.IP]()
	ipNetType         = reflect.TypeFor[net.IPNet]()
	netipAddrType     = reflect.TypeFor[netip.Addr]()
	netipPrefixType   = reflect.TypeFor[netip.Prefix]()
	netipAddrPortType = reflect.TypeFor[netip.AddrPort]()
	bigIntType        = reflect.TypeFor[big.Int]()
	bigRatType        = reflect.TypeFor[big.Rat]()
	bigFloatType      = reflect.TypeFor[big.Float]()
)

// decimal is how a decimal type is recognised without importing it:
// shopspring's decimal.Decimal has both methods, and so has any decimal
// type that keeps a coefficient and a base-10 exponent.
type decimal interface {
	Coefficient() *big.Int
	Exponent() int32
}

// shopspringDecimal lets shopspring's decimal.Decimal be written without
// copying its coefficient: NumDigits tells whether CoefficientInt64 is
// exact. Only trusted for that package, whose semantics are known.
type shopspringDecimal interface {
	decimal
	NumDigits() int
	CoefficientInt64() int64
}

const shopspringPkg = "github.com/shopspring/decimal"

type isZeroer interface{ IsZero() bool }

// newTypeEncoder builds the encoder for t: the special forms first, then
// json.Marshaler, driver.Valuer, encoding.TextMarshaler, then by kind.
func newTypeEncoder(t reflect.Type) encoderFunc {
	if enc := specialEncoder(t); enc != nil {
		return enc
	}
	return methodOrKindEncoder(t)
}

func methodOrKindEncoder(t reflect.Type) encoderFunc {
	// Pointers are followed and interfaces opened first: the methods are
	// then found on what they hold, and nil is null without calling them.
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		if ok, viaAddr := implements(t, marshalerType); ok {
			return marshalerEncoder(t, viaAddr)
		}
		if ok, viaAddr := implements(t, valuerType); ok {
			return valuerEncoder(t, viaAddr)
		}
		if ok, viaAddr := implements(t, textMarshalerType); ok {
			return textMarshalerEncoder(t, viaAddr)
		}
		// A type defined as time.Time (type Stamp time.Time) has lost its
		// methods but not its meaning: like an enum of a basic kind, it
		// takes the form of its underlying type. Only such a type converts
		// to time.Time, whose fields are unexported.
		if t.Kind() == reflect.Struct && t.ConvertibleTo(timeType) {
			return stringForm(func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
				return appendTimeText(dst, v.Convert(timeType).Interface().(time.Time))
			})
		}
	}
	return kindEncoder(t)
}

// implements reports whether values of t have the methods of iface, and
// whether only through their address (pointer receivers).
func implements(t, iface reflect.Type) (ok, viaAddr bool) {
	if t.Implements(iface) {
		return true, false
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && reflect.PointerTo(t).Implements(iface) {
		return true, true
	}
	return false, false
}

// receiver returns v as an interface value carrying its methods, and those
// of its pointer when viaAddr. A value that is not addressable is copied
// so that its pointer methods are called all the same: the form of a value
// must not depend on where it is stored.
func receiver(v reflect.Value, viaAddr bool) any {
	if v.CanAddr() {
		return v.Addr().Interface()
	}
	if viaAddr {
		p := reflect.New(v.Type())
		p.Elem().Set(v)
		return p.Interface()
	}
	return v.Interface()
}

// valueOf returns v as a T without allocating: through its address when it
// has one (Interface would copy it), else by Interface, which then shares v's
// memory.
func valueOf[T any](v reflect.Value) T {
	if v.CanAddr() {
		return *v.Addr().Interface().(*T)
	}
	return v.Interface().(T)
}

// specialEncoder returns the encoder of a type with a documented form that
// overrides its methods and kind, or nil.
func specialEncoder(t reflect.Type) encoderFunc {
	switch t {
	case durationType:
		return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
			if st.mode == Field {
				// A column holds a Duration as database/sql stores it
				// (driver.DefaultParameterConverter): int64 nanoseconds.
				return strconv.AppendInt(dst, v.Int(), 10), nil
			}
			return appendDuration(dst, time.Duration(v.Int())), nil
		}
	case numberType:
		return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
			return appendNumber(dst, v.String(), numberType)
		}
	case rawMessageType:
		return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
			return appendRawMessage(dst, v.Bytes())
		}
	case netIPType:
		return netIPEncoder
	case ipNetType:
		return stringForm(ipNetText)
	}
	if tf := textForm(t); tf != nil {
		return stringForm(tf)
	}
	if enc := uuidStringerEncoder(t); enc != nil {
		return enc
	}
	if enc := nullWrapperEncoder(t); enc != nil {
		return enc
	}
	if enc := pgtypeEncoder(t); enc != nil {
		return enc
	}
	return nil
}

// textForm returns how to write a value of t whose form is a string with a
// documented text (times, uuids, decimals, big numbers, netip values), or
// nil. The same text is the key when such a type keys a map.
func textForm(t reflect.Type) textFunc {
	switch t {
	case timeType:
		return timeText
	case netipAddrType, netipPrefixType, netipAddrPortType:
		return netipText
	case bigIntType:
		return bigIntText
	case bigRatType:
		return bigRatText
	case bigFloatType:
		return bigFloatText
	}
	if isUUIDType(t) {
		return uuidText
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		if ok, viaAddr := implements(t, decimalType); ok {
			return decimalText(t, viaAddr)
		}
	}
	return nil
}

// stringForm makes an encoder of a textFunc: the text, quoted, escaped if
// it holds anything that needs it (an IPv6 zone might).
func stringForm(tf textFunc) encoderFunc {
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		start := len(dst)
		out, err := tf(st, append(dst, '"'), v)
		if err != nil {
			return dst[:start], err
		}
		if text := out[start+1:]; needsEscape(text) {
			return appendString(out[:start], string(text)), nil
		}
		return append(out, '"'), nil
	}
}

func timeText(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
	return appendTimeText(dst, valueOf[time.Time](v))
}

func netipText(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
	switch x := receiver(v, false).(type) {
	case *netip.Addr:
		return x.AppendTo(dst), nil
	case netip.Addr:
		return x.AppendTo(dst), nil
	case *netip.AddrPort:
		return x.AppendTo(dst), nil
	case netip.AddrPort:
		return x.AppendTo(dst), nil
	case *netip.Prefix:
		return appendPrefix(dst, *x)
	case netip.Prefix:
		return appendPrefix(dst, x)
	}
	return dst, unsupported(v.Type())
}

func appendPrefix(dst []byte, p netip.Prefix) ([]byte, *Error) {
	if p != (netip.Prefix{}) && !p.IsValid() {
		return dst, newError(netipPrefixType, "invalid netip.Prefix (prefix length out of range)")
	}
	return p.AppendTo(dst), nil
}

func netIPEncoder(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
	if v.IsNil() {
		return append(dst, "null"...), nil
	}
	ip := v.Bytes()
	switch len(ip) {
	case 0:
		return append(dst, `""`...), nil
	case net.IPv4len, net.IPv6len:
		// net.IP.String writes an IPv4-mapped IPv6 address as IPv4; Unmap
		// does the same, and netip appends without allocating.
		addr, _ := netip.AddrFromSlice(ip)
		dst = append(dst, '"')
		dst = addr.Unmap().AppendTo(dst)
		return append(dst, '"'), nil
	}
	e := newError(v.Type(), "invalid net.IP of "+strconv.Itoa(len(ip))+" bytes")
	e.ownForm = true
	return dst, e
}

func ipNetText(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
	n := valueOf[net.IPNet](v)
	s := n.String()
	if s == "<nil>" {
		return dst, newError(ipNetType, "invalid net.IPNet (no IP or mask of its length)")
	}
	return append(dst, s...), nil
}

func bigIntText(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
	x := receiver(v, true).(*big.Int)
	return x.Append(dst, 10), nil
}

var bigOne, bigFive = big.NewInt(1), big.NewInt(5)

// bigRatText writes the exact decimal text of a rational whose denominator
// is 2^a·5^b ("0.125", with max(a, b) decimals), and "num/den" for one that
// has no finite decimal expansion ("1/3").
func bigRatText(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
	x := receiver(v, true).(*big.Rat)
	if x.IsInt() {
		return x.Num().Append(dst, 10), nil
	}
	rest := new(big.Int).Set(x.Denom())
	twos := rest.TrailingZeroBits()
	rest.Rsh(rest, twos)
	fives := uint(0)
	q, r := new(big.Int), new(big.Int)
	for {
		q.QuoRem(rest, bigFive, r)
		if r.Sign() != 0 {
			break
		}
		rest, q = q, rest
		fives++
	}
	if rest.Cmp(bigOne) != 0 {
		return append(dst, x.RatString()...), nil
	}
	return append(dst, x.FloatString(int(max(twos, fives)))...), nil
}

// A big.Float's shortest decimal text has about log10(2) digits per bit of
// exponent; these bounds keep it within PostgreSQL NUMERIC's range, as for
// decimals.
const (
	maxBigFloatExp = 435411 // 131072 integer digits
	minBigFloatExp = -54422 // 16383 fractional digits
)

func bigFloatText(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
	x := receiver(v, true).(*big.Float)
	if x.IsInf() {
		if st.mode == Field {
			if x.Sign() > 0 {
				return append(dst, "Infinity"...), nil
			}
			return append(dst, "-Infinity"...), nil
		}
		if x.Sign() > 0 {
			return dst, newError(v.Type(), "+Inf is not a JSON number")
		}
		return dst, newError(v.Type(), "-Inf is not a JSON number")
	}
	if exp := x.MantExp(nil); exp > maxBigFloatExp || exp < minBigFloatExp {
		return dst, newError(v.Type(), "big.Float binary exponent "+strconv.Itoa(exp)+
			" is beyond the range of PostgreSQL NUMERIC (131072 integer, 16383 fractional digits)")
	}
	return x.Append(dst, 'f', -1), nil
}

func decimalText(t reflect.Type, viaAddr bool) textFunc {
	// shopspring's Coefficient copies a big.Int; for the usual decimal of
	// at most 18 digits its int64 accessors give the same without a copy.
	fast := t.PkgPath() == shopspringPkg && t.Implements(shopspringType)
	return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
		d := receiver(v, viaAddr).(decimal)
		if fast {
			if s := d.(shopspringDecimal); s.NumDigits() <= 18 {
				return appendDecimalInt64(dst, s.CoefficientInt64(), s.Exponent(), t)
			}
		}
		return appendDecimalBig(dst, d.Coefficient(), d.Exponent(), t)
	}
}

// isUUIDType reports whether t is a 16-byte array named like a UUID
// (uuid.UUID, gofrs' uuid.UUID, a local type UserUUID…).
func isUUIDType(t reflect.Type) bool {
	return isByteArray16(t) && strings.Contains(strings.ToLower(t.Name()), "uuid")
}

func isByteArray16(t reflect.Type) bool {
	return t.Kind() == reflect.Array && t.Len() == 16 && t.Elem().Kind() == reflect.Uint8
}

func arrayBytes16(v reflect.Value) [16]byte {
	var u [16]byte
	for i := range u {
		u[i] = byte(v.Index(i).Uint())
	}
	return u
}

func uuidText(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
	return uuidtext.Append(dst, arrayBytes16(v)), nil
}

// uuidStringerEncoder handles a 16-byte array type not named like a UUID
// but with a String method: a value whose String is the canonical UUID
// text of its bytes is written as that text, any other value as it would
// be without this rule.
func uuidStringerEncoder(t reflect.Type) encoderFunc {
	if !isByteArray16(t) {
		return nil
	}
	ok, viaAddr := implements(t, stringerType)
	if !ok {
		return nil
	}
	otherwise := methodOrKindEncoder(t)
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		u := arrayBytes16(v)
		if isUUIDText(receiver(v, viaAddr).(fmt.Stringer).String(), u) {
			return appendUUID(dst, u), nil
		}
		return otherwise(st, dst, v)
	}
}

// nullWrapperEncoder handles nullable wrappers whose own methods would lose
// the wrapped value's form: database/sql's Null[T] (its Value converts V to
// a driver value: a decimal to "12.5") and decimal.NullDecimal-like structs
// {Decimal; Valid bool} (its MarshalJSON drops the scale). Valid: the value
// in its form; otherwise null.
func nullWrapperEncoder(t reflect.Type) encoderFunc {
	if t.Kind() != reflect.Struct || t.NumField() != 2 {
		return nil
	}
	value, valid := t.Field(0), t.Field(1)
	if valid.Name != "Valid" || valid.Type.Kind() != reflect.Bool {
		return nil
	}
	switch {
	case t.PkgPath() == "database/sql" && strings.HasPrefix(t.Name(), "Null[") && value.Name == "V":
	case value.Name == "Decimal" && value.Type.Kind() != reflect.Pointer && value.Type.Kind() != reflect.Interface &&
		(value.Type.Implements(decimalType) || reflect.PointerTo(value.Type).Implements(decimalType)):
	default:
		return nil
	}
	return nullableField(value.Type, 0, 1)
}

func nullableField(vt reflect.Type, value, valid int) encoderFunc {
	enc := typeEncoder(vt)
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		if !v.Field(valid).Bool() {
			return append(dst, "null"...), nil
		}
		return enc(st, dst, v.Field(value))
	}
}

const pgtypePkg = "github.com/jackc/pgx/v5/pgtype"

// pgtypeEncoder handles pgx's pgtype.Numeric (a decimal, written as one:
// "12.50", not the bare number its MarshalJSON writes) and pgtype.Float4 and
// Float8 (whose MarshalJSON fails on NaN even for a column that holds it).
// The types are recognised by package path, name and fields, so pgx need
// not be imported; a layout that differs falls back to the general rules.
func pgtypeEncoder(t reflect.Type) encoderFunc {
	if t.Kind() != reflect.Struct || t.PkgPath() != pgtypePkg {
		return nil
	}
	field := func(name string, kind reflect.Kind) int {
		f, ok := t.FieldByName(name)
		if !ok || len(f.Index) != 1 || f.Type.Kind() != kind {
			return -1
		}
		return f.Index[0]
	}
	switch t.Name() {
	case "Float4":
		if value, valid := field("Float32", reflect.Float32), field("Valid", reflect.Bool); value >= 0 && valid >= 0 {
			return nullableField(float32Type, value, valid)
		}
	case "Float8":
		if value, valid := field("Float64", reflect.Float64), field("Valid", reflect.Bool); value >= 0 && valid >= 0 {
			return nullableField(float64Type, value, valid)
		}
	case "Numeric":
		num, exp := field("Int", reflect.Pointer), field("Exp", reflect.Int32)
		nan, inf, valid := field("NaN", reflect.Bool), field("InfinityModifier", reflect.Int8), field("Valid", reflect.Bool)
		if num < 0 || exp < 0 || nan < 0 || inf < 0 || valid < 0 || t.Field(num).Type != reflect.TypeFor[*big.Int]() {
			return nil
		}
		return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
			switch {
			case !v.Field(valid).Bool():
				return append(dst, "null"...), nil
			case v.Field(nan).Bool():
				return appendNonFinite(st, dst, true, false, t)
			case v.Field(inf).Int() != 0:
				return appendNonFinite(st, dst, false, v.Field(inf).Int() > 0, t)
			}
			c := v.Field(num).Interface().(*big.Int)
			start := len(dst)
			out, err := appendDecimalBig(append(dst, '"'), c, int32(v.Field(exp).Int()), t)
			if err != nil {
				return dst[:start], err
			}
			return append(out, '"'), nil
		}
	}
	return nil
}

func marshalerEncoder(t reflect.Type, viaAddr bool) encoderFunc {
	return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
		raw, err := receiver(v, viaAddr).(json.Marshaler).MarshalJSON()
		if err != nil {
			return dst, &Error{Type: typeName(t), Reason: "MarshalJSON failed: " + err.Error(), Err: err, ownForm: true}
		}
		out, e := appendJSON(dst, raw, t, "MarshalJSON output")
		if e != nil {
			e.ownForm = true
		}
		return out, e
	}
}

func valuerEncoder(t reflect.Type, viaAddr bool) encoderFunc {
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		x, err := receiver(v, viaAddr).(driver.Valuer).Value()
		if err != nil {
			return dst, &Error{Type: typeName(t), Reason: "Value failed: " + err.Error(), Err: err}
		}
		if x == nil {
			return append(dst, "null"...), nil
		}
		// A Valuer that returns itself would be asked again forever.
		if xt := reflect.TypeOf(x); xt == t || xt == reflect.PointerTo(t) {
			return dst, newError(t, "driver.Valuer returned its own type")
		}
		st, e := st.enter(t)
		if e != nil {
			return dst, e
		}
		return appendAny(st, dst, x)
	}
}

func textMarshalerEncoder(t reflect.Type, viaAddr bool) encoderFunc {
	return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
		text, err := receiver(v, viaAddr).(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return dst, &Error{Type: typeName(t), Reason: "MarshalText failed: " + err.Error(), Err: err, ownForm: true}
		}
		return appendString(dst, text), nil
	}
}

func kindEncoder(t reflect.Type) encoderFunc {
	switch t.Kind() {
	case reflect.Bool:
		return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
			return strconv.AppendBool(dst, v.Bool()), nil
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
			return strconv.AppendInt(dst, v.Int(), 10), nil
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
			return strconv.AppendUint(dst, v.Uint(), 10), nil
		}
	case reflect.Float32:
		return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
			return appendFloat(st, dst, v.Float(), 32, v.Type())
		}
	case reflect.Float64:
		return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
			return appendFloat(st, dst, v.Float(), 64, v.Type())
		}
	case reflect.String:
		return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
			return appendString(dst, v.String()), nil
		}
	case reflect.Interface:
		return interfaceEncoder
	case reflect.Pointer:
		return pointerEncoder(t)
	case reflect.Struct:
		return structEncoder(t)
	case reflect.Map:
		return mapEncoder(t)
	case reflect.Slice:
		return sliceEncoder(t)
	case reflect.Array:
		return listEncoder(t)
	}
	// Complex numbers, channels, functions, unsafe pointers.
	return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
		return dst, unsupported(v.Type())
	}
}

func interfaceEncoder(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
	if v.IsNil() {
		return append(dst, "null"...), nil
	}
	st, err := st.enter(v.Type())
	if err != nil {
		return dst, err
	}
	e := v.Elem()
	return typeEncoder(e.Type())(st, dst, e)
}

func pointerEncoder(t reflect.Type) encoderFunc {
	elem := typeEncoder(t.Elem())
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		st, err := st.enter(t)
		if err != nil {
			return dst, err
		}
		return elem(st, dst, v.Elem())
	}
}

func sliceEncoder(t reflect.Type) encoderFunc {
	// Like encoding/json, a slice of a byte kind is base64 unless its
	// element has methods that give it another form.
	if et := t.Elem(); et.Kind() == reflect.Uint8 {
		p := reflect.PointerTo(et)
		if !p.Implements(marshalerType) && !p.Implements(textMarshalerType) && !p.Implements(valuerType) {
			return func(_ state, dst []byte, v reflect.Value) ([]byte, *Error) {
				if v.IsNil() {
					return append(dst, "null"...), nil
				}
				return appendBase64(dst, v.Bytes()), nil
			}
		}
	}
	return listEncoder(t)
}

func listEncoder(t reflect.Type) encoderFunc {
	elem := typeEncoder(t.Elem())
	nilable := t.Kind() == reflect.Slice
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		if nilable && v.IsNil() {
			return append(dst, "null"...), nil
		}
		st, err := st.enter(t)
		if err != nil {
			return dst, err
		}
		dst = append(dst, '[')
		for i, n := 0, v.Len(); i < n; i++ {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = elem(st, dst, v.Index(i)); err != nil {
				return dst, err.atIndex(i)
			}
		}
		return append(dst, ']'), nil
	}
}

// keyFunc returns the object key of a map key.
type keyFunc func(st state, k reflect.Value) (string, *Error)

// mapEncoder writes maps whose keys have a string form as objects with
// sorted keys, and others as sorted lists of [key, value] pairs.
func mapEncoder(t reflect.Type) encoderFunc {
	kt := t.Key()
	if kt.Kind() == reflect.String {
		return objectEncoder(t, func(_ state, k reflect.Value) (string, *Error) { return k.String(), nil }, false)
	}
	if tf := textForm(kt); tf != nil {
		return objectEncoder(t, func(st state, k reflect.Value) (string, *Error) {
			b, err := tf(st, nil, k)
			return string(b), err
		}, true)
	}
	if kt.Implements(textMarshalerType) {
		return objectEncoder(t, func(_ state, k reflect.Value) (string, *Error) {
			if (k.Kind() == reflect.Pointer || k.Kind() == reflect.Interface) && k.IsNil() {
				return "", nil // as encoding/json does
			}
			text, err := k.Interface().(encoding.TextMarshaler).MarshalText()
			if err != nil {
				return "", &Error{Type: typeName(k.Type()), Reason: "MarshalText of map key failed: " + err.Error(), Err: err}
			}
			return string(text), nil
		}, true)
	}
	return pairsEncoder(t)
}

type mapEntry struct {
	key string
	val reflect.Value
}

func objectEncoder(t reflect.Type, keyOf keyFunc, mayCollide bool) encoderFunc {
	elem := typeEncoder(t.Elem())
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		st, err := st.enter(t)
		if err != nil {
			return dst, err
		}
		entries := make([]mapEntry, 0, v.Len())
		for it := v.MapRange(); it.Next(); {
			key, err := keyOf(st, it.Key())
			if err != nil {
				return dst, err
			}
			entries = append(entries, mapEntry{key, it.Value()})
		}
		slices.SortFunc(entries, func(a, b mapEntry) int { return strings.Compare(a.key, b.key) })
		dst = append(dst, '{')
		for i := range entries {
			if i > 0 {
				// Distinct keys of a type other than string may share a text
				// (a MarshalText that ignores part of the value): an object
				// cannot hold both.
				if mayCollide && entries[i].key == entries[i-1].key {
					return dst, newError(t, "two map keys have the same text "+strconv.Quote(entries[i].key))
				}
				dst = append(dst, ',')
			}
			dst = appendString(dst, entries[i].key)
			dst = append(dst, ':')
			if dst, err = elem(st, dst, entries[i].val); err != nil {
				return dst, err.atKey(entries[i].key)
			}
		}
		return append(dst, '}'), nil
	}
}

// pairSpan locates one encoded key and value in a scratch buffer.
type pairSpan struct{ keyStart, keyEnd, end int }

func pairsEncoder(t reflect.Type) encoderFunc {
	keyEnc, elem := typeEncoder(t.Key()), typeEncoder(t.Elem())
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		if v.IsNil() {
			return append(dst, "null"...), nil
		}
		st, err := st.enter(t)
		if err != nil {
			return dst, err
		}
		var scratch []byte
		pairs := make([]pairSpan, 0, v.Len())
		for it := v.MapRange(); it.Next(); {
			p := pairSpan{keyStart: len(scratch)}
			if scratch, err = keyEnc(st, scratch, it.Key()); err != nil {
				return dst, err
			}
			p.keyEnd = len(scratch)
			if scratch, err = elem(st, scratch, it.Value()); err != nil {
				return dst, err.atBracket(string(scratch[p.keyStart:p.keyEnd]))
			}
			p.end = len(scratch)
			pairs = append(pairs, p)
		}
		// Sorted by the key's JSON text, then the value's: keys with one
		// text (NaN keys, in field mode) still come out in one order.
		slices.SortFunc(pairs, func(a, b pairSpan) int {
			if c := bytes.Compare(scratch[a.keyStart:a.keyEnd], scratch[b.keyStart:b.keyEnd]); c != 0 {
				return c
			}
			return bytes.Compare(scratch[a.keyEnd:a.end], scratch[b.keyEnd:b.end])
		})
		dst = append(dst, '[')
		for i, p := range pairs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = append(dst, scratch[p.keyStart:p.keyEnd]...)
			dst = append(dst, ',')
			dst = append(dst, scratch[p.keyEnd:p.end]...)
			dst = append(dst, ']')
		}
		return append(dst, ']'), nil
	}
}
