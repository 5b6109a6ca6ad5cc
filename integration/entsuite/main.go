// Command entsuite runs ent's own integration suite (entc/integration of
// entgo.io/ent at v0.14.5) with every schema it can captured by
// entcapture, and compares the tests that pass with a run of the suite as
// ent ships it. It also runs the captured suite under the row-diff oracle
// (package oracle), which reads every captured table around each
// transaction and checks the events against what the database holds.
//
//	go -C integration/entsuite run .                      # everything: SQLite and PostgreSQL, base + capture + oracle
//	go -C integration/entsuite run . -runs base,oracle    # what .ci/run runs
//
// Exit status 1 when a pass list differs from the baseline's, or the
// oracle finds a disagreement, that known.txt does not list; a listed
// entry that no longer happens is reported (remove it).
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/lib/pq"

	"github.com/heraldgo/herald/integration/entsuite/oracle"
)

// folder is one package of the suite the harness runs: its directory
// (relative to entc/integration), and the tests that run on SQLite and on
// PostgreSQL (a -test.run pattern; "" = none).
type folder struct {
	dir, sqlite, postgres string
	mysql                 string // on the machine's MariaDB, in TestMaria's 10.5 slot
}

// folders are the suite's packages that run here. Left out (README):
// multischema (MySQL only), migrate (schema migrations, servers on other
// ports; entv1/entv2 have no code generation), config (its only SQLite
// test checks table names of an alternate schema configuration), gremlin.
var folders = []folder{
	{".", "^TestSQLite$", "^TestPostgres$/^12$", "^TestMaria$/^10.5$"},
	{"cascadelete", ".", "", ""},
	{"customid", "^TestSQLite$", "", ""},
	{"edgefield", ".", "", ""},
	{"edgeschema", ".", "", ""},
	{"hooks", ".", "", ""},
	{"idtype", ".", "", ""},
	{"json", "^TestSQLite$", "", ""},
	{"privacy", ".", "", ""},
	{"template", ".", "", ""},
	{"config", "^TestSchemaConfig$", "", ""},
}

type run struct {
	variant, dialect string // variant: base, capture, oracle
	results          map[string]string
	findings         map[string][]string // test -> oracle findings
	report           oracle.Report
	dur              time.Duration
	err              error
	logs             []string
	panics           []string // tests that panicked (their process ended)
}

// skipPattern is a -test.skip pattern for tests that share their parent
// ("^TestPostgres$/^12$/^(Types|Upsert)$"), or top-level tests.
func skipPattern(tests []string) string {
	parent := func(t string) string {
		if i := strings.LastIndex(t, "/"); i >= 0 {
			return t[:i]
		}
		return ""
	}
	p := parent(tests[0])
	var last []string
	for _, t := range tests {
		if parent(t) != p {
			p = "\x00"
			break
		}
		last = append(last, regexp.QuoteMeta(t[strings.LastIndex(t, "/")+1:]))
	}
	if p == "\x00" { // different parents: their top-level tests
		var top []string
		for _, t := range tests {
			a, _, _ := strings.Cut(t, "/")
			top = append(top, regexp.QuoteMeta(a))
		}
		slices.Sort(top)
		return "^(" + strings.Join(slices.Compact(top), "|") + ")$"
	}
	var sb strings.Builder
	if p != "" {
		for _, e := range strings.Split(p, "/") {
			sb.WriteString("^" + regexp.QuoteMeta(e) + "$/")
		}
	}
	sb.WriteString("^(" + strings.Join(last, "|") + ")$")
	return sb.String()
}

