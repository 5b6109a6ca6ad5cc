// Command entexamples is herald's transparency harness for ent, judged by
// ent's own code: it takes ent's examples that run without a server
// (testdata/upstream: the examples/ folder of github.com/ent/ent at v0.14.5,
// Apache 2.0, generated code left out), adds entcapture.Mixin to every
// schema and entcapturegen.Extension to their code generation, regenerates
// them, opens their clients on entcapture.Driver with the outbox table
// migrated, and runs their Example tests. Each must print exactly what it
// prints without capture (its `// Output:` comment, unchanged), and the
// row-diff oracle of integration/entsuite, which watches the examples'
// databases, must agree with every event (each row a transaction wrote has
// exactly one event of that operation whose image is the stored row, and
// no untouched row has one): the harness reports per example the
// transactions judged and the events, and fails an example with no event
// or a disagreement knownFindings does not list.
//
// Its time is mostly the go command's. The examples with an entc.go of
// their own run it with `go generate`; the others share one generator,
// built once (an entc.go per example, compiled and linked by `go run`, was
// a third of the code generation's time); the tests of all the examples
// run in one `go test -json`, which builds and runs them in parallel.
//
//	cd integration/entexamples && go run .        # all examples (about 100 s on 2 cores)
//	go run . -run o2m2types,traversal -keep      # some, keeping the work tree
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/heraldgo/herald/integration/entsuite/oracle/glueparse"
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
	// The go commands this harness runs build modules of its own work
	// tree, which the repository's go.work does not list: workspace mode
	// off for them (it also refuses their -mod=mod).
	_ = os.Setenv("GOWORK", "off")
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
	// The examples with an entc.go of their own keep it (with the
	// extension added) and run it with `go generate`; the others share
	// one code generator, with the features each names.
	gens := make(map[string]generation, len(list))
	for _, ex := range list {
		g, err := prepare(filepath.Join(work, ex))
		if err != nil {
			return fmt.Errorf("%s: %w", ex, err)
		}
		gens[ex] = g
	}
	if err := writeGenerator(work); err != nil {
		return err
	}
	// The generated packages the tests import do not exist yet: tidy
	// what can be, generate, then tidy again.
	if err := goCmd(work, "mod", "tidy", "-e"); err != nil {
		return err
	}
	genErr := generate(work, list, gens)
	var failed, generated []string
	for i, ex := range list {
		if genErr[i] != nil {
			failed = append(failed, ex+" (generate)")
			fmt.Printf("FAIL %-14s code generation: %v\n", ex, genErr[i])
			continue
		}
		generated = append(generated, ex)
	}
	for _, ex := range generated {
		if err := writeTables(filepath.Join(work, ex)); err != nil {
			return fmt.Errorf("%s: %w", ex, err)
		}
	}
	if err := goCmd(work, "mod", "tidy", "-e"); err != nil {
		return err
	}
	results, err := testAll(work, generated)
	if err != nil {
		return err
	}
	for i, ex := range generated {
		if f := judge(ex, results[i]); f != "" {
			failed = append(failed, f)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// examplesModule is the module path of ent's examples (upstream's go.mod),
// their packages' import paths' prefix.
const examplesModule = "entgo.io/ent/examples"

// A testResult is what one example's test package left in `go test
// -json`: whether it failed (a build failure, a failed test or no result
// at all count) and its output, stdout and stderr as `go test -v` prints
// them, after the output of the build that failed, if any.
type testResult struct {
	failed bool
	out    []byte
}

// testAll runs the examples' tests in one `go test -count=1 -json`, which
// builds and runs their packages in parallel (run one by one, each build's
// link and each test run left a core idle: about twice as long), and
// splits its events by package into one result per example of list.
func testAll(work string, list []string) ([]testResult, error) {
	if len(list) == 0 {
		return nil, nil
	}
	args := []string{"test", "-count=1", "-json"}
	// Each example's events, by test package: its import path, or the
	// directory go test could not load as a package (setup failed).
	index := make(map[string]int, 2*len(list))
	for i, ex := range list {
		args = append(args, "./"+ex+"/")
		index[examplesModule+"/"+ex] = i
		index["./"+ex] = i
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	if runErr != nil && !errors.As(runErr, new(*exec.ExitError)) {
		return nil, fmt.Errorf("go test: %w", runErr)
	}
	results := make([]testResult, len(list))
	ended := make([]bool, len(list))
	// The output of the builds that failed, by import path: a failed
	// package's result names the first of its dependencies that did not
	// build (FailedBuild), whose errors are printed with its output.
	buildOut := map[string][]byte{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var e struct{ Action, Package, ImportPath, Test, Output, FailedBuild string }
		if err := dec.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go test -json: %w\n%s", err, stderr.Bytes())
		}
		if e.Action == "build-output" {
			buildOut[e.ImportPath] = append(buildOut[e.ImportPath], e.Output...)
			continue
		}
		i, ok := index[e.Package]
		if !ok {
			continue
		}
		r := &results[i]
		r.out = append(r.out, e.Output...)
		// The package's own pass, fail or skip (no test files) ends it.
		if e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
			ended[i] = true
			r.failed = e.Action == "fail"
			if e.FailedBuild != "" {
				r.out = append(append([]byte(nil), buildOut[e.FailedBuild]...), r.out...)
			}
		}
	}
	anyFailed := false
	for i := range results {
		if !ended[i] {
			// go test stopped before the package's result (a go
			// command error, printed to its stderr): failed.
			results[i].failed = true
			results[i].out = append(results[i].out, stderr.Bytes()...)
		}
		anyFailed = anyFailed || results[i].failed
	}
	// go test fails only when a package does: one that failed with every
	// package passed is a harness error, not a pass.
	if runErr != nil && !anyFailed {
		return nil, fmt.Errorf("go test: %w\n%s", runErr, stderr.Bytes())
	}
	return results, nil
}

// judge prints the verdict on one example from its test result and the
// oracle's counts its TestMain printed, and returns how it failed ("" if
// it passed or its disagreements are a known finding).
func judge(ex string, r testResult) string {
	out := r.out
	st := statsRE.FindSubmatch(out)
	switch {
	case r.failed:
		fmt.Printf("FAIL %-14s\n%s\n", ex, out)
		return ex
	case st == nil || string(st[3]) == "0":
		fmt.Printf("FAIL %-14s no events in the outbox\n%s\n", ex, out)
		return ex + " (no events)"
	case string(st[4]) != "0":
		verdict, failure := "FAIL", ""
		if d, ok := knownFindings[ex]; ok {
			verdict = "     known:" // a known defect, reported
			fmt.Printf("ok   %-14s %s Example tests passed; oracle: %s transactions, %s rows changed, %s events, %s disagreements, known: %s\n", ex, countExamples(out), st[1], st[2], st[3], st[4], d)
		} else {
			failure = ex + " (oracle)"
			fmt.Printf("FAIL %-14s the oracle found %s disagreements between the events and the rows:\n", ex, st[4])
		}
		for _, l := range bytes.Split(out, []byte("\n")) {
			if bytes.HasPrefix(l, []byte("herald-oracle: ")) {
				fmt.Printf("%s %s\n", verdict, l)
			}
		}
		return failure
	default:
		fmt.Printf("ok   %-14s %s Example tests passed; oracle: %s transactions, %s rows changed, %s events, no disagreement\n", ex, countExamples(out), st[1], st[2], st[3])
		return ""
	}
}

// writeTables fills in the captured schemas' tables, read from the
// generated code, in the example's herald_test.go.
func writeTables(dir string) error {
	models, err := modelsOf(filepath.Join(dir, "ent"))
	if err != nil {
		return err
	}
	names := make([]string, 0, len(models))
	for m := range models {
		names = append(names, m)
	}
	sort.Strings(names)
	var sb strings.Builder
	for i, m := range names {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%q: %q", m, models[m])
	}
	p := filepath.Join(dir, "herald_test.go")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return os.WriteFile(p, bytes.Replace(b, []byte("{TABLES}"), []byte("{"+sb.String()+"}"), 1), 0o644)
}

var (
	clientRE = regexp.MustCompile(`(?m)^\tc\.(\w+) = New(\w+)Client\(c\.config\)$`)
	tableRE  = regexp.MustCompile(`(?m)^\tTable = "([^"]+)"$`)
)

// modelsOf reads the table of each schema of a generated ent package
// captured (its client's fields with the extension's glue, each entity
// package's Table constant), as
// integration/entsuite does.
func modelsOf(entDir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(entDir, "client.go"))
	if err != nil {
		return nil, err
	}
	glue, err := os.ReadFile(filepath.Join(entDir, "entcapture.go"))
	if err != nil {
		return nil, err
	}
	models := map[string]string{}
	for _, m := range clientRE.FindAllStringSubmatch(string(b), -1) {
		// Captured: the extension generated its glue.
		if !strings.EqualFold(m[1], m[2]) || !bytes.Contains(glue, []byte("func (m *"+m[1]+"Mutation) HeraldSchema()")) {
			continue
		}
		pb, err := os.ReadFile(filepath.Join(entDir, strings.ToLower(m[1]), strings.ToLower(m[1])+".go"))
		if err != nil {
			return nil, err
		}
		t := tableRE.FindSubmatch(pb)
		if t == nil {
			return nil, fmt.Errorf("%s: no Table constant", m[1])
		}
		models[m[1]] = string(t[1])
	}
	if len(models) == 0 {
		return nil, fmt.Errorf("%s: no schema clients", entDir)
	}
	// The join tables of plain many-to-many edges entcapture captures:
	// their events' model is named as the table.
	for name, table := range glueparse.JoinTables(glue) {
		if _, dup := models[name]; !dup {
			models[name] = table
		}
	}
	return models, nil
}

