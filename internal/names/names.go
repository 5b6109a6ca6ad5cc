// Package names holds the naming and quoting rules herald's packages share:
// SQL identifiers, model labels, snake_case, and the text of ordering and
// topic keys. It is internal: users meet the rules through envelope.Options
// and the capture packages, not as functions.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/jsonform"
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// IsIdentifier reports whether s is a plain SQL identifier herald will
// quote and use as a column name.
func IsIdentifier(s string) bool { return identRE.MatchString(s) }

// Quote quotes a validated identifier for PostgreSQL and SQLite (double
// quotes); envelope.Dialect.QuoteIdent quotes for any dialect.
func Quote(s string) string { return `"` + s + `"` }

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

// LimitKey makes a key built from a template fit maxLen characters
// (envelope.MaxKeyLength):
// a longer key keeps its start and ends with '#' and the SHA-256 (hex) of
// the whole key, so distinct long keys stay distinct.
func LimitKey(k string, maxLen int) string {
	if utf8.RuneCountInString(k) <= maxLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	keep := maxLen - 1 - 2*sha256.Size // characters of the start to keep
	n := 0
	for i := range k {
		if n == keep {
			return k[:i] + "#" + hex.EncodeToString(sum[:])
		}
		n++
	}
	return k // unreachable: k has more than maxLen runes
}