func main() {
	// The go commands this harness runs build modules of its own work
	// tree, which the repository's go.work does not list: workspace mode
	// off for them (it also refuses their -mod=mod).
	_ = os.Setenv("GOWORK", "off")
	var (
		suite     = flag.String("suite", os.Getenv("HERALD_ENT_SUITE"), "ent's entc/integration folder (default: ../shared/thirdparty/ent-integration-v0.14.5/entc/integration beside the repository root)")
		dialects  = flag.String("dialects", "sqlite,postgres", "comma-separated: sqlite, postgres, mysql (the machine's MariaDB in TestMaria's 10.5 slot; no oracle run)")
		runs      = flag.String("runs", "base,capture,oracle", "comma-separated: base (ent as shipped), capture (every schema captured), oracle (captured, judged by the oracle)")
		only      = flag.String("folders", "", "comma-separated folders of the suite (default: all the harness runs; . is the main suite)")
		mode      = flag.String("mode", "beforeandafter", "payload mode of every schema: keys, after, beforeandafter")
		jobs      = flag.Int("j", 2, "runs at a time")
		verbose   = flag.Bool("v", false, "print the output of the tests a run lost")
		composite = flag.Bool("composite", true, "capture the edge schemas with a composite id (field.ID(...)); -composite=false leaves them out")
		known     = flag.String("known", "known.txt", "the known differences")
		workDir   = flag.String("work", "work", "the work directory (relative to integration/entsuite), replaced by each run unless -reuse")
		reuse     = flag.Bool("reuse", false, "reuse work/ as the last run left it (no copy, generation or build): for iterating on the oracle's findings")
	)
	flag.Parse()
	h := &harness{dialects: split(*dialects), runs: split(*runs), mode: *mode, jobs: *jobs, verbose: *verbose, composite: *composite, knownFile: *known, reuse: *reuse, workDir: *workDir}
	if *only != "" {
		for _, f := range split(*only) {
			i := slices.IndexFunc(folders, func(x folder) bool { return x.dir == f })
			if i < 0 {
				fmt.Fprintf(os.Stderr, "entsuite: -folders: unknown %q\n", f)
				os.Exit(2)
			}
			h.folders = append(h.folders, folders[i])
		}
	} else {
		h.folders = folders
	}
	if err := h.main(*suite); err != nil {
		fmt.Fprintln(os.Stderr, "entsuite:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

type harness struct {
	dialects, runs []string
	folders        []folder
	mode           string
	jobs           int
	verbose        bool
	composite      bool
	knownFile      string
	reuse          bool
	workDir        string

	here, root, work string
	skipped          []string // schemas left uncaptured
}

func (h *harness) main(suite string) error {
	start := time.Now()
	var err error
	if h.here, err = os.Getwd(); err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(h.here, "go.mod")); err != nil || !bytes.Contains(b, []byte("module github.com/heraldgo/herald/integration/entsuite\n")) {
		return errors.New("run me from integration/entsuite (go -C integration/entsuite run .)")
	}
	h.root = filepath.Dir(filepath.Dir(h.here))
	if suite == "" {
		suite = filepath.Join(h.root, "..", "shared", "thirdparty", "ent-integration-v0.14.5", "entc", "integration")
	}
	if _, err := os.Stat(filepath.Join(suite, "integration_test.go")); err != nil {
		return fmt.Errorf("ent's integration suite not found at %s (give -suite or HERALD_ENT_SUITE): %w", suite, err)
	}
	known, err := readKnown(filepath.Join(h.here, h.knownFile))
	if err != nil {
		return err
	}
	for _, r := range h.runs {
		if r != "base" && r != "capture" && r != "oracle" {
			return fmt.Errorf("-runs: unknown %q", r)
		}
	}
	for _, d := range h.dialects {
		if d != "sqlite" && d != "postgres" && d != "mysql" {
			return fmt.Errorf("-dialects: unknown %q", d)
		}
	}
	entDir, err := entSource()
	if err != nil {
		return err
	}
	h.work = h.workDir
	if !filepath.IsAbs(h.work) {
		h.work = filepath.Join(h.here, h.work)
	}
	variants := map[string]bool{}
	for _, r := range h.runs {
		v := r
		if v == "oracle" {
			v = "capture"
		}
		variants[v] = true
	}
	if h.reuse {
		// The generated code as the last run left it, the glue written
		// again and the binaries rebuilt (only what changed).
		if variants["capture"] {
			for _, f := range h.folders {
				if err := h.patchClient(filepath.Join(h.work, "capture", f.dir, "ent")); err != nil {
					return err
				}
			}
		}
		for v := range variants {
			if err := goCmd(filepath.Join(h.work, v), h.buildArgs(v)...); err != nil {
				return err
			}
		}
		return h.runAll(known, start)
	}
	if err := os.RemoveAll(h.work); err != nil {
		return err
	}
	t0 := time.Now()
	for v := range variants {
		dir := filepath.Join(h.work, v)
		if err := copySuite(suite, dir); err != nil {
			return err
		}
		if err := h.goMod(dir, entDir); err != nil {
			return err
		}
	}
	if variants["capture"] {
		if err := h.capture(filepath.Join(h.work, "capture")); err != nil {
			return err
		}
	}
	for v := range variants {
		if err := h.testFiles(filepath.Join(h.work, v), v == "capture"); err != nil {
			return err
		}
	}
	fmt.Printf("prepared the suite in %s\n", time.Since(t0).Round(time.Second))
	for _, s := range h.skipped {
		fmt.Println("  not captured:", s)
	}
	t0 = time.Now()
	var wg sync.WaitGroup
	buildErr := map[string]error{}
	var mu sync.Mutex
	for v := range variants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := h.build(v)
			mu.Lock()
			buildErr[v] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	for v, err := range buildErr {
		if err != nil {
			return fmt.Errorf("build the %s suite: %w", v, err)
		}
	}
	fmt.Printf("built the suite in %s\n", time.Since(t0).Round(time.Second))

	return h.runAll(known, start)
}

func (h *harness) runAll(known []*knownEntry, start time.Time) error {
	var wg sync.WaitGroup
	var rs []*run
	for _, d := range h.dialects {
		for _, v := range h.runs {
			if d == "mysql" && v == "oracle" {
				// The oracle tells written rows by PostgreSQL's xmin or
				// SQLite's statement matching; it has no MySQL form yet.
				fmt.Println("  mysql    oracle   not run: the oracle has no MySQL form (README)")
				continue
			}
			rs = append(rs, &run{variant: v, dialect: d})
		}
	}
	sem := make(chan struct{}, max(1, h.jobs))
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t := time.Now()
			r.err = h.exec(r)
			r.dur = time.Since(t)
			status := "done"
			if r.err != nil {
				status = "error: " + r.err.Error()
			}
			fmt.Printf("  %-8s %-8s %s in %s\n", r.dialect, r.variant, status, r.dur.Round(time.Second))
		}()
	}
	wg.Wait()
	return h.compare(rs, known, time.Since(start))
}

