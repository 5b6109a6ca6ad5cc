// Command entexamples is herald's transparency harness for ent, judged by
// ent's own code: it takes ent's examples that run without a server
// (testdata/upstream: the examples/ folder of github.com/ent/ent at v0.14.5,
// Apache 2.0, generated code left out), adds entcapture.Mixin to every
// schema and entcapturegen.Extension to their code generation, regenerates
// them, opens their clients on entcapture.Driver with the outbox table
// migrated, and runs their Example tests. Each must print exactly what it
// prints without capture (its `// Output:` comment, unchanged), and leave
// its writes' events in the outbox: the harness reports how many per
// example and fails an example that wrote none.
//
//	cd integration/entexamples && go run .        # all examples (a few minutes)
//	go run . -run o2m2types,traversal -keep      # some, keeping the work tree
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// examples are the upstream examples that run without a server. Left out:
// compositetypes, domaintypes, enumtypes, functionalidx, rls, triggers,
// viewcomposite, viewschema (PostgreSQL), migration and extensions (Atlas
// migrations against a database, no Example tests), start (no tests).
var examples = []string{
	"edgeindex", "encryptfield", "entcpkg", "fs", "jsonencode", "m2m2types", "m2mbidi", "m2mrecur",
	"o2m2types", "o2mrecur", "o2o2types", "o2obidi", "o2orecur", "privacyadmin", "privacytenant", "traversal", "version",
}

func main() {
	run := flag.String("run", "", "comma-separated examples to run (default: all)")
	keep := flag.Bool("keep", false, "keep the work tree and print its path")
	j := flag.Int("j", 2, "examples generated at once")
	flag.Parse()
	jobs = *j
	if err := harness(*run, *keep); err != nil {
		log.Fatal(err)
	}
}

var jobs = 2

