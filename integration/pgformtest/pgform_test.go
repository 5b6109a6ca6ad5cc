package pgform_test

import (
	"encoding/json"
	"testing"

	"github.com/lib/pq"

	"github.com/heraldgo/herald/internal/pgform"
)

// TestForms renders values of each declared type from the text
// PostgreSQL 15 prints for them (SELECT v::text) and from Go values.
func TestForms(t *testing.T) {
	str := func(s string) *string { return &s }
	cases := []struct {
		decl string
		v    any
		want string
	}{
		{"text[]", `{"a b","c\"d",NULL,"NULL","x\\y",""}`, `["a b","c\"d",null,"NULL","x\\y",""]`},
		{"text[]", pq.StringArray{"a", "b,c"}, `["a","b,c"]`},
		{"bigint[]", pq.Int64Array{1, 2}, `[1,2]`},
		{"integer[]", `{{1,2},{3,NULL}}`, `[[1,2],[3,null]]`},
		{"int[][]", `{{1,2},{3,NULL}}`, `[[1,2],[3,null]]`},
		{"INTEGER ARRAY", `{1}`, `[1]`},
		{"_int4", `{1}`, `[1]`},
		{"int4[]", `[0:1]={7,8}`, `[7,8]`},
		{"int[]", `{}`, `[]`},
		{"text[]", `{{a}}`, `[["a"]]`},
		{"uuid[]", `{5f0f2e1c-8d6a-4a52-9d6a-2a0c4b0e8f11}`, `["5f0f2e1c-8d6a-4a52-9d6a-2a0c4b0e8f11"]`},
		{"float8[]", `{1.5,NaN,Infinity,-Infinity}`, `[1.5,"NaN","Infinity","-Infinity"]`},
		{"real[]", `{0.1}`, `[0.1]`},
		{"numeric(10,2)[]", `{12.50,NaN}`, `["12.50","NaN"]`},
		{"boolean[]", `{t,f,NULL}`, `[true,false,null]`},
		{"jsonb[]", `{"{\"a\": 1}"}`, `[{"a":1}]`},
		{"timestamptz[]", `{"2026-01-01 08:00:00.5+00"}`, `["2026-01-01T08:00:00.5Z"]`},
		{"timestamptz[]", `{"2026-01-01 08:00:00+05:30",infinity}`, `["2026-01-01T08:00:00+05:30","infinity"]`},
		{"timestamp[]", `{"2026-01-01 10:00:00.5"}`, `["2026-01-01T10:00:00.5Z"]`},
		{"date[]", `{2026-01-01}`, `["2026-01-01"]`},
		{"bytea[]", `{"\\x0102"}`, `["AQI="]`},
		{"box[]", `{(3,4),(1,2);(1,1),(0,0)}`, `[{"high":[3,4],"low":[1,2]},{"high":[1,1],"low":[0,0]}]`},
		{"point[]", `{"(1,2)"}`, `[{"type":"Point","coordinates":[1,2]}]`},
		{"tstzrange[]", `{"[\"2026-01-01 00:00:00+00\",\"2026-02-01 00:00:00+00\")"}`,
			`[{"lower":"2026-01-01T00:00:00Z","upper":"2026-02-01T00:00:00Z","lower_inc":true,"upper_inc":false,"is_empty":false}]`},
		{"text[]", []string{"a", "b"}, `["a","b"]`},
		{"int[][]", [][]int64{{1}, {2, 3}}, `[[1],[2,3]]`},
		{"text[]", nil, `null`},
		{"text[]", (*pq.StringArray)(nil), `null`},
		{"int4range", `[1,3)`, `{"lower":1,"upper":3,"lower_inc":true,"upper_inc":false,"is_empty":false}`},
		{"int4range", `(,5)`, `{"lower":null,"upper":5,"lower_inc":false,"upper_inc":false,"is_empty":false}`},
		{"int8range", `empty`, `{"lower":null,"upper":null,"lower_inc":false,"upper_inc":false,"is_empty":true}`},
		{"numrange", `[1.5,2.5]`, `{"lower":"1.5","upper":"2.5","lower_inc":true,"upper_inc":true,"is_empty":false}`},
		{"tstzrange", `["2026-01-01 00:00:00+00","2026-02-01 00:00:00+00")`,
			`{"lower":"2026-01-01T00:00:00Z","upper":"2026-02-01T00:00:00Z","lower_inc":true,"upper_inc":false,"is_empty":false}`},
		{"daterange", `[2026-01-01,2026-01-05)`, `{"lower":"2026-01-01","upper":"2026-01-05","lower_inc":true,"upper_inc":false,"is_empty":false}`},
		{"int4multirange", `{[1,3),[5,7)}`, `[{"lower":1,"upper":3,"lower_inc":true,"upper_inc":false,"is_empty":false},` +
			`{"lower":5,"upper":7,"lower_inc":true,"upper_inc":false,"is_empty":false}]`},
		{"int4multirange", `{}`, `[]`},
		{"tstzmultirange", `{["2026-01-01 00:00:00+00",)}`,
			`[{"lower":"2026-01-01T00:00:00Z","upper":null,"lower_inc":true,"upper_inc":false,"is_empty":false}]`},
		{"jsonb", `{"b": [1, 2], "a": null}`, `{"b":[1,2],"a":null}`},
		{"json", []byte(`[1, "x"]`), `[1,"x"]`},
		{"JSON", str(`{"k":true}`), `{"k":true}`},
		{"json", `not json`, `"not json"`},
		{"jsonb", json.RawMessage(`{"a":1}`), `{"a":1}`},
		{"jsonb", map[string]int{"a": 1}, `{"a":1}`},
		{"point", `(1,2)`, `{"type":"Point","coordinates":[1,2]}`},
		{"lseg", `[(1,2),(3,4)]`, `{"type":"LineString","coordinates":[[1,2],[3,4]]}`},
		{"path", `[(1,2),(3,4)]`, `{"type":"LineString","coordinates":[[1,2],[3,4]]}`},
		{"path", `((0,0),(1,1),(1,0))`, `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,0]]]}`},
		{"polygon", `((0,0),(1,1),(1,0))`, `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,0]]]}`},
		{"box", `(3,4),(1,2)`, `{"high":[3,4],"low":[1,2]}`},
		{"circle", `<(1,2),3>`, `{"center":[1,2],"radius":3}`},
		{"line", `{1,2,3}`, `{"a":1,"b":2,"c":3}`},
		{"point", `(1.5e+20,-0.25)`, `{"type":"Point","coordinates":[150000000000000000000,-0.25]}`},
		{"text", "plain", `"plain"`}, // not this package's: jsonform's
	}
	for _, c := range cases {
		got, err := pgform.Append(nil, "col", c.decl, c.v)
		if err != nil {
			t.Errorf("%s %#v: %v", c.decl, c.v, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s %#v:\n got  %s\n want %s", c.decl, c.v, got, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("%s %#v: invalid JSON %s", c.decl, c.v, got)
		}
	}
}

// TestBadText: text that is not the declared type's is an error naming the
// column and the type, never a guess.
func TestBadText(t *testing.T) {
	for _, c := range []struct{ decl, v string }{
		{"int[]", `{a}`}, {"int[]", `{1`}, {"int[]", `1,2`}, {"int4range", `[1,2,3)`}, {"point", `(1)`}, {"circle", `<(1,2)>`},
		{"bool[]", `{maybe}`}, {"text[]", `{"a}`},
	} {
		if got, err := pgform.Append(nil, "col", c.decl, c.v); err == nil {
			t.Errorf("%s %q: %s, want an error", c.decl, c.v, got)
		}
	}
}

func TestHandles(t *testing.T) {
	for decl, want := range map[string]bool{
		"text[]": true, "jsonb": true, "JSON": true, "tstzrange": true, "point": true, "box": true, "int4multirange": true,
		"text": false, "numeric(10,2)": false, "timestamptz(3)": false, "uuid": false, "": false,
	} {
		if got := pgform.Handles(decl); got != want {
			t.Errorf("Handles(%q) = %v, want %v", decl, got, want)
		}
	}
}
