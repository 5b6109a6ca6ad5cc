package entcapture

import (
	"errors"
	"strings"
	"testing"

	"entgo.io/ent"
	"entgo.io/ent/entc/gen"
	"entgo.io/ent/entc/load"
	"entgo.io/ent/schema/field"

	"github.com/heraldgo/herald/envelope"
)

type genLoan struct {
	ent.Schema
	opts envelope.Options
}

func (genLoan) Fields() []ent.Field { return []ent.Field{field.String("status")} }

func (s genLoan) Mixin() []ent.Mixin { return []ent.Mixin{Mixin(s.opts)} }

func graphOf(t *testing.T, s ent.Interface, features ...gen.Feature) *gen.Graph {
	t.Helper()
	b, err := load.MarshalSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := load.UnmarshalSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	ls.Name = "Loan"
	storage, err := gen.NewStorage("sql")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gen.NewGraph(&gen.Config{Package: "example.com/x/ent", Storage: storage, Features: features}, ls)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGenerationChecks: code generation fails, naming the schema and the
// option, for a declaration it can see is wrong, and for the features
// capture needs when they are not enabled.
func TestGenerationChecks(t *testing.T) {
	t.Parallel()
	all := []gen.Feature{gen.FeatureExecQuery, gen.FeatureUpsert}
	for _, c := range []struct {
		name     string
		opts     envelope.Options
		features []gen.Feature
		want     string
	}{
		{"unknown field", envelope.Options{Fields: []string{"nope"}}, all, `Loan Options.Fields: no column "nope"`},
		{"unknown exclude", envelope.Options{Exclude: []string{"nope"}}, all, `Loan Options.Exclude: no column "nope"`},
		{"unknown template name", envelope.Options{Topic: "{nope}"}, all, "Loan Options.Topic"},
		{"feature off", envelope.Options{}, []gen.Feature{gen.FeatureUpsert}, "sql/execquery"},
	} {
		err := check(graphOf(t, genLoan{opts: c.opts}, c.features...))
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrConfiguration containing %q", c.name, err, c.want)
		}
	}
	if err := check(graphOf(t, genLoan{opts: envelope.Options{Fields: []string{"status"}}}, all...)); err != nil {
		t.Errorf("a good declaration: %v", err)
	}
}