// entSource is the module cache directory of entgo.io/ent@v0.14.5 (the
// suite's go.mod replaces ent with the repository it lives in).
func entSource() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "entgo.io/ent@v0.14.5")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download entgo.io/ent@v0.14.5: %w", err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download entgo.io/ent@v0.14.5: no Dir in %s", out)
	}
	return m.Dir, nil
}

// copySuite copies the suite, leaving out what needs servers that do not
// exist here or is not run.
func copySuite(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		top := strings.SplitN(rel, string(filepath.Separator), 2)[0]
		if d.IsDir() {
			if top == "gremlin" || top == "compose" || top == "migrate" || top == "multischema" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

// goMod points the suite's module at ent v0.14.5 in the module cache, and
// at this herald and this harness's oracle.
func (h *harness) goMod(dir, entDir string) error {
	p := filepath.Join(dir, "go.mod")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	s := string(b)
	for _, r := range [][2]string{
		{"replace entgo.io/ent => ../../\n", "replace entgo.io/ent => " + entDir + "\n"},
		{"\ngo 1.23\n", "\ngo 1.26.0\n"},
	} {
		if !strings.Contains(s, r[0]) {
			return fmt.Errorf("%s: no %q", p, r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	s += "\nrequire (\n\tgithub.com/heraldgo/herald v0.0.0\n\tgithub.com/heraldgo/herald/integration/entsuite v0.0.0\n)\n\n" +
		"replace github.com/heraldgo/herald => " + h.root + "\n\nreplace github.com/heraldgo/herald/integration/entsuite => " + h.here + "\n"
	return os.WriteFile(p, []byte(s), 0o644)
}

func goCmd(dir string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return nil
}

// capture adds entcapture to every folder of the copy: the mixin on every
// schema, the extension on the code generation; it regenerates the code
// and routes the generated ent.Open and NewClient through the oracle's
// glue.
func (h *harness) capture(mod string) error {
	for _, f := range h.folders {
		entDir := filepath.Join(mod, f.dir, "ent")
		if err := h.addMixins(f.dir, filepath.Join(entDir, "schema")); err != nil {
			return err
		}
		if err := addExtension(entDir); err != nil {
			return fmt.Errorf("%s: %w", f.dir, err)
		}
	}
	if err := goCmd(mod, "mod", "tidy", "-e"); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(h.folders))
	sem := make(chan struct{}, max(1, h.jobs))
	for i, f := range h.folders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = goCmd(filepath.Join(mod, f.dir, "ent"), "generate", ".")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, f := range h.folders {
		if err := h.patchClient(filepath.Join(mod, f.dir, "ent")); err != nil {
			return fmt.Errorf("%s: %w", f.dir, err)
		}
	}
	return goCmd(mod, "mod", "tidy", "-e")
}

// schemaTypes returns the exported types of a schema package that embed
// ent.Schema (directly or through a type of the package that does), and
// which of them declare a composite id (field.ID).
func schemaTypes(dir string) (types map[string]string, files map[string]string, composite map[string]bool, err error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	parsed := map[string]*ast.File{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		fname := filepath.Join(dir, e.Name())
		f, err := parser.ParseFile(fset, fname, nil, 0)
		if err != nil {
			return nil, nil, nil, err
		}
		parsed[fname] = f
	}
	embeds := map[string]string{} // type -> embedded field type ("ent.Schema" or a local type)
	files = map[string]string{}
	composite = map[string]bool{}
	{
		for fname, f := range parsed {
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.TypeSpec:
					st, ok := x.Type.(*ast.StructType)
					if !ok {
						return true
					}
					for _, fl := range st.Fields.List {
						if len(fl.Names) != 0 {
							continue
						}
						switch t := fl.Type.(type) {
						case *ast.SelectorExpr:
							if id, ok := t.X.(*ast.Ident); ok && id.Name == "ent" && t.Sel.Name == "Schema" {
								embeds[x.Name.Name] = "Schema"
							}
						case *ast.Ident:
							if _, ok := embeds[x.Name.Name]; !ok {
								embeds[x.Name.Name] = "local:" + t.Name
							}
						}
					}
					files[x.Name.Name] = fname
				case *ast.FuncDecl:
					if x.Recv == nil || len(x.Recv.List) != 1 || x.Name.Name != "Annotations" {
						return true
					}
					var recv string
					switch t := x.Recv.List[0].Type.(type) {
					case *ast.Ident:
						recv = t.Name
					case *ast.StarExpr:
						if id, ok := t.X.(*ast.Ident); ok {
							recv = id.Name
						}
					}
					ast.Inspect(x.Body, func(m ast.Node) bool {
						if c, ok := m.(*ast.CallExpr); ok {
							if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "ID" {
								if id, ok := s.X.(*ast.Ident); ok && id.Name == "field" {
									composite[recv] = true
								}
							}
						}
						return true
					})
				}
				return true
			})
		}
	}
	isSchema := func(t string) (string, bool) {
		e, ok := embeds[t]
		for i := 0; ok && strings.HasPrefix(e, "local:") && i < 10; i++ {
			var e2 string
			e2, ok = embeds[strings.TrimPrefix(e, "local:")]
			if ok && e2 == "Schema" {
				return strings.TrimPrefix(e, "local:"), true
			}
			e = e2
		}
		return e, ok && e == "Schema"
	}
	types = map[string]string{}
	for t := range embeds {
		if !ast.IsExported(t) {
			continue
		}
		if field, ok := isSchema(t); ok {
			types[t] = field
		}
	}
	return types, files, composite, nil
}

// addMixins appends entcapture.Mixin to the mixins of every schema of a
// schema package: a schema's own Mixin method is renamed and called.
func (h *harness) addMixins(folder, dir string) error {
	types, files, composite, err := schemaTypes(dir)
	if err != nil {
		return err
	}
	if len(types) == 0 {
		return fmt.Errorf("%s: no schema", dir)
	}
	names := make([]string, 0, len(types))
	for t := range types {
		names = append(names, t)
	}
	sort.Strings(names)
	edits := map[string]string{}
	for _, t := range names {
		if composite[t] && !h.composite {
			h.skipped = append(h.skipped, fmt.Sprintf("%s/%s (composite id: entcapture refuses it at go generate)", folder, t))
			continue
		}
		f := files[t]
		s, ok := edits[f]
		if !ok {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			s = string(b)
		}
		own := regexp.MustCompile(`func \((\w+ )?\*?` + t + `\) Mixin\(\) \[\]ent\.Mixin \{`)
		call := "t." + types[t] + ".Mixin()"
		if own.MatchString(s) {
			s = own.ReplaceAllString(s, "func (${1}"+t+") heraldMixin() []ent.Mixin {")
			call = "t.heraldMixin()"
		}
		s += "\n// Mixin adds the capture (herald's entsuite harness).\nfunc (t " + t + ") Mixin() []ent.Mixin {\n\treturn append(" + call +
			", heraldentcapture.Mixin(heraldenvelope.Options{Payload: heraldenvelope.BeforeAndAfter}))\n}\n"
		edits[f] = s
	}
	for f, s := range edits {
		pkg := regexp.MustCompile(`(?m)^package \w+\n`).FindStringIndex(s)
		if pkg == nil {
			return fmt.Errorf("%s: no package clause", f)
		}
		s = s[:pkg[1]] + "\nimport (\n\theraldentcapture \"github.com/heraldgo/herald/entcapture\"\n\theraldenvelope \"github.com/heraldgo/herald/envelope\"\n)\n" + s[pkg[1]:]
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			return err
		}
	}
	return nil
}

