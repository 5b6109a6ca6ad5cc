package topictemplate_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/topictemplate"
)

func TestTemplateRender(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0192f3a4-5b6c-7d8e-9f00-112233445566")
	cases := []struct {
		tmpl string
		vars topictemplate.Vars
		want string
	}{
		{envelope.DefaultTopic, topictemplate.Vars{Namespace: "library", Model: "Loan", Operation: "updated"}, "library.loan.updated"},
		{envelope.DefaultTopic, topictemplate.Vars{Model: "Loan", Operation: "updated"}, "loan.updated"},
		{envelope.DefaultTopic, topictemplate.Vars{Model: "LoanItem", Operation: "inserted"}, "loan_item.inserted"},
		{envelope.DefaultOrderingKey, topictemplate.Vars{Namespace: "library", Model: "Loan", PK: []any{int64(7)}}, "library.Loan:7"},
		{envelope.DefaultOrderingKey, topictemplate.Vars{Model: "Loan", PK: []any{7}}, "Loan:7"},
		{envelope.DefaultOrderingKey, topictemplate.Vars{Model: "Seat", PK: []any{"a", 3}}, "Seat:a:3"},
		{"{table}/{pk}", topictemplate.Vars{Table: "users", PK: []any{id}}, "users/" + id.String()},
		{"{table}.{operation}", topictemplate.Vars{Table: "loans", Operation: "deleted"}, "loans.deleted"},
		{"x.{namespace}.y", topictemplate.Vars{}, "x.y"},
		{"static", topictemplate.Vars{}, "static"},
	}
	for _, c := range cases {
		tp, err := topictemplate.Parse(c.tmpl)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.tmpl, err)
		}
		if got := tp.Render(c.vars); got != c.want {
			t.Errorf("Render(%q, %+v) = %q, want %q", c.tmpl, c.vars, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"{app}.{model}", "{model", "model}", "{}", "{Model}"} {
		if _, err := topictemplate.Parse(s); err == nil || !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Errorf("Parse(%q) = %v, want an error quoting the template", s, err)
		}
	}
}

func FuzzTemplate(f *testing.F) {
	for _, s := range []string{envelope.DefaultTopic, envelope.DefaultOrderingKey, "{table}.{operation}", "{", "}", "{x}", "a{pk}b{pk}", "{namespace}.{namespace}"} {
		f.Add(s, "library", "Loan", "x:y")
	}
	f.Fuzz(func(t *testing.T, tmpl, ns, model, pk string) {
		tp, err := topictemplate.Parse(tmpl)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(tmpl)) {
				t.Fatalf("error %q does not quote the template", err)
			}
			return
		}
		out := tp.Render(topictemplate.Vars{Namespace: ns, Model: model, Table: "t", Operation: "updated", PK: []any{pk}})
		if strings.ContainsAny(tmpl, "{}") == false && out != tmpl {
			t.Fatalf("literal template %q rendered as %q", tmpl, out)
		}
		k := names.LimitKey(out, envelope.MaxKeyLength)
		if utf8.ValidString(out) && utf8.RuneCountInString(k) > envelope.MaxKeyLength {
			t.Fatalf("LimitKey gave %d characters", utf8.RuneCountInString(k))
		}
	})
}
