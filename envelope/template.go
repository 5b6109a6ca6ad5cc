package envelope

import (
	"strings"

	"github.com/heraldgo/herald/internal/names"
)

// The names a topic or ordering-key template may use (Options.Topic).
const (
	varNamespace = "namespace" // the model's namespace
	varModel     = "model"     // the model's name in snake_case: loan_item
	varLabel     = "label"     // the envelope's model label: library.LoanItem
	varTable     = "table"     // the model's table
	varOperation = "operation" // inserted, updated, deleted
	varPK        = "pk"        // the primary key; composite parts joined by ':'
)

// Default templates.
const (
	DefaultTopic       = "{namespace}.{model}.{operation}"
	DefaultOrderingKey = "{label}:{pk}"
)

// template is a parsed topic or ordering-key template.
type template struct {
	src   string
	parts []tmplPart
}

type tmplPart struct {
	lit string // literal text, when name == ""
	v   string // variable name
}

// templateVars are the values a template is rendered with.
type templateVars struct {
	Namespace string
	Model     string // the Go model name; rendered in snake_case
	Table     string
	Operation Operation
	PK        []any // key parts in primary-key column order
}

// parseTemplate parses s. Names are written in braces; an unknown name or
// an unclosed brace is an ErrConfiguration error naming option.
func parseTemplate(option, s string) (*template, error) {
	t := &template{src: s}
	rest := s
	for rest != "" {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			t.parts = append(t.parts, tmplPart{lit: rest})
			break
		}
		if rest[i] == '}' {
			return nil, configurationf(option, "template %q has '}' without '{'", s)
		}
		if i > 0 {
			t.parts = append(t.parts, tmplPart{lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, configurationf(option, "template %q has an unclosed '{'", s)
		}
		name := rest[i+1 : i+j]
		switch name {
		case varNamespace, varModel, varLabel, varTable, varOperation, varPK:
		default:
			return nil, configurationf(option, "template %q names unknown {%s} (known: {namespace} {model} {label} {table} {operation} {pk})", s, name)
		}
		t.parts = append(t.parts, tmplPart{v: name})
		rest = rest[i+j+1:]
	}
	return t, nil
}

// String returns the template's source text.
func (t *template) String() string { return t.src }

// Render fills the template. With an empty namespace a {namespace}
// followed by a literal dot drops that dot too, so the default topic is
// "loan.updated" rather than ".loan.updated".
func (t *template) Render(v templateVars) string {
	var b strings.Builder
	dropDot := false
	for _, p := range t.parts {
		switch p.v {
		case "":
			lit := p.lit
			if dropDot {
				lit = strings.TrimPrefix(lit, ".")
			}
			b.WriteString(lit)
		case varNamespace:
			b.WriteString(v.Namespace)
		case varModel:
			b.WriteString(names.SnakeCase(v.Model))
		case varLabel:
			b.WriteString(names.Label(v.Namespace, v.Model))
		case varTable:
			b.WriteString(v.Table)
		case varOperation:
			b.WriteString(string(v.Operation))
		case varPK:
			for i, part := range v.PK {
				if i > 0 {
					b.WriteByte(':')
				}
				b.WriteString(names.KeyText(part))
			}
		}
		dropDot = p.v == varNamespace && v.Namespace == ""
	}
	return b.String()
}