var (
	featureRE  = regexp.MustCompile(`--feature[ =]([\w/,]+)`)
	templateRE = regexp.MustCompile(`--template[ =](\S+)`)
	headerRE   = regexp.MustCompile(`--header ("(?:[^"\\]|\\.)*")`)
	idtypeRE   = regexp.MustCompile(`--idtype (\w+)`)
)

// addExtension makes a folder's code generation use entcapture.Extension:
// its own entc.go calls heraldGenerate (entc.Generate with the extension),
// or one written from the flags of its `ent generate` command does.
func addExtension(entDir string) error {
	entc := filepath.Join(entDir, "entc.go")
	if b, err := os.ReadFile(entc); err == nil {
		s := string(b)
		if !strings.Contains(s, "entc.Generate(") || !strings.Contains(s, "\nimport (\n") {
			return errors.New(entc + ": no entc.Generate( or import block")
		}
		s = strings.Replace(s, "entc.Generate(", "heraldGenerate(", 1)
		s = strings.Replace(s, "\nimport (\n", "\nimport (\n\theraldentcapturegen \"github.com/heraldgo/herald/entcapture/entcapturegen\"\n", 1)
		s += `
// heraldGenerate is entc.Generate with entcapture's extension (herald's entsuite harness).
func heraldGenerate(dir string, cfg *gen.Config, opts ...entc.Option) error {
	return entc.Generate(dir, cfg, append(opts, entc.Extensions(heraldentcapturegen.Extension()))...)
}
`
		return os.WriteFile(entc, []byte(s), 0o644)
	}
	b, err := os.ReadFile(filepath.Join(entDir, "generate.go"))
	if err != nil {
		return err
	}
	line := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "//go:generate ") {
			line = l
		}
	}
	if !strings.Contains(line, "entgo.io/ent/cmd/ent generate") {
		return fmt.Errorf("%s: no ent generate command", entDir)
	}
	var opts []string
	if m := featureRE.FindStringSubmatch(line); m != nil {
		q := []string{}
		for _, f := range strings.Split(m[1], ",") {
			q = append(q, strconv.Quote(f))
		}
		opts = append(opts, "entc.FeatureNames("+strings.Join(q, ", ")+")")
	}
	if m := templateRE.FindStringSubmatch(line); m != nil {
		opts = append(opts, "entc.TemplateDir("+strconv.Quote(m[1])+")")
	}
	opts = append(opts, "entc.Extensions(heraldentcapturegen.Extension())")
	cfg := ""
	if m := headerRE.FindStringSubmatch(line); m != nil {
		hdr, err := strconv.Unquote(m[1])
		if err != nil {
			return fmt.Errorf("%s: --header: %w", entDir, err)
		}
		cfg += "Header: " + strconv.Quote(hdr) + ", "
	}
	imports := ""
	if m := idtypeRE.FindStringSubmatch(line); m != nil {
		t := map[string]string{"int": "TypeInt", "int64": "TypeInt64", "uint64": "TypeUint64", "string": "TypeString", "uint": "TypeUint"}[m[1]]
		if t == "" {
			return fmt.Errorf("%s: --idtype %s", entDir, m[1])
		}
		cfg += "IDType: &field.TypeInfo{Type: field." + t + "}, "
		imports = "\t\"entgo.io/ent/schema/field\"\n"
	}
	src := "//go:build ignore\n\npackage main\n\nimport (\n\t\"log\"\n\n\t\"entgo.io/ent/entc\"\n\t\"entgo.io/ent/entc/gen\"\n" + imports +
		"\n\theraldentcapturegen \"github.com/heraldgo/herald/entcapture/entcapturegen\"\n)\n\n" +
		"// The folder's `ent generate` command, with entcapture's extension (herald's entsuite harness).\nfunc main() {\n" +
		"\tif err := entc.Generate(\"./schema\", &gen.Config{" + strings.TrimSuffix(cfg, ", ") + "}, " + strings.Join(opts, ", ") + "); err != nil {\n\t\tlog.Fatal(err)\n\t}\n}\n"
	if err := os.WriteFile(filepath.Join(entDir, "entc.go"), []byte(src), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(entDir, "generate.go"), []byte("package ent\n\n//go:generate go run -mod=mod entc.go\n"), 0o644)
}

