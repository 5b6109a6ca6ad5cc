package jsonform

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// appendCompact is the compaction appendValidCompact replaced, kept as
// its reference: it appends src, valid JSON, without insignificant white
// space.
// Inside strings it replaces invalid UTF-8 with \ufffd and escapes U+2028 and
// U+2029, which json.Valid lets through.
func appendCompact(dst, src []byte) []byte {
	inString := false
	start := 0
	for i := 0; i < len(src); {
		c := src[i]
		if !inString {
			switch c {
			case ' ', '\t', '\n', '\r':
				dst = append(dst, src[start:i]...)
				i++
				start = i
				continue
			case '"':
				inString = true
			}
			i++
			continue
		}
		switch {
		case c == '\\':
			i += 2 // the escaped character; \uXXXX digits are copied as they come
		case c == '"':
			inString = false
			i++
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := decodeRune(src[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				dst = append(dst, src[start:i]...)
				dst = append(dst, `\ufffd`...)
				start = i + size
			case r == '\u2028' || r == '\u2029':
				dst = append(dst, src[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
				start = i + size
			}
			i += size
		}
	}
	return append(dst, src[start:]...)
}

// compactCorpus holds documents valid and not, with white space, escapes,
// invalid UTF-8 and U+2028.
var compactCorpus = []string{
	``, ` `, `null`, ` true `, `false`, `nul`, `truex`, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+`, `1E-7`, `-12.5e10`,
	`""`, `"a b"`, `"\u00e9\n\t\"\\\/"`, `"\u12"`, `"\x"`, "\"\x01\"", "\"\xff\xfe\"", "\"\u2028 \u2029\"", `"unterminated`,
	`{}`, `{ }`, `{"a": 1, "b" : [1, 2, {"c": null}]}`, `{"a" 1}`, `{"a":1,}`, `{,}`, `{1:2}`, `[]`, `[ ]`, `[1,]`, `[,1]`,
	"[1\n,\r2\t]", `{"a": "0123456789abcdef", "bb" : [1, 22, 333,  4444], "c":"x" }  `, ` [ "\u00e9 \u2028",  "\xff x" ] `, `[1 2]`, `{"a":1}{}`, `{"a":"x y"}  `, `[[[[]]]]`, `[[[[]]]`, `{"model": "library.Loan", "pk": 7}`,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
}

// checkCompact fails t when appendValidCompact disagrees with json.Valid
// followed by appendCompact, called both with dst full (every run
// appended) and with room to spare, as appendJSON calls it (runs copied
// in 16-byte blocks).
func checkCompact(t *testing.T, src []byte) {
	t.Helper()
	wantOK := json.Valid(src)
	prefix := []byte("prefix:")
	for _, dst := range [][]byte{bytes.Clone(prefix), slices.Grow(bytes.Clone(prefix), len(src))} {
		got, ok := appendValidCompact(dst, src)
		if ok != wantOK {
			t.Fatalf("appendValidCompact(%q) (spare capacity %d): valid %v, json.Valid says %v", src, cap(dst)-len(dst), ok, wantOK)
		}
		if !ok {
			if !bytes.Equal(got, prefix) {
				t.Fatalf("appendValidCompact(%q) (spare capacity %d) failed but returned %q, not dst", src, cap(dst)-len(dst), got)
			}
			continue
		}
		if want := appendCompact(bytes.Clone(prefix), src); !bytes.Equal(got, want) {
			t.Fatalf("appendValidCompact(%q) (spare capacity %d) = %q, appendCompact gives %q", src, cap(dst)-len(dst), got, want)
		}
	}
}

func TestAppendValidCompact(t *testing.T) {
	for _, s := range compactCorpus {
		checkCompact(t, []byte(s))
	}
}

func FuzzAppendValidCompact(f *testing.F) {
	for _, s := range compactCorpus {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) { checkCompact(t, src) })
}

func BenchmarkAppendValidCompact(b *testing.B) {
	src := []byte(`{"model": "library.Loan", "operation": "updated", "pk": 7, "changed": ["status"], ` +
		`"before": {"id": 7, "status": "lent", "fee": "0.00", "reader_id": 3}, ` +
		`"after": {"id": 7, "status": "returned", "fee": "0.00", "reader_id": 3}, "occurred_at": "2026-10-06T12:00:00Z"}`)
	dst := make([]byte, 0, len(src))
	b.Run("one-pass", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			if _, ok := appendValidCompact(dst[:0], src); !ok {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("valid-then-compact", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			if !json.Valid(src) {
				b.Fatal("invalid")
			}
			appendCompact(dst[:0], src)
		}
	})
}
