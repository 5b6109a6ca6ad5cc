package envelope_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// TestDeclaredTypeForms: a column listed in ModelInfo.Types is rendered
// in its type's form, ahead of a scale the same declaration implies
// (numeric(10,2)[] is an array, not a decimal), and marks the spec
// Typed; a type without a form of its own (text) does not.
func TestDeclaredTypeForms(t *testing.T) {
	m := envelope.ModelInfo{Name: "Doc", Table: "docs", Columns: []string{"id", "prices", "body", "note"}, PrimaryKey: []string{"id"},
		Scales: map[string]int{"prices": 2},
		Types:  map[string]string{"prices": "numeric(10,2)[]", "body": "jsonb", "note": "text"}}
	s, err := envelope.Compile(m, envelope.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Typed() {
		t.Error("Typed() = false, want true")
	}
	c := envelope.Change{Operation: envelope.Inserted, PK: 1, OccurredAt: time.Unix(0, 0),
		After: map[string]any{"id": 1, "prices": "{1.50,NULL}", "body": `{"a": 1}`, "note": "{x}"}}
	b, err := s.AppendEnvelope(nil, &c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"after":{"id":1,"prices":["1.50",null],"body":{"a":1},"note":"{x}"}`; !strings.Contains(string(b), want) {
		t.Errorf("%s\nwant it to hold %s", b, want)
	}
	m.Types = map[string]string{"note": "text"}
	if s, err := envelope.Compile(m, envelope.Options{}); err != nil || s.Typed() {
		t.Errorf("text only: Typed() = %v (%v), want false", s != nil && s.Typed(), err)
	}
}
