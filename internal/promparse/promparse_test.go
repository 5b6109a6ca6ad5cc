package promparse

import (
	"strings"
	"testing"
)

func TestParseRejects(t *testing.T) {
	good := "# TYPE x counter\nx{a=\"1\"} 2\n"
	if _, err := Parse(good); err != nil {
		t.Fatalf("good text: %v", err)
	}
	for _, c := range []struct{ text, want string }{
		{"x 1\n", "before a TYPE"},
		{"# TYPE x counter\nx 1", "newline"},
		{"# TYPE x counter\nx{a=1} 1\n", "not quoted"},
		{"# TYPE x counter\nx{a=\"\\q\"} 1\n", "bad escape"},
		{"# TYPE x counter\nx{a.b=\"1\"} 1\n", "bad label name"},
		{"# TYPE x counter\nx 1\nx 2\n", "again"},
		{"# TYPE x counter\nx -1\n", "counter at"},
		{"# TYPE x counter\nx one\n", "bad value"},
		{"# TYPE x.y counter\n", "valid metric name"},
		{"# TYPE x counter\n# TYPE x gauge\n", "second TYPE"},
		{"# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", "not cumulative"},
		{"# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf"},
		{"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", "_count"},
		{"# TYPE h histogram\nh 1\n", "in histogram"},
	} {
		_, err := Parse(c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q): %v, want an error with %q", c.text, err, c.want)
		}
	}
}
