// Package doccheck holds the test that keeps every Go snippet a user reads
// compiling: each ```go block of the repository's Markdown documents and
// each Go code block of a package's documentation must appear, line for
// line (indentation aside), in a file the tests compile — an Example
// function, a test, or a program under examples/.
package doccheck

import (
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const root = "../.."

type snippet struct {
	where string // file:line
	lines []string
	loose bool // fragments (not Go as a whole): each line must be found, anywhere
}

// compiled holds the trimmed lines of every file the tests compile.
type compiled map[string][]string

func loadCompiled(t *testing.T) compiled {
	t.Helper()
	out := compiled{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !strings.HasSuffix(path, "_test.go") && !strings.HasPrefix(rel, "examples"+string(filepath.Separator)) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[rel] = trimLines(string(src))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func trimLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// found reports whether want appears as consecutive lines of a compiled file.
func (c compiled) found(want []string) bool {
	for _, lines := range c {
		for i := 0; i+len(want) <= len(lines); i++ {
			if lines[i] != want[0] {
				continue
			}
			ok := true
			for j := range want {
				if lines[i+j] != want[j] {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// code is a line without its trailing comment (a " // " outside strings
// is close enough for snippets).
func code(l string) string {
	if i := strings.Index(l, " // "); i >= 0 {
		return strings.TrimSpace(l[:i])
	}
	return l
}

// foundCode reports whether a compiled line has the code of l, comments
// aside: a fragment's lines may be annotated differently from the source.
func (c compiled) foundCode(l string) bool {
	want := code(l)
	for _, lines := range c {
		for _, got := range lines {
			if code(got) == want {
				return true
			}
		}
	}
	return false
}

var goFence = regexp.MustCompile("(?s)```go\n(.*?)```")

func markdownSnippets(t *testing.T) []snippet {
	t.Helper()
	var out []snippet
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range goFence.FindAllStringSubmatchIndex(string(src), -1) {
			line := 1 + strings.Count(string(src[:m[0]]), "\n")
			text := string(src[m[2]:m[3]])
			_, isGo := goParts(text)
			out = append(out, snippet{where: rel + ":" + itoa(line), lines: trimLines(text), loose: !isGo})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docSnippets returns the code blocks of doc comments on packages and
// exported declarations that parse as Go (SQL, shell commands and tables
// do not).
func docSnippets(t *testing.T) []snippet {
	t.Helper()
	var out []snippet
	fset := token.NewFileSet()
	var p comment.Parser
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil // ent's generated code documents itself
		}
		rel, _ := filepath.Rel(root, path)
		check := func(g *ast.CommentGroup) {
			if g == nil {
				return
			}
			for _, b := range p.Parse(g.Text()).Content {
				code, ok := b.(*comment.Code)
				if !ok {
					continue
				}
				parts, ok := goParts(code.Text)
				if !ok {
					continue
				}
				for _, part := range parts {
					out = append(out, snippet{where: rel + ":" + itoa(fset.Position(g.Pos()).Line), lines: trimLines(part)})
				}
			}
		}
		check(f.Doc)
		for _, decl := range f.Decls {
			switch x := decl.(type) {
			case *ast.FuncDecl:
				if x.Name.IsExported() {
					check(x.Doc)
				}
			case *ast.GenDecl:
				check(x.Doc)
				for _, s := range x.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.IsExported() {
						check(ts.Doc)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// goParts reports whether text parses as Go — declarations, statements,
// or declarations followed by statements (a model, then its use) — and
// returns those parts, each to be found in a compiled file on its own.
func goParts(text string) ([]string, bool) {
	fset := token.NewFileSet()
	file := func(s string) bool {
		_, err := parser.ParseFile(fset, "", "package p\n"+s, 0)
		return err == nil
	}
	stmts := func(s string) bool {
		_, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+s+"\n}", 0)
		return err == nil
	}
	if file(text) || stmts(text) {
		return []string{text}, true
	}
	lines := strings.Split(text, "\n")
	for i := 1; i < len(lines); i++ {
		decls, rest := strings.Join(lines[:i], "\n"), strings.Join(lines[i:], "\n")
		if file(decls) && stmts(rest) {
			return []string{decls, rest}, true
		}
	}
	return nil, false
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestSnippetsCompile: every Go snippet of the Markdown documents and of
// the package documentation is a compiled one.
func TestSnippetsCompile(t *testing.T) {
	c := loadCompiled(t)
	snippets := append(markdownSnippets(t), docSnippets(t)...)
	if len(snippets) == 0 {
		t.Fatal("no snippets found: is the repository root at " + root + "?")
	}
	for _, s := range snippets {
		if s.loose {
			for _, l := range s.lines {
				if !strings.HasPrefix(l, "//") && !c.foundCode(l) {
					t.Errorf("%s: the line %q of this fragment is in no compiled file", s.where, l)
				}
			}
			continue
		}
		if !c.found(s.lines) {
			t.Errorf("%s: this snippet is not in any compiled file (an Example function, a test, examples/); "+
				"put it verbatim in one:\n\t%s", s.where, strings.Join(s.lines, "\n\t"))
		}
	}
	t.Logf("%d snippets checked", len(snippets))
}

var testNameRE = regexp.MustCompile("`(Test[A-Za-z0-9_]+)\\*?`")

// TestDocumentedTestsExist: every test ARCHITECTURE.md and
// integration/README.md name (as `TestX`, or `TestX*` for a family)
// exists, so the table of guarantees cannot point at a test that is gone.
func TestDocumentedTestsExist(t *testing.T) {
	var all strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			all.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	src := all.String()
	for _, doc := range []string{"ARCHITECTURE.md", "integration/README.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testNameRE.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(src, "func "+m[1]) {
				t.Errorf("%s names %s, which no test file defines", doc, m[1])
			}
		}
	}
}
