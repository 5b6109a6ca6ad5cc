package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadme keeps the README's ent section true: every code line of its
// block about this example (comments aside) is a line of this example's
// compiled sources. (The section's steps from ent's scaffold are run by
// entcapturegen's TestNewEntUser.)
func TestReadme(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(readme), "\n## ent\n")
	if !ok {
		t.Fatal("README.md has no ent section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, sec, ok = strings.Cut(sec, "`examples/entlibrary`")
	if !ok {
		t.Fatal("the ent section does not name examples/entlibrary")
	}
	_, code, ok := strings.Cut(sec, "```go\n")
	if !ok {
		t.Fatal("the ent section has no Go block")
	}
	code, _, _ = strings.Cut(code, "```")
	var src strings.Builder
	for _, f := range []string{"main.go", "ent/schema/schema.go", "ent/entc.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(src.String(), "\n") {
		lines[strip(l)] = true
	}
	n := 0
	for _, l := range strings.Split(code, "\n") {
		l = strip(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		n++
		if !lines[l] {
			t.Errorf("README line not in the example's sources: %s", l)
		}
	}
	if n < 5 {
		t.Fatalf("only %d code lines in the README's ent section", n)
	}
}

// strip trims a line and drops a trailing // comment.
func strip(l string) string {
	if i := strings.Index(l, " // "); i >= 0 {
		l = l[:i]
	}
	return strings.TrimSpace(l)
}
