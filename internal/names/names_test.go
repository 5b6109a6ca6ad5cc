package names_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/heraldgo/herald/internal/names"
)

const maxKeyLength = 255 // envelope.MaxKeyLength

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
	if got := names.LimitKey(short, maxKeyLength); got != short {
		t.Fatalf("a 255-character key changed")
	}
	for _, long := range []string{strings.Repeat("k", 256), strings.Repeat("ключ", 100)} {
		got := names.LimitKey(long, maxKeyLength)
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
	if names.LimitKey(strings.Repeat("a", 300), maxKeyLength) == names.LimitKey(strings.Repeat("a", 299)+"b", maxKeyLength) {
		t.Fatal("two long keys with the same start collide")
	}
}
