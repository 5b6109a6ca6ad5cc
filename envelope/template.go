package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/jsonform"
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
			return nil, Configurationf(option, "template %q has '}' without '{'", s)
		}
		if i > 0 {
			t.parts = append(t.parts, tmplPart{lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, Configurationf(option, "template %q has an unclosed '{'", s)
		}
		name := rest[i+1 : i+j]
		switch name {
		case VarNamespace, VarModel, VarLabel, VarTable, VarOperation, VarPK:
		default:
			return nil, Configurationf(option, "template %q names unknown {%s} (known: {namespace} {model} {label} {table} {operation} {pk})", s, name)
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
			b.WriteString(SnakeCase(v.Model))
		case VarLabel:
			b.WriteString(Label(v.Namespace, v.Model))
		case VarTable:
			b.WriteString(v.Table)
		case VarOperation:
			b.WriteString(string(v.Operation))
		case VarPK:
			for i, part := range v.PK {
				if i > 0 {
					b.WriteByte(':')
				}
				b.WriteString(KeyText(part))
			}
		}
		dropDot = p.v == VarNamespace && v.Namespace == ""
	}
	return b.String()
}

// Label is the envelope's model label: "{namespace}.{Model}", or the model
// name alone without a namespace.
func Label(namespace, model string) string {
	if namespace == "" {
		return model
	}
	return namespace + "." + model
}

// SnakeCase turns a Go name into snake_case: LoanItem -> loan_item,
// HTTPRequest -> http_request, UserID -> user_id.
func SnakeCase(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 4)
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) ||
				(i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// KeyText is the text of one key part in a topic or ordering key: strings
// as they are, numbers in decimal, UUIDs canonical, anything else its JSON
// form without the quotes of a JSON string.
func KeyText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case uint:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uuid.UUID:
		return x.String()
	}
	b, err := jsonform.Marshal(v, jsonform.Field)
	if err != nil {
		return ""
	}
	if len(b) >= 2 && b[0] == '"' {
		if s, err := strconv.Unquote(string(b)); err == nil {
			return s
		}
	}
	return string(b)
}

// LimitKey makes a key built from a template fit MaxKeyLength characters:
// a longer key keeps its start and ends with '#' and the SHA-256 (hex) of
// the whole key, so distinct long keys stay distinct.
func LimitKey(k string) string {
	if utf8.RuneCountInString(k) <= MaxKeyLength {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	keep := MaxKeyLength - 1 - 2*sha256.Size // characters of the start to keep
	n := 0
	for i := range k {
		if n == keep {
			return k[:i] + "#" + hex.EncodeToString(sum[:])
		}
		n++
	}
	return k // unreachable: k has more than MaxKeyLength runes
}