func harness(only string, keep bool) error {
	here, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := filepath.Abs(filepath.Join(here, "..", ".."))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "entcapture")); err != nil {
		return fmt.Errorf("run from integration/entexamples in the herald repository: %w", err)
	}
	list := examples
	if only != "" {
		list = strings.Split(only, ",")
	}
	work, err := os.MkdirTemp("", "herald-entexamples-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("work tree:", work)
	} else {
		defer os.RemoveAll(work)
	}
	up := filepath.Join(here, "testdata", "upstream")
	if err := copyTree(up, work, func(rel string) bool {
		top := strings.SplitN(rel, string(filepath.Separator), 2)[0]
		return rel == "go.mod" || rel == "go.sum" || rel == "LICENSE" || contains(list, top)
	}); err != nil {
		return err
	}
	if err := writeGoMod(work, root); err != nil {
		return err
	}
	for _, ex := range list {
		if err := prepare(filepath.Join(work, ex)); err != nil {
			return fmt.Errorf("%s: %w", ex, err)
		}
	}
	// The generated packages the tests import do not exist yet: tidy
	// what can be, generate, then tidy again.
	if err := goCmd(work, "mod", "tidy", "-e"); err != nil {
		return err
	}
	// Code generation compiles two programs per example: run -j at once.
	genErr := make([]error, len(list))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, jobs))
	for i, ex := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			genErr[i] = goCmd(filepath.Join(work, ex, "ent"), "generate", ".")
		}()
	}
	wg.Wait()
	var failed, generated []string
	for i, ex := range list {
		if genErr[i] != nil {
			failed = append(failed, ex+" (generate)")
			fmt.Printf("FAIL %-14s go generate: %v\n", ex, genErr[i])
			continue
		}
		generated = append(generated, ex)
	}
	if err := goCmd(work, "mod", "tidy", "-e"); err != nil {
		return err
	}
	for _, ex := range generated {
		cmd := exec.Command("go", "test", "-count=1", "-v", "./"+ex+"/")
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		events := eventsRE.FindSubmatch(out)
		switch {
		case err != nil:
			failed = append(failed, ex)
			fmt.Printf("FAIL %-14s\n%s\n", ex, out)
		case events == nil || string(events[1]) == "0":
			failed = append(failed, ex+" (no events)")
			fmt.Printf("FAIL %-14s no events in the outbox\n%s\n", ex, out)
		default:
			fmt.Printf("ok   %-14s %s Example tests passed, %s events in the outbox\n", ex, countExamples(out), events[1])
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

var eventsRE = regexp.MustCompile(`herald-events (\d+)`)

func countExamples(out []byte) string {
	return fmt.Sprint(bytes.Count(out, []byte("--- PASS: Example")))
}

func goCmd(dir string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func copyTree(src, dst string, keep func(rel string) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." || d.IsDir() || !keep(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

// writeGoMod points the examples' module at ent v0.14.5 (upstream
// replaces it with the repository it lives in) and at this herald.
func writeGoMod(work, root string) error {
	p := filepath.Join(work, "go.mod")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	s := strings.Replace(string(b), "replace entgo.io/ent => ../\n", "", 1)
	s = strings.Replace(s, "entgo.io/ent v0.0.0-00010101000000-000000000000", "entgo.io/ent v0.14.5", 1)
	s = strings.Replace(s, "go 1.23", "go 1.26.0", 1)
	s += "\nrequire github.com/heraldgo/herald v0.0.0\n\nreplace github.com/heraldgo/herald => " + root + "\n"
	return os.WriteFile(p, []byte(s), 0o644)
}

var (
	schemaTypeRE = regexp.MustCompile(`(?m)^type (\w+) struct \{\s*ent\.Schema\s*\}`)
	importRE     = regexp.MustCompile(`(?m)^import \(\n`)
)

const heraldImports = "import (\n\t\"github.com/heraldgo/herald/entcapture\"\n\t\"github.com/heraldgo/herald/envelope\"\n"

// prepare adds the capture to one example: the mixin on every schema, the
// extension on the code generation, the capture driver on its client.
func prepare(dir string) error {
	schemas, err := filepath.Glob(filepath.Join(dir, "ent", "schema", "*.go"))
	if err != nil {
		return err
	}
	for _, f := range schemas {
		if err := addMixin(f); err != nil {
			return err
		}
	}
	if err := addExtension(filepath.Join(dir, "ent")); err != nil {
		return err
	}
	tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return err
	}
	pkg := ""
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		s := string(b)
		if pkg == "" {
			pkg = packageOf(s)
		}
		if strings.Contains(s, "ent.Open(") {
			s = strings.ReplaceAll(s, "ent.Open(", "heraldOpen(")
			s += "\nvar _ = ent.NewClient // the harness opens the client with heraldOpen\n"
		}
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "herald_test.go"), []byte(strings.ReplaceAll(
		strings.ReplaceAll(openTemplate, "PACKAGE", pkg), "EXAMPLE", filepath.Base(dir))), 0o644)
}

func packageOf(src string) string {
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "package ") {
			return strings.TrimSpace(strings.TrimPrefix(l, "package "))
		}
	}
	return ""
}

// addMixin adds entcapture.Mixin to each ent.Schema of a schema file
// (edge schemas with a composite id included).
func addMixin(f string) error {
	b, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	s := string(b)
	types := schemaTypeRE.FindAllStringSubmatch(s, -1)
	if len(types) == 0 {
		return nil
	}
	for _, t := range types {
		name := t[1]
		existing := regexp.MustCompile(`func \((\w+ )?` + name + `\) Mixin\(\) \[\]ent\.Mixin \{\s*return \[\]ent\.Mixin\{`)
		if loc := existing.FindStringIndex(s); loc != nil {
			s = s[:loc[1]] + "\n\t\tentcapture.Mixin(envelope.Options{})," + s[loc[1]:]
			continue
		}
		s += "\n// Mixin captures the schema's writes (added by herald's entexamples harness).\nfunc (" + name +
			") Mixin() []ent.Mixin {\n\treturn []ent.Mixin{entcapture.Mixin(envelope.Options{})}\n}\n"
	}
	if !importRE.MatchString(s) {
		return errors.New(f + ": no import block")
	}
	s = importRE.ReplaceAllLiteralString(s, heraldImports)
	return os.WriteFile(f, []byte(s), 0o644)
}