// sensitiveRE finds the Sensitive columns in the extension's declaration
// of a schema (the columns its events leave out).
func sensitiveRE(schema string) *regexp.Regexp {
	return regexp.MustCompile(`(?s)var herald` + schema + `Schema = &entcapture(?:rt)?\.Schema\{\n(?:\t[^\n]*\n)*?\tSensitive: +\[\]string\{([^}]*)\}`)
}

var (
	clientRE = regexp.MustCompile(`(?m)^\tc\.(\w+) = New(\w+)Client\(c\.config\)$`)
	tableRE  = regexp.MustCompile(`(?m)^\tTable = "([^"]+)"$`)

	// the generated NewClient's statement that makes the client (ent's
	// template and the template folder's own)
	newClientRE = regexp.MustCompile(`(?m)^func NewClient\(opts \.\.\.Option\) \*Client \{\n(?:\t.*\n)*?\tclient := &Client\{config: [^}\n]+\}\n`)
)

// patchClient routes the generated ent.Open through oracle.Open and the
// generated NewClient through oracle.Wrap, and writes the map of the
// captured schemas' tables the oracle reads.
func (h *harness) patchClient(entDir string) error {
	p := filepath.Join(entDir, "client.go")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	s := string(b)
	const open = "\t\tdrv, err := sql.Open(driverName, dataSourceName)\n"
	switch {
	case h.reuse && strings.Contains(s, "heraldWrap("):
		// patched by the last run
	case strings.Count(s, open) != 1:
		return fmt.Errorf("%s: want one %q", p, open)
	default:
		s = strings.Replace(s, open, "\t\tdrv, err := heraldOpen(driverName, dataSourceName)\n", 1)
		if m := newClientRE.FindAllStringIndex(s, -1); len(m) != 1 {
			return fmt.Errorf("%s: want one NewClient with client := &Client{config: …}", p)
		}
		s = newClientRE.ReplaceAllString(s, "${0}\tclient.driver = heraldWrap(client.driver)\n")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return err
		}
	}
	skipped := map[string]bool{}
	rel, _ := filepath.Rel(filepath.Join(h.work, "capture"), filepath.Dir(entDir))
	for _, sk := range h.skipped {
		if strings.HasPrefix(sk, rel+"/") {
			skipped[strings.Fields(strings.TrimPrefix(sk, rel+"/"))[0]] = true
		}
	}
	glue, err := os.ReadFile(filepath.Join(entDir, "entcapture.go"))
	if err != nil {
		return err
	}
	var schemas []string
	models := map[string]string{}
	omit := map[string][]string{}
	for _, m := range clientRE.FindAllStringSubmatch(s, -1) {
		// Captured: the extension generated its glue.
		if !strings.EqualFold(m[1], m[2]) || !bytes.Contains(glue, []byte("func (m *"+m[2]+"Mutation) HeraldSchema()")) {
			if !skipped[m[1]] {
				h.skipped = append(h.skipped, fmt.Sprintf("%s/%s (no capture glue generated)", rel, m[1]))
			}
			continue
		}
		pb, err := os.ReadFile(filepath.Join(entDir, strings.ToLower(m[1]), strings.ToLower(m[1])+".go"))
		if err != nil {
			return err
		}
		t := tableRE.FindStringSubmatch(string(pb))
		if t == nil {
			return fmt.Errorf("%s: no Table constant", m[1])
		}
		schemas = append(schemas, m[1])
		models[m[1]] = t[1]
		if sm := sensitiveRE(m[1]).FindSubmatch(glue); sm != nil {
			for _, q := range strings.Split(string(sm[1]), ",") {
				if c, err := strconv.Unquote(strings.TrimSpace(q)); err == nil {
					omit[t[1]] = append(omit[t[1]], c)
				}
			}
		}
	}
	if len(schemas) == 0 {
		return fmt.Errorf("%s: no schema clients", p)
	}
	// The join tables entcapture captures (both sides captured), read by
	// the oracle like the schemas' tables: ent gives them a composite
	// primary key of the two foreign keys, which is the events' key.
	var joins []string
	for name, table := range oracle.JoinTables(glue) {
		if _, dup := models[name]; !dup {
			joins = append(joins, name)
			models[name] = table
		}
	}
	sort.Strings(joins)
	var sb strings.Builder
	sb.WriteString("// Code written by herald's entsuite harness.\n\npackage ent\n\nimport (\n\t\"entgo.io/ent/dialect\"\n\tentsql \"entgo.io/ent/dialect/sql\"\n\n\t\"github.com/heraldgo/herald/integration/entsuite/oracle\"\n)\n\n")
	sb.WriteString("// heraldSchemas are the captured schemas; heraldTables their tables;\n// heraldOmit the columns their events leave out (Sensitive).\nvar (\n\theraldSchemas = []string{")
	for i, sc := range schemas {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Quote(sc))
	}
	sb.WriteString("}\n\theraldTables = map[string]string{")
	for i, sc := range append(slices.Clone(schemas), joins...) {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Quote(sc) + ": " + strconv.Quote(models[sc]))
	}
	sb.WriteString("}\n\theraldOmit = map[string][]string{")
	tables := make([]string, 0, len(omit))
	for tb := range omit {
		tables = append(tables, tb)
	}
	sort.Strings(tables)
	for _, tb := range tables {
		sb.WriteString(strconv.Quote(tb) + ": {")
		for _, c := range omit[tb] {
			sb.WriteString(strconv.Quote(c) + ", ")
		}
		sb.WriteString("}, ")
	}
	sb.WriteString("}\n)\n\nfunc heraldOpen(driverName, dataSourceName string) (*entsql.Driver, error) {\n\treturn oracle.Open(driverName, dataSourceName, heraldTables, heraldOmit)\n}\n\n")
	sb.WriteString("func heraldWrap(drv dialect.Driver) dialect.Driver { return oracle.Wrap(drv, heraldSchemas) }\n")
	src, err := format.Source([]byte(sb.String()))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(entDir, "zz_herald.go"), src, 0o644)
}

