package envelope_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

func TestTopicPattern(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, topic string
		match          bool
	}{
		{"library.loan.updated", "library.loan.updated", true},
		{"library.loan.updated", "library.loan.updated2", false},
		{"library.*", "library.loan.updated", true},
		{"library.*", "library.", true},
		{"library.*", "library", false},
		{"library.*", "librarian.x", false},
		{"a_b.*", "axb.c", false}, // '_' is not a wildcard
		{"a_b.*", "a_b.c", true},
		{"100%.*", "100x.c", false}, // '%' is not a wildcard
		{"*", "anything", true},
	}
	for _, c := range cases {
		p, err := envelope.ParseTopicPattern("Topics", c.pattern)
		if err != nil {
			t.Fatalf("ParseTopicPattern(%q): %v", c.pattern, err)
		}
		if got := p.Match(c.topic); got != c.match {
			t.Errorf("%q.Match(%q) = %v, want %v", c.pattern, c.topic, got, c.match)
		}
		if p.String() != c.pattern {
			t.Errorf("String() = %q, want %q", p.String(), c.pattern)
		}
	}
}

func TestTopicPatternErrors(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "lib*.x", "lib?", "*.loan", "a**", strings.Repeat("x", 256)} {
		_, err := envelope.ParseTopicPattern("Topics", p)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "Topics") {
			t.Errorf("ParseTopicPattern(%q) = %v, want ErrConfiguration naming Topics", p, err)
		}
	}
	_, err := envelope.ParseTopicPatterns("ExcludeTopics", []string{"ok.*", "bad*x"})
	if err == nil || !strings.Contains(err.Error(), "ExcludeTopics[1]") {
		t.Fatalf("ParseTopicPatterns error %v does not name ExcludeTopics[1]", err)
	}
}

func TestLikePattern(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a_b.*":    `a\_b.%`,
		"100%.*":   `100\%.%`,
		`back\s.*`: `back\\s.%`,
		"exact":    "exact",
		"x_y":      `x\_y`,
		"*":        "%",
	} {
		p, err := envelope.ParseTopicPattern("Topics", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := outbox.LikePattern(p); got != want {
			t.Errorf("LikePattern(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzTopicPattern(f *testing.F) {
	for _, s := range []string{"library.*", "a_b.*", "*", "x?", "a*b", "", "100%.*"} {
		f.Add(s, "library.loan")
	}
	f.Fuzz(func(t *testing.T, pattern, topic string) {
		p, err := envelope.ParseTopicPattern("Topics", pattern)
		if err != nil {
			if !errors.Is(err, envelope.ErrConfiguration) {
				t.Fatalf("not ErrConfiguration: %v", err)
			}
			return
		}
		want := topic == pattern
		if strings.HasSuffix(pattern, "*") {
			want = strings.HasPrefix(topic, strings.TrimSuffix(pattern, "*"))
		}
		if p.Match(topic) != want {
			t.Fatalf("%q.Match(%q) = %v", pattern, topic, !want)
		}
	})
}