var featureRE = regexp.MustCompile(`--feature ([\w/,]+)`)

// addExtension makes the example's code generation use
// entcapturegen.Extension: in its own entc.go, or in one written for it from
// the flags of its `ent generate` command.
func addExtension(entDir string) error {
	entc := filepath.Join(entDir, "entc.go")
	if b, err := os.ReadFile(entc); err == nil {
		s := string(b)
		if !strings.Contains(s, "opts := []entc.Option{\n") {
			return errors.New(entc + ": no opts := []entc.Option{")
		}
		s = strings.Replace(s, "opts := []entc.Option{\n", "opts := []entc.Option{\n\t\tentc.Extensions(entcapturegen.Extension()),\n", 1)
		s = strings.Replace(s, "import (\n", "import (\n\t\"github.com/heraldgo/herald/entcapture/entcapturegen\"\n", 1)
		return os.WriteFile(entc, []byte(s), 0o644)
	}
	var features []string
	if b, err := os.ReadFile(filepath.Join(entDir, "generate.go")); err == nil {
		if m := featureRE.FindStringSubmatch(string(b)); m != nil {
			features = strings.Split(m[1], ",")
		}
	}
	sort.Strings(features)
	q := make([]string, len(features))
	for i, f := range features {
		q[i] = fmt.Sprintf("%q", f)
	}
	src := fmt.Sprintf(entcTemplate, strings.Join(q, ", "))
	if err := os.WriteFile(entc, []byte(src), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(entDir, "generate.go"), []byte("package ent\n\n//go:generate go run -mod=mod entc.go\n"), 0o644)
}

const entcTemplate = `//go:build ignore

package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/heraldgo/herald/entcapture/entcapturegen"
)

func main() {
	err := entc.Generate("./schema", &gen.Config{}, entc.FeatureNames(%s), entc.Extensions(entcapturegen.Extension()))
	if err != nil {
		log.Fatal(err)
	}
}
`

// openTemplate replaces ent.Open in the example's tests: the same client,
// on entcapture.Driver, with the outbox table migrated; the outbox is
// counted when the client closes (or at the end, for one never closed).
const openTemplate = `package PACKAGE

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"entgo.io/ent/examples/EXAMPLE/ent"
	_ "entgo.io/ent/examples/EXAMPLE/ent/runtime" // installs the schemas' hooks, the capture hook among them
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

var (
	heraldMu     sync.Mutex
	heraldEvents int
	heraldOpen_  []*heraldCounter
)

type heraldCounter struct {
	*entsql.Driver
	db      *sql.DB
	counted bool
}

func (c *heraldCounter) count() {
	heraldMu.Lock()
	defer heraldMu.Unlock()
	if c.counted {
		return
	}
	c.counted = true
	var n int
	if err := c.db.QueryRow("SELECT COUNT(*) FROM herald_outbox").Scan(&n); err != nil {
		fmt.Fprintln(os.Stderr, "herald: count the outbox:", err)
		os.Exit(3)
	}
	heraldEvents += n
}

func (c *heraldCounter) Close() error {
	c.count()
	return c.Driver.Close()
}

func heraldOpen(driverName, dataSourceName string, options ...ent.Option) (*ent.Client, error) {
	db, err := sql.Open(driverName, dataSourceName)
	if err != nil {
		return nil, err
	}
	if err := envelope.Migrate(context.Background(), db, envelope.SQLite, ""); err != nil {
		return nil, err
	}
	c := &heraldCounter{Driver: entsql.OpenDB(dialect.SQLite, db), db: db}
	heraldMu.Lock()
	heraldOpen_ = append(heraldOpen_, c)
	heraldMu.Unlock()
	return ent.NewClient(append(options, ent.Driver(entcapture.Driver(c)))...), nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, c := range heraldOpen_ {
		c.count()
	}
	fmt.Printf("herald-events %d\n", heraldEvents)
	os.Exit(code)
}
`
