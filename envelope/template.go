package envelope

import (
	"strings"

	"github.com/heraldgo/herald/internal/names"
)

// The names a topic or ordering-key template may use.
const (
	VarNamespace = "namespace" // the model's namespace
	VarModel     = "model"     // the model's name in snake_case: loan_item
	VarLabel     = "label"     // the envelope's model label: library.LoanItem
	VarTable     = "table"     // the model's table
	VarOperation = "operation" // inserted, updated, deleted
	VarPK        = "pk"        // the primary key; composite parts joined by ':'
)

// Default templates.
const (
	DefaultTopic       = "{namespace}.{model}.{operation}"
	DefaultOrderingKey = "{label}:{pk}"
)

// Template is a parsed topic or ordering-key template.
type Template struct {
	src   string
	parts []tmplPart
}

type tmplPart struct {
	lit string // literal text, when name == ""
	v   string // variable name
}

// TemplateVars are the values a Template is rendered with.
type TemplateVars struct {
	Namespace string
	Model     string // the Go model name; rendered in snake_case
	Table     string
	Operation Operation
	PK        []any // key parts in primary-key column order
}

// ParseTemplate parses s. Names are written in braces; an unknown name or
// an unclosed brace is an ErrConfiguration error naming option.
func ParseTemplate(option, s string) (*Template, error) {
	t := &Template{src: s}
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
		case VarNamespace, VarModel, VarLabel, VarTable, VarOperation, VarPK:
		default:
			return nil, configurationf(option, "template %q names unknown {%s} (known: {namespace} {model} {label} {table} {operation} {pk})", s, name)
		}
		t.parts = append(t.parts, tmplPart{v: name})
		rest = rest[i+j+1:]
	}
	return t, nil
}

// String returns the template's source text.
func (t *Template) String() string { return t.src }

// Render fills the template. With an empty namespace a {namespace}
// followed by a literal dot drops that dot too, so the default topic is
// "loan.updated" rather than ".loan.updated".
func (t *Template) Render(v TemplateVars) string {
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
		case VarNamespace:
			b.WriteString(v.Namespace)
		case VarModel:
			b.WriteString(names.SnakeCase(v.Model))
		case VarLabel:
			b.WriteString(names.Label(v.Namespace, v.Model))
		case VarTable:
			b.WriteString(v.Table)
		case VarOperation:
			b.WriteString(string(v.Operation))
		case VarPK:
			for i, part := range v.PK {
				if i > 0 {
					b.WriteByte(':')
				}
				b.WriteString(names.KeyText(part))
			}
		}
		dropDot = p.v == VarNamespace && v.Namespace == ""
	}
	return b.String()
}
