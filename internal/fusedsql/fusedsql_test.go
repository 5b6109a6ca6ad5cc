package fusedsql

import (
	"slices"
	"strings"
	"testing"

	"github.com/heraldgo/herald/jsonform"
)

// spliceReference is Splice as first written: at each step the earliest
// occurrence of any marker. Splice must cut every payload the same way.
func spliceReference(payload []byte, marks map[string]string, lit, expr func(string) string) []string {
	var parts []string
	rest := string(payload)
	for {
		at, m := -1, ""
		for k := range marks {
			if i := strings.Index(rest, k); i >= 0 && (at < 0 || i < at) {
				at, m = i, k
			}
		}
		if at < 0 {
			break
		}
		if at > 0 {
			parts = append(parts, lit(rest[:at]))
		}
		parts = append(parts, expr(marks[m]))
		rest = rest[at+len(m):]
	}
	if rest != "" {
		parts = append(parts, lit(rest))
	}
	return parts
}

func TestSplice(t *testing.T) {
	marks := Marks{}
	id := marks.Mark("pk", "id", "E(id)")
	name := marks.Mark("after", "name", "E(name)")
	note := marks.Mark("after", "note", "E(note)")
	js := func(s string) string { return string(jsonform.AppendString(nil, s)) }
	lit := func(s string) string { return "L(" + s + ")" }
	expr := func(s string) string { return "X(" + s + ")" }
	for _, tc := range []struct {
		name, payload string
		want          []string
	}{
		{"no marker", `{"a":1}`, []string{`L({"a":1})`}},
		{"markers between text", `{"pk":` + js(id) + `,"after":{"name":` + js(name) + `,"note":` + js(note) + `}}`,
			[]string{`L({"pk":)`, `X(E(id))`, `L(,"after":{"name":)`, `X(E(name))`, `L(,"note":)`, `X(E(note))`, `L(}})`}},
		{"adjacent markers, at both ends", js(id) + js(name), []string{`X(E(id))`, `X(E(name))`}},
		{"a look-alike is kept as text", `{"v":"\u0000herald:after:other\u0000","pk":` + js(id) + `}`,
			[]string{`L({"v":"\u0000herald:after:other\u0000","pk":)`, `X(E(id))`, `L(})`}},
		{"an unterminated look-alike", `{"pk":` + js(id) + `,"v":"\u0000herald:x`, []string{`L({"pk":)`, `X(E(id))`, `L(,"v":"\u0000herald:x)`}},
		{"a marker twice", js(name) + `,` + js(name), []string{`X(E(name))`, `L(,)`, `X(E(name))`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Splice([]byte(tc.payload), marks, lit, expr)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Splice(%s)\n got %q\nwant %q", tc.payload, got, tc.want)
			}
			if ref := spliceReference([]byte(tc.payload), marks, lit, expr); !slices.Equal(got, ref) {
				t.Fatalf("Splice(%s) = %q, the reference cuts it %q", tc.payload, got, ref)
			}
		})
	}
}

func BenchmarkSplice(b *testing.B) {
	marks := Marks{}
	var p strings.Builder
	p.WriteString(`{"model":"library.Loan","operation":"inserted","pk":`)
	p.WriteString(string(jsonform.AppendString(nil, marks.Mark("pk", "id", "e"))))
	p.WriteString(`,"after":{`)
	for i, c := range []string{"id", "name", "status", "amount", "version"} {
		if i > 0 {
			p.WriteByte(',')
		}
		p.WriteString(`"` + c + `":` + string(jsonform.AppendString(nil, marks.Mark("after", c, "e"))))
	}
	p.WriteString(`},"occurred_at":"2026-11-30T23:00:00.000000Z"}`)
	payload := []byte(p.String())
	id := func(s string) string { return s }
	for b.Loop() {
		Splice(payload, marks, id, id)
	}
}

func TestLiteral(t *testing.T) {
	for in, want := range map[string]string{
		``:                      `E''`,
		`{"model":"Loan","pk":`: `E'{"model":"Loan","pk":'`,
		`it's`:                  `E'it''s'`,
		`a\"b\\c`:               `E'a\\"b\\\\c'`,
		`$1 ? :x`:               `E'$1 ? :x'`,
	} {
		if got := Literal(in); got != want {
			t.Errorf("Literal(%q) = %s, want %s", in, got, want)
		}
	}
}