// testFiles adds to each folder's tests: the PostgreSQL database of the
// run (HERALD_ENTSUITE_PGDB, in place of the suite's dbname=test), and in
// the captured copy a TestMain that writes the oracle's counts and an
// import of the generated ent/runtime (the capture hooks are schema hooks).
func (h *harness) testFiles(mod string, captured bool) error {
	p := filepath.Join(mod, "integration_test.go")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	const dsn = `"host=localhost port=%d user=postgres dbname=test password=pass sslmode=disable"`
	if !bytes.Contains(b, []byte(dsn)) {
		return fmt.Errorf("%s: no %s", p, dsn)
	}
	b = bytes.Replace(b, []byte(dsn), []byte(`"host=127.0.0.1 port=%d user=postgres dbname="+heraldPGDB()+" password=pass sslmode=disable"`), 1)
	// TestMaria's 10.5 slot: the machine's MariaDB (HERALD_MYSQL_DSN), the
	// run's database; the other slots keep their ports (no server there).
	const myDSN = `fmt.Sprintf("root:pass@tcp(%s)/test?parseTime=True", addr)`
	if bytes.Count(b, []byte(myDSN)) != 2 {
		return fmt.Errorf("%s: not 2 of %s", p, myDSN)
	}
	b = bytes.ReplaceAll(b, []byte(myDSN), []byte(`heraldMyDSN(addr)`))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return err
	}
	for _, f := range h.folders {
		dir := filepath.Join(mod, f.dir)
		tests, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		pkg := ""
		for _, t := range tests {
			b, err := os.ReadFile(t)
			if err != nil {
				return err
			}
			if m := regexp.MustCompile(`(?m)^package (\w+)`).FindSubmatch(b); m != nil && pkg == "" {
				pkg = string(m[1])
			}
			if bytes.Contains(b, []byte("func TestMain(")) {
				return fmt.Errorf("%s has a TestMain", t)
			}
		}
		modPath := "entgo.io/ent/entc/integration"
		if f.dir != "." {
			modPath += "/" + f.dir
		}
		var sb strings.Builder
		sb.WriteString("// Code written by herald's entsuite harness.\n\npackage " + pkg + "\n\nimport (\n\t\"os\"\n")
		if captured {
			sb.WriteString("\t\"testing\"\n\n\t\"github.com/heraldgo/herald/integration/entsuite/oracle\"\n")
			if _, err := os.Stat(filepath.Join(dir, "ent", "runtime")); err == nil {
				sb.WriteString("\t_ \"" + modPath + "/ent/runtime\" // installs the schema hooks, the capture's among them\n")
			}
		}
		sb.WriteString(")\n\nfunc heraldPGDB() string {\n\tif db := os.Getenv(\"HERALD_ENTSUITE_PGDB\"); db != \"\" {\n\t\treturn db\n\t}\n\treturn \"test\"\n}\n\nvar _ = heraldPGDB\n")
		if f.dir == "." {
			sb.WriteString(heraldMyDSNFunc)
		}
		if captured {
			sb.WriteString("\nfunc TestMain(m *testing.M) {\n\tcode := m.Run()\n\toracle.Finish()\n\tos.Exit(code)\n}\n")
		}
		if err := os.WriteFile(filepath.Join(dir, "zz_herald_test.go"), []byte(sb.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func binName(f folder) string {
	if f.dir == "." {
		return "integration.test"
	}
	return filepath.Base(f.dir) + ".test"
}

// build compiles each folder's tests of a variant into work/bin-<variant>.
func (h *harness) build(variant string) error {
	mod := filepath.Join(h.work, variant)
	args := h.buildArgs(variant)
	if variant == "base" {
		// The captured copy's module graph (herald's requirements raise
		// some of the suite's), so both runs use the same versions.
		for _, n := range []string{"go.mod", "go.sum"} {
			b, err := os.ReadFile(filepath.Join(h.work, "capture", n))
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					break
				}
				return err
			}
			if err := os.WriteFile(filepath.Join(mod, n), b, 0o644); err != nil {
				return err
			}
		}
		if err := goCmd(mod, "mod", "tidy", "-e"); err != nil {
			return err
		}
	}
	return goCmd(mod, args...)
}

func (h *harness) buildArgs(variant string) []string {
	args := []string{"test", "-c", "-o", filepath.Join(h.work, "bin-"+variant) + string(filepath.Separator)}
	for _, f := range h.folders {
		args = append(args, "./"+f.dir)
	}
	return args
}

func (h *harness) exec(r *run) error {
	variant := r.variant
	if variant == "oracle" {
		variant = "capture"
	}
	tag := r.dialect + "-" + r.variant
	env := append(os.Environ(), "HERALD_ENTSUITE_MODE="+h.mode)
	if r.variant == "oracle" {
		env = append(env, "HERALD_ENTSUITE_ORACLE=1")
	}
	if r.dialect == "postgres" {
		// One database per run and work directory (two harnesses may run
		// at once).
		name := "herald_entsuite_" + r.variant
		if w := filepath.Base(h.work); w != "work" {
			name += "_" + strings.Map(func(c rune) rune {
				if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
					return c
				}
				return '_'
			}, strings.ToLower(w))
		}
		drop, err := pgDatabase(name)
		if err != nil {
			return err
		}
		defer drop()
		env = append(env, "HERALD_ENTSUITE_PGDB="+name)
	}
	if r.dialect == "mysql" {
		dsn, drop, err := myDatabase("herald_entsuite_" + r.variant + "_" + strings.Map(func(c rune) rune {
			if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
				return c
			}
			return '_'
		}, strings.ToLower(filepath.Base(h.work))))
		if err != nil {
			return err
		}
		defer drop()
		env = append(env, "HERALD_ENTSUITE_MYDSN="+dsn)
	}
	r.results = map[string]string{}
	r.findings = map[string][]string{}
	for _, f := range h.folders {
		pattern := f.sqlite
		switch r.dialect {
		case "postgres":
			pattern = f.postgres
		case "mysql":
			pattern = f.mysql
		}
		if pattern == "" {
			continue
		}
		name := strings.ReplaceAll(f.dir, "/", "_")
		if name == "." {
			name = "integration"
		}
		report := filepath.Join(h.work, tag+"-"+name+".json")
		bin := filepath.Join(h.work, "bin-"+variant, binName(f))
		// A test that panics ends its process: it is recorded as failed
		// and the rest runs again without it (at most 20 times).
		var skip string
		var panics []string
		for attempt := 0; ; attempt++ {
			args := []string{"tool", "test2json", "-t", bin, "-test.v=test2json", "-test.count=1", "-test.timeout=15m", "-test.run=" + pattern}
			if skip != "" {
				args = append(args, "-test.skip="+skip)
			}
			cmd := exec.Command("go", args...)
			cmd.Dir = filepath.Join(h.work, variant, f.dir)
			cmd.Env = append(env, "HERALD_ENTSUITE_REPORT="+report)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			runErr := cmd.Run()
			log := filepath.Join(h.work, fmt.Sprintf("%s-%s-%d.log", tag, name, attempt))
			if err := os.WriteFile(log, out.Bytes(), 0o644); err != nil {
				return err
			}
			r.logs = append(r.logs, log)
			n, panicked, lastRun := 0, "", ""
			sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
			sc.Buffer(make([]byte, 1<<20), 1<<26)
			for sc.Scan() {
				var ev struct{ Action, Test, Output string }
				if json.Unmarshal(sc.Bytes(), &ev) != nil {
					continue
				}
				if ev.Action == "run" {
					lastRun = ev.Test
				}
				if ev.Action == "output" && strings.HasPrefix(ev.Output, "panic: ") && panicked == "" {
					// The last test started (the suite's tests run one at a time).
					panicked = lastRun
				}
				if ev.Test == "" {
					continue
				}
				test := name + ":" + ev.Test
				switch ev.Action {
				case "pass", "fail", "skip":
					r.results[test] = ev.Action
					n++
				case "output":
					if f, ok := strings.CutPrefix(strings.TrimSpace(ev.Output), "herald-oracle: "); ok {
						r.findings[test] = append(r.findings[test], f)
					}
				}
			}
			if n == 0 {
				return fmt.Errorf("%s: no test results (%w); see %s", f.dir, runErr, log)
			}
			finished := false
			if b, err := os.ReadFile(report); err == nil {
				finished = true
				var rep oracle.Report
				if err := json.Unmarshal(b, &rep); err != nil {
					return err
				}
				_ = os.Remove(report)
				r.report.Clients += rep.Clients
				r.report.Watched += rep.Watched
				r.report.Checks += rep.Checks
				r.report.Events += rep.Events
				r.report.Rows += rep.Rows
				r.report.Findings += rep.Findings
			}
			if finished || variant != "capture" || panicked == "" || attempt == 20 {
				if !finished && variant == "capture" {
					return fmt.Errorf("%s: no capture report (the run did not finish?); see %s", f.dir, log)
				}
				break
			}
			// The test of the suite's list is skipped: TestSQLite/Types,
			// TestPostgres/12/Types (not a subtest of it).
			depth := 2
			if strings.HasPrefix(panicked, "TestPostgres/") {
				depth = 3
			}
			if parts := strings.Split(panicked, "/"); len(parts) > depth {
				panicked = strings.Join(parts[:depth], "/")
			}
			fmt.Printf("  %-8s %-8s %s: %s panicked; running the rest without it\n", r.dialect, r.variant, name, panicked)
			panics = append(panics, panicked)
			skip = skipPattern(panics)
		}
		// A test that panicked, and the tests above it, failed.
		for _, p := range panics {
			r.panics = append(r.panics, name+":"+p)
			for t := p; t != ""; {
				r.results[name+":"+t] = "fail"
				i := strings.LastIndex(t, "/")
				if i < 0 {
					break
				}
				t = t[:i]
			}
		}
	}
	return nil
}