// knownFindings are the examples whose events the oracle disagrees with
// because of a capture defect not fixed yet (issue 18), by example; an
// example listed is reported, not failed. Remove an entry when its fix
// lands.
var knownFindings = map[string]string{}

var statsRE = regexp.MustCompile(`herald-oracle-stats (\d+) (\d+) (\d+) (\d+)`)

func countExamples(out []byte) string {
	return fmt.Sprint(bytes.Count(out, []byte("--- PASS: Example")))
}

func goCmd(dir string, args ...string) error {
	return command(dir, "go", args...)
}

// command runs name in dir with -mod=mod, as the work module needs (the
// generator runs go commands in it too).
func command(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
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
	s += "\nrequire (\n\tgithub.com/heraldgo/herald v0.0.0\n\tgithub.com/heraldgo/herald/integration/entsuite v0.0.0\n)\n\n" +
		"replace github.com/heraldgo/herald => " + root + "\n\nreplace github.com/heraldgo/herald/integration/entsuite => " + filepath.Join(root, "integration", "entsuite") + "\n"
	return os.WriteFile(p, []byte(s), 0o644)
}

var (
	schemaTypeRE = regexp.MustCompile(`(?m)^type (\w+) struct \{\s*ent\.Schema\s*\}`)
	importRE     = regexp.MustCompile(`(?m)^import \(\n`)
)

