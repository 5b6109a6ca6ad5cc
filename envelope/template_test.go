package envelope_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
)

func TestTemplateRender(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0192f3a4-5b6c-7d8e-9f00-112233445566")
	cases := []struct {
		tmpl string
		vars envelope.TemplateVars
		want string
	}{
		{envelope.DefaultTopic, envelope.TemplateVars{Namespace: "library", Model: "Loan", Operation: envelope.Updated}, "library.loan.updated"},
		{envelope.DefaultTopic, envelope.TemplateVars{Model: "Loan", Operation: envelope.Updated}, "loan.updated"},
		{envelope.DefaultTopic, envelope.TemplateVars{Model: "LoanItem", Operation: envelope.Inserted}, "loan_item.inserted"},
		{envelope.DefaultOrderingKey, envelope.TemplateVars{Namespace: "library", Model: "Loan", PK: []any{int64(7)}}, "library.Loan:7"},
		{envelope.DefaultOrderingKey, envelope.TemplateVars{Model: "Loan", PK: []any{7}}, "Loan:7"},
		{envelope.DefaultOrderingKey, envelope.TemplateVars{Model: "Seat", PK: []any{"a", 3}}, "Seat:a:3"},
		{"{table}/{pk}", envelope.TemplateVars{Table: "users", PK: []any{id}}, "users/" + id.String()},
		{"{table}.{operation}", envelope.TemplateVars{Table: "loans", Operation: envelope.Deleted}, "loans.deleted"},
		{"x.{namespace}.y", envelope.TemplateVars{}, "x.y"},
		{"static", envelope.TemplateVars{}, "static"},
	}
	for _, c := range cases {
		tp, err := envelope.ParseTemplate("Topic", c.tmpl)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", c.tmpl, err)
		}
		if got := tp.Render(c.vars); got != c.want {
			t.Errorf("Render(%q, %+v) = %q, want %q", c.tmpl, c.vars, got, c.want)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"{app}.{model}", "{model", "model}", "{}", "{Model}"} {
		_, err := envelope.ParseTemplate("Options.Topic", s)
		if !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("ParseTemplate(%q) = %v, want ErrConfiguration", s, err)
			continue
		}
		if !strings.Contains(err.Error(), "Options.Topic") {
			t.Errorf("error %q does not name the option", err)
		}
	}
}

func TestSnakeCase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Loan": "loan", "LoanItem": "loan_item", "HTTPRequest": "http_request", "UserID": "user_id",
		"A": "a", "ABC": "abc", "Item2Go": "item2_go", "already_snake": "already_snake",
	} {
		if got := names.SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLimitKey(t *testing.T) {
	t.Parallel()
	short := strings.Repeat("k", 255)
	if got := names.LimitKey(short, envelope.MaxKeyLength); got != short {
		t.Fatalf("a 255-character key changed")
	}
	for _, long := range []string{strings.Repeat("k", 256), strings.Repeat("ключ", 100)} {
		got := names.LimitKey(long, envelope.MaxKeyLength)
		if n := utf8.RuneCountInString(got); n != 255 {
			t.Fatalf("limited key has %d characters, want 255", n)
		}
		sum := sha256.Sum256([]byte(long))
		suffix := "#" + hex.EncodeToString(sum[:])
		if !strings.HasSuffix(got, suffix) {
			t.Fatalf("limited key %q does not end with #sha256", got)
		}
		if !strings.HasPrefix(long, strings.TrimSuffix(got, suffix)) {
			t.Fatalf("limited key does not keep the start of the key")
		}
		if !utf8.ValidString(got) {
			t.Fatalf("limited key is not valid UTF-8")
		}
	}
	if names.LimitKey(strings.Repeat("a", 300), envelope.MaxKeyLength) == names.LimitKey(strings.Repeat("a", 299)+"b", envelope.MaxKeyLength) {
		t.Fatal("two long keys with the same start collide")
	}
}

func FuzzTemplate(f *testing.F) {
	for _, s := range []string{envelope.DefaultTopic, envelope.DefaultOrderingKey, "{table}.{operation}", "{", "}", "{x}", "a{pk}b{pk}", "{namespace}.{namespace}"} {
		f.Add(s, "library", "Loan", "x:y")
	}
	f.Fuzz(func(t *testing.T, tmpl, ns, model, pk string) {
		tp, err := envelope.ParseTemplate("Topic", tmpl)
		if err != nil {
			if !errors.Is(err, envelope.ErrConfiguration) {
				t.Fatalf("error not ErrConfiguration: %v", err)
			}
			return
		}
		out := tp.Render(envelope.TemplateVars{Namespace: ns, Model: model, Table: "t", Operation: envelope.Updated, PK: []any{pk}})
		if strings.ContainsAny(tmpl, "{}") == false && out != tmpl {
			t.Fatalf("literal template %q rendered as %q", tmpl, out)
		}
		k := names.LimitKey(out, envelope.MaxKeyLength)
		if utf8.ValidString(out) && utf8.RuneCountInString(k) > envelope.MaxKeyLength {
			t.Fatalf("LimitKey gave %d characters", utf8.RuneCountInString(k))
		}
	})
}