// pgDatabase creates a fresh database for one run.
func pgDatabase(name string) (func(), error) {
	base := os.Getenv("HERALD_POSTGRES_DSN")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if u, err := url.Parse(base); err != nil || u.Port() != "5432" {
		return nil, fmt.Errorf("HERALD_POSTGRES_DSN %q: the suite dials port 5432 (TestPostgres/12)", base)
	}
	admin, err := sql.Open("postgres", base)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", base, err)
	}
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		_ = admin.Close()
		return nil, err
	}
	return func() {
		_, _ = admin.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
		_ = admin.Close()
	}, nil
}

// heraldMyDSNFunc points TestMaria's 10.5 slot at HERALD_ENTSUITE_MYDSN
// (written into the main suite's zz_herald_test.go).
const heraldMyDSNFunc = `
func heraldMyDSN(addr string) string {
	if dsn := os.Getenv("HERALD_ENTSUITE_MYDSN"); dsn != "" && addr == "localhost:4306" {
		return dsn
	}
	return "root:pass@tcp(" + addr + ")/test?parseTime=True"
}
`

// myDatabase creates a fresh database for one run on the MySQL or MariaDB
// server at HERALD_MYSQL_DSN (default the machine's MariaDB,
// root@tcp(127.0.0.1:3306)/) and returns its DSN for the suite.
func myDatabase(name string) (string, func(), error) {
	base := os.Getenv("HERALD_MYSQL_DSN")
	if base == "" {
		base = "root@tcp(127.0.0.1:3306)/"
	}
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		return "", nil, fmt.Errorf("HERALD_MYSQL_DSN %q: %w", base, err)
	}
	admin, err := sql.Open("mysql", base)
	if err != nil {
		return "", nil, err
	}
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		_ = admin.Close()
		return "", nil, fmt.Errorf("MySQL at %s: %w", base, err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		_ = admin.Close()
		return "", nil, err
	}
	cfg.DBName = name
	cfg.ParseTime = true
	return cfg.FormatDSN(), func() {
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
		_ = admin.Close()
	}, nil
}