const heraldImports = "import (\n\t\"github.com/heraldgo/herald/entcapture\"\n\t\"github.com/heraldgo/herald/envelope\"\n"

// prepare adds the capture to one example: the mixin on every schema, the
// extension on the code generation (returned), the capture driver on its
// client.
func prepare(dir string) (generation, error) {
	schemas, err := filepath.Glob(filepath.Join(dir, "ent", "schema", "*.go"))
	if err != nil {
		return generation{}, err
	}
	for _, f := range schemas {
		if err := addMixin(f); err != nil {
			return generation{}, err
		}
	}
	gen, err := addExtension(filepath.Join(dir, "ent"))
	if err != nil {
		return generation{}, err
	}
	tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return generation{}, err
	}
	pkg := ""
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			return generation{}, err
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
			return generation{}, err
		}
	}
	return gen, os.WriteFile(filepath.Join(dir, "herald_test.go"), []byte(strings.ReplaceAll(
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

// A generation is how an example's code is generated with
// entcapturegen.Extension: by its own entc.go, run by `go generate`, or by
// the harness's generator (generatorSource) with the features its `ent
// generate` command named.
type generation struct {
	own      bool
	features []string
}

// generatorArgs are the generator's flags for the features.
func (g generation) generatorArgs() []string {
	if len(g.features) == 0 {
		return nil
	}
	return []string{"-feature", strings.Join(g.features, ",")}
}

// addExtension makes the example's code generation use
// entcapturegen.Extension: in its own entc.go, or with the harness's
// generator and the flags of its `ent generate` command, which its
// generate.go is rewritten to run (for a work tree kept; the harness runs
// the generator built once).
func addExtension(entDir string) (generation, error) {
	entc := filepath.Join(entDir, "entc.go")
	if b, err := os.ReadFile(entc); err == nil {
		s := string(b)
		if !strings.Contains(s, "opts := []entc.Option{\n") {
			return generation{}, errors.New(entc + ": no opts := []entc.Option{")
		}
		s = strings.Replace(s, "opts := []entc.Option{\n", "opts := []entc.Option{\n\t\tentc.Extensions(entcapturegen.Extension()),\n", 1)
		s = strings.Replace(s, "import (\n", "import (\n\t\"github.com/heraldgo/herald/entcapture/entcapturegen\"\n", 1)
		return generation{own: true}, os.WriteFile(entc, []byte(s), 0o644)
	}
	var g generation
	if b, err := os.ReadFile(filepath.Join(entDir, "generate.go")); err == nil {
		if m := featureRE.FindStringSubmatch(string(b)); m != nil {
			g.features = strings.Split(m[1], ",")
		}
	}
	sort.Strings(g.features)
	directive := strings.Join(append([]string{"go run -mod=mod ../../" + generatorDir + "/" + generatorFile}, g.generatorArgs()...), " ")
	return g, os.WriteFile(filepath.Join(entDir, "generate.go"), []byte("package ent\n\n//go:generate "+directive+"\n"), 0o644)
}

// generatorDir is the work tree's directory of the generator, whose
// source is generatorFile there and binary generatorDir.
const (
	generatorDir  = "heraldgen"
	generatorFile = "main.go"
)

// writeGenerator writes the generator into the work module. Like the
// entc.go files it replaces, it is built as a file named on the command
// line and its build constraint leaves it out of the module's packages:
// go mod tidy does not see it, so the examples' tests build with the
// versions they did (required by the generator, golang.org/x/tools would
// raise golang.org/x/net and golang.org/x/crypto).
func writeGenerator(work string) error {
	if err := os.MkdirAll(filepath.Join(work, generatorDir), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(work, generatorDir, generatorFile), []byte(generatorSource), 0o644)
}

// generatorSource is the code generator of the examples without an
// entc.go of their own, run in an example's ent directory: ent's
// entc.Generate with the features -feature names and
// entcapturegen.Extension, as each example's entc.go did. One program for
// all of them, built once: an entc.go per example, run by `go run`, was
// compiled and linked again for each, a third of its generation's time.
const generatorSource = `//go:build ignore

// Command heraldgen generates the ent code of the schemas in ./schema with
// herald's capture (written by herald's entexamples harness).
package main

import (
	"flag"
	"log"
	"strings"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/heraldgo/herald/entcapture/entcapturegen"
)

func main() {
	features := flag.String("feature", "", "comma-separated ent features")
	flag.Parse()
	var names []string
	if *features != "" {
		names = strings.Split(*features, ",")
	}
	err := entc.Generate("./schema", &gen.Config{}, entc.FeatureNames(names...), entc.Extensions(entcapturegen.Extension()))
	if err != nil {
		log.Fatal(err)
	}
}
`

// generate generates the examples' code, jobs at once (each still builds
// and runs entc's schema loader, a program of its schemas), and returns
// the error of each example of list. The generator is built once, while
// the first examples with their own entc.go generate, and the others wait
// for it.
func generate(work string, list []string, gens map[string]generation) []error {
	errs := make([]error, len(list))
	sem := make(chan struct{}, max(1, jobs))
	bin := filepath.Join(work, generatorDir, generatorDir)
	built := make(chan struct{})
	var buildErr error
	needed := false
	for _, ex := range list {
		needed = needed || !gens[ex].own
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(built)
		if !needed {
			return
		}
		sem <- struct{}{}
		defer func() { <-sem }()
		buildErr = goCmd(work, "build", "-o", bin, filepath.Join(generatorDir, generatorFile))
	})
	for i, ex := range list {
		g := gens[ex]
		dir := filepath.Join(work, ex, "ent")
		wg.Go(func() {
			if !g.own {
				<-built
				if buildErr != nil {
					errs[i] = buildErr
					return
				}
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			if g.own {
				errs[i] = goCmd(dir, "generate", ".")
			} else {
				errs[i] = command(dir, bin, g.generatorArgs()...)
			}
		})
	}
	wg.Wait()
	return errs
}

// openTemplate replaces ent.Open in the example's tests: the same client,
// on entcapture.Driver, with the outbox table migrated, on a database the
// row-diff oracle of integration/entsuite watches (every transaction's
// events checked against the captured tables before and after it); the
// oracle's counts are printed at the end.
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
	"github.com/heraldgo/herald/integration/entsuite/oracle"
)

var (
	heraldOnce   sync.Once
	heraldOracle *oracle.Oracle
)

// heraldTables are the captured schemas' tables (written by the harness
// from the generated code).
var heraldTables = map[string]string{TABLES}

func heraldOpen(driverName, dataSourceName string, options ...ent.Option) (*ent.Client, error) {
	heraldOnce.Do(func() {
		heraldOracle = oracle.New(oracle.SQLite, oracle.Tables{Models: heraldTables, Mode: oracle.After}, func(f oracle.Finding) {
			fmt.Fprintf(os.Stderr, "herald-oracle: %s\n", f) // not stdout: the examples' output is checked
		})
	})
	probe, err := sql.Open(driverName, dataSourceName)
	if err != nil {
		return nil, err
	}
	drv := probe.Driver()
	_ = probe.Close()
	db := heraldOracle.OpenDB(drv, dataSourceName)
	if err := envelope.Migrate(context.Background(), db, envelope.SQLite, ""); err != nil {
		return nil, err
	}
	return ent.NewClient(append(options, ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.SQLite, db))))...), nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	var s oracle.Stats
	if heraldOracle != nil {
		s = heraldOracle.Stats()
	}
	fmt.Printf("herald-oracle-stats %d %d %d %d\n", s.Checks, s.Rows, s.Events, s.Findings)
	os.Exit(code)
}
`
