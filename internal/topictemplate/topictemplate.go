// Package topictemplate parses and renders the topic and ordering-key
// templates of a capture declaration (envelope.Options.Topic and
// OrderingKey): text with names in braces. envelope.Options.Validate
// checks a template with Parse; the capture packages' compiled models
// render it for every change. It imports nothing of envelope, so that
// both can use it.
package topictemplate

import (
	"fmt"
	"strings"

	"github.com/heraldgo/herald/internal/names"
)

// The names a template may use.
const (
	varNamespace = "namespace" // the model's namespace
	varModel     = "model"     // the model's name in snake_case: loan_item
	varLabel     = "label"     // the envelope's model label: library.LoanItem
	varTable     = "table"     // the model's table
	varOperation = "operation" // inserted, updated, deleted
	varPK        = "pk"        // the primary key; composite parts joined by ':'
)

// Template is a parsed topic or ordering-key template.
type Template struct {
	src   string
	parts []part
}

type part struct {
	lit string // literal text, when v == ""
	v   string // variable name
}

// Vars are the values a template is rendered with.
type Vars struct {
	Namespace string
	Model     string // the Go model name; rendered in snake_case
	Table     string
	Operation string // inserted, updated, deleted
	PK        []any  // key parts in primary-key column order
}

// Parse parses s. Names are written in braces; an unknown name or an
// unclosed brace is an error whose message quotes s (the caller names the
// option and gives it its kind).
func Parse(s string) (*Template, error) {
	t := &Template{src: s}
	rest := s
	for rest != "" {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			t.parts = append(t.parts, part{lit: rest})
			break
		}
		if rest[i] == '}' {
			return nil, fmt.Errorf("template %q has '}' without '{'", s)
		}
		if i > 0 {
			t.parts = append(t.parts, part{lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("template %q has an unclosed '{'", s)
		}
		name := rest[i+1 : i+j]
		switch name {
		case varNamespace, varModel, varLabel, varTable, varOperation, varPK:
		default:
			return nil, fmt.Errorf("template %q names unknown {%s} (known: {namespace} {model} {label} {table} {operation} {pk})", s, name)
		}
		t.parts = append(t.parts, part{v: name})
		rest = rest[i+j+1:]
	}
	return t, nil
}

// String returns the template's source text.
func (t *Template) String() string { return t.src }

// Render fills the template. With an empty namespace a {namespace}
// followed by a literal dot drops that dot too, so the default topic is
// "loan.updated" rather than ".loan.updated".
func (t *Template) Render(v Vars) string {
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
			b.WriteString(v.Operation)
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
