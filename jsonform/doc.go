// Package jsonform owns the JSON form of Go values: the one way every value
// that herald writes into an outbox payload or header is turned into JSON.
//
// Enqueued payloads and headers are encoded in [Strict] mode, captured
// database column values in [Field] mode; the two differ for
// non-finite numbers, which have no JSON number form (strict mode rejects
// them, field mode writes the strings "NaN", "Infinity" and "-Infinity", the
// spelling PostgreSQL uses for them), for a time.Duration (seconds in strict
// mode, the stored integer nanoseconds in field mode), and for a column value whose own form
// fails (its MarshalJSON or MarshalText returns an error, a net.IP is
// neither 4 nor 16 bytes long): field mode then writes the form of what
// database/sql stores for it (driver.DefaultParameterConverter's value, so
// a net.IP of 9 bytes in a bytes column is base64 of its bytes), and
// fails only when database/sql would refuse the value too.
//
// The forms, in the order they are tried:
//
//   - nil, a nil pointer, a nil interface, map or slice: null.
//   - time.Time, and types defined as time.Time without methods of their
//     own: RFC 3339 with the offset and fractional seconds if any
//     ([time.RFC3339Nano]); a year outside 0..9999 is an error. Date-only
//     and time-only types (pgtype.Date, civil.Date, pgtype.Time) get the
//     text of their MarshalJSON, Value or MarshalText: "2026-10-06",
//     "12:00:30.250000".
//   - time.Duration: in Strict mode (payloads, headers) seconds, an exact
//     JSON number (1500ms is 1.5); in Field mode (a captured column) what
//     the column holds, the integer nanoseconds database/sql stores for it
//     (1500ms is 1500000000), as encoding/json also writes it inside a
//     JSON column.
//   - json.Number: the number itself, validated ("" is 0).
//   - json.RawMessage: the JSON itself, validated and compacted; empty is null.
//   - net.IP, *net.IPNet, netip.Addr, netip.Prefix, netip.AddrPort: their text
//     ("192.0.2.1", "192.0.2.0/24"); a zero netip value is "".
//   - decimals, as strings that keep their scale ("12.50", never "12.5"):
//     any type with Coefficient() *big.Int and Exponent() int32 (shopspring
//     decimal.Decimal), a struct of such a field named Decimal and Valid bool
//     (decimal.NullDecimal; invalid is null), pgx's pgtype.Numeric,
//     *big.Int, and *big.Rat (its exact decimal text when its denominator
//     has no prime factor but 2 and 5, otherwise "num/den"). A decimal
//     exponent beyond PostgreSQL NUMERIC's range (more than 131072 integer
//     or 16383 fractional digits) is an error, not gigabytes of zeros.
//   - *big.Float: its shortest decimal text, Text('f', -1), as a string;
//     ±Inf like a float's.
//   - uuid.UUID and any [16]byte type whose name contains "UUID" (in any
//     case), or whose String method returns the canonical text of its bytes:
//     the canonical text "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". Any other
//     [16]byte is a list of numbers.
//   - database/sql's Null[T]: V in its form when Valid, otherwise null;
//     pgx's pgtype.Float4 and pgtype.Float8: the float in its form or null.
//   - json.Marshaler: its output, validated and compacted.
//   - driver.Valuer (sql.NullString, sql.NullTime, pgtype values, …): the
//     value Value returns, in its form; nil (an invalid Null*) is null.
//   - encoding.TextMarshaler: its text, as a string.
//   - bool, integers (uintptr too), strings, and named types of them (enums):
//     the underlying value.
//   - float32, float64: the shortest number that reads back to the same
//     float, formatted like encoding/json (float32 with 32-bit precision).
//   - []byte and other byte slices: base64 (standard, padded).
//   - maps whose keys are strings, or have a string form (uuids, times,
//     decimals, encoding.TextMarshaler): objects with keys sorted bytewise
//     (two keys with one text are an error); maps with other keys: a list of
//     [key, value] pairs sorted by the key's JSON text, then the value's
//     (so map[int]T lists 10 before 2), and the output is deterministic.
//   - structs: objects, honouring json tags as encoding/json does (names,
//     "-", omitempty, omitzero, string; embedded structs promoted).
//   - slices and arrays: lists, each element in its form; a nil slice is
//     null, an empty one [].
//   - interfaces: their dynamic value.
//   - anything else (complex numbers, channels, functions, unsafe pointers)
//     has no JSON form and is an [*Error] naming the path and the Go type.
//
// Strings are escaped as encoding/json does with HTML escaping off:
// invalid UTF-8 becomes U+FFFD, and U+2028, U+2029 are escaped. The output is
// always compact, valid UTF-8 JSON. Nesting deeper than 1000 levels (which
// is how a pointer cycle shows) is an error, never a stack overflow.
//
// Guarantee: every value either has exactly one JSON form or is rejected
// with an error naming its path and type; nothing is ever stringified by
// guesswork.
//
// # Forms by declared column type
//
// A captured column whose declared database type has a text syntax of the
// database's own is rendered from that type, not from the Go value (GORM:
// the field's type: tag or data type, or for a field that declares none
// the type its table has in the database; ent: the field's SchemaType for
// the dialect):
//
//	declared type                         JSON form
//	arrays (text[], bigint[], int[][], …)  lists, nested per dimension, each
//	                                       element in its type's form, NULL
//	                                       elements null; [1:2]= bounds
//	                                       dropped; box[]'s ';' honoured
//	int4range, int8range, numrange,       {"lower","upper","lower_inc",
//	tsrange, tstzrange, daterange          "upper_inc","is_empty"}; an
//	                                       unbounded side null, not inclusive
//	int4multirange … datemultirange       lists of ranges
//	json, jsonb                           the JSON itself, embedded, also
//	                                       from a string or []byte field
//	                                       (text that is not JSON, which
//	                                       SQLite allows, stays a string)
//	point                                 {"type":"Point","coordinates":[x,y]}
//	lseg, open path                       GeoJSON LineString
//	polygon, closed path                  GeoJSON Polygon, its ring closed
//	box                                   {"high":[x,y],"low":[x,y]}
//	circle                                {"center":[x,y],"radius":r}
//	line (Ax + By + C = 0)                {"a":A,"b":B,"c":C}
//	MySQL/MariaDB point, linestring,      GeoJSON of the same type, from the
//	polygon, multipoint,                   server's SRID-prefixed WKB (the
//	multilinestring, multipolygon,         SRID dropped); a geometry column
//	geometrycollection, geometry           holding anything else (PostGIS's
//	                                       name too) keeps its Go value's
//	                                       form
//
// Array elements and range bounds: integers are numbers; float4 and
// float8 numbers (NaN and ±Inf the strings above); numeric strings as
// stored ("12.50"); booleans true and false; timestamptz RFC 3339 with its
// offset, timestamp RFC 3339 in UTC; bytea base64; json embedded; any
// other type (text, uuid, date, inet, enums) its text as a string. Every
// other declared type is rendered from the Go value as listed above.
package jsonform
