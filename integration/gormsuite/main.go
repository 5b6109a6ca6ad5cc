// Command gormsuite runs GORM's own test suite (the tests/ folder of
// gorm.io/gorm at the version herald requires) with herald's capture
// plugin installed on every *gorm.DB the suite opens, capturing every
// model the suite writes, and compares the tests that pass with a run
// without the plugin. The plugin is transparent when both pass lists are
// the same, for every dialect and payload mode — but for subtests that ran
// in only one of the two runs, under a top-level test that passed in both
// runs (and ancestors that passed wherever they ran): GORM's suite makes
// some subtests from the rows it reads back, and which ones varies from run
// to run without the plugin too (listed, not counted).
//
//	cd integration/gormsuite && go run .                      # everything: 2 dialects x (baseline + 3 modes)
//	cd integration/gormsuite && go run . -modes beforeandafter # what .ci/run runs
//
// The suite is read from ../shared/thirdparty/gorm-tests-v1.31.2/tests
// relative to the repository root (override with -suite or
// HERALD_GORM_SUITE). It is copied into work/suite, every gorm.Open call
// in it is routed through heraldOpen (hook_test.go.txt), every top-level
// test starts with heraldTest(t) (the WAL judge's marker), and it is built
// once; each run gets its own SQLite file (TMPDIR) or its own PostgreSQL
// database, created and dropped here, on the server HERALD_POSTGRES_DSN
// names (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
// — or, by default (-wal), on a private cluster with wal_level=logical,
// where each run with the plugin is judged by the WAL: every row change of
// every committed transaction against the outbox rows inserted in it
// (internal/waljudge; the hook marks each test's start and every
// hand-written SQL write in the log).
// Exit status 1 when any pass list differs from the baseline's, or the
// WAL judge finds a missing, phantom, duplicate or wrong-operation event
// or an image that differs from the stored row.
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/heraldgo/herald/internal/pgcluster"
	"github.com/heraldgo/herald/internal/waljudge"
)

//go:embed hook_test.go.txt
var hook []byte

type run struct {
	dialect, mode string
	suffix        string            // a rerun's: its own log, report and database
	flaky         map[string]bool   // top-level tests that differed from the baseline once and agreed with it on rerun
	results       map[string]string // test name -> pass, fail, skip
	report        report
	dur           time.Duration
	err           error
	log           string
	wal           *waljudge.Report // the WAL judge's, PostgreSQL runs with the plugin
}

type report struct {
	Written []string            `json:"written"`
	Keyless []string            `json:"keyless"` // written, without a primary key
	Events  map[string]int64    `json:"events"`
	Tables  map[string][]string `json:"tables"`         // model -> the tables it was written to
	KeyLess []string            `json:"keyless_tables"` // tables written by models without a primary key
}

func main() {
	// The go commands this harness runs build modules of its own work
	// tree, which the repository's go.work does not list: workspace mode
	// off for them (it also refuses their -mod=mod).
	_ = os.Setenv("GOWORK", "off")
	var (
		suite    = flag.String("suite", os.Getenv("HERALD_GORM_SUITE"), "GORM's tests/ folder (default: ../shared/thirdparty/gorm-tests-v1.31.2/tests beside the repository root)")
		dialects = flag.String("dialects", "sqlite,postgres", "comma-separated: sqlite, postgres, mysql (MariaDB/MySQL at HERALD_MYSQL_DSN, default root@tcp(127.0.0.1:3306)/)")
		modes    = flag.String("modes", "keys,after,beforeandafter", "comma-separated payload modes to compare with the baseline (off)")
		runRe    = flag.String("run", "", "only tests matching this regexp (go test -run)")
		jobs     = flag.Int("j", 2, "runs at a time")
		verbose  = flag.Bool("v", false, "print each run's failing tests' output")
		wal      = flag.Bool("wal", true, "run PostgreSQL on a private cluster with wal_level=logical and judge each run with the plugin by the WAL (internal/waljudge); false: the server at HERALD_POSTGRES_DSN, unjudged")
	)
	flag.Parse()
	if err := mainErr(*suite, split(*dialects), split(*modes), *runRe, *jobs, *verbose, *wal); err != nil {
		fmt.Fprintln(os.Stderr, "gormsuite:", err)
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

func mainErr(suite string, dialects, modes []string, runRe string, jobs int, verbose, wal bool) error {
	start := time.Now()
	here, err := os.Getwd()
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(here, "go.mod")); err != nil || !bytes.Contains(b, []byte("module github.com/heraldgo/herald/integration/gormsuite\n")) {
		return errors.New("run me from integration/gormsuite (go -C integration/gormsuite run .)")
	}
	root := filepath.Dir(filepath.Dir(here))
	if suite == "" {
		suite = filepath.Join(root, "..", "shared", "thirdparty", "gorm-tests-v1.31.2", "tests")
	}
	if _, err := os.Stat(filepath.Join(suite, "tests_test.go")); err != nil {
		return fmt.Errorf("GORM's test suite not found at %s (give -suite or HERALD_GORM_SUITE): %w", suite, err)
	}
	for _, m := range modes {
		if m == "off" {
			return errors.New("-modes: the baseline (off) always runs; list only keys, after, beforeandafter")
		}
	}
	work := filepath.Join(here, "work")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	dir := filepath.Join(work, "suite")
	n, err := copySuite(suite, dir)
	if err != nil {
		return err
	}
	if err := suiteModule(here, root, dir); err != nil {
		return err
	}
	fmt.Printf("copied %s to %s; %d gorm.Open calls routed through heraldOpen\n", suite, dir, n)
	if dbFree, err = dbFreeTests(dir); err != nil {
		return err
	}
	bin := filepath.Join(work, "suite.test")
	t0 := time.Now()
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir, build.Env = dir, append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the suite: %w", err)
	}
	fmt.Printf("built the suite in %s\n", time.Since(t0).Round(time.Second))

	pgBase := os.Getenv("HERALD_POSTGRES_DSN")
	if pgBase == "" {
		pgBase = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if !wal || !slices.Contains(dialects, "postgres") {
		wal = false
	} else {
		t := time.Now()
		cl, err := pgcluster.Start(waljudge.Settings...)
		if cl != nil {
			defer func() { _ = cl.Stop() }()
		}
		if err != nil {
			return fmt.Errorf("the WAL judge's private PostgreSQL cluster: %w", err)
		}
		pgBase = cl.DSN("", "postgres")
		fmt.Printf("WAL judge: private PostgreSQL cluster with wal_level=logical at %s (started in %s)\n", cl.Addr(), time.Since(t).Round(time.Millisecond))
	}
	var runs []*run
	for _, d := range dialects {
		if d != "sqlite" && d != "postgres" && d != "mysql" {
			return fmt.Errorf("-dialects: unknown %q", d)
		}
		for _, m := range append([]string{"off"}, modes...) {
			runs = append(runs, &run{dialect: d, mode: m})
		}
	}
	sem := make(chan struct{}, max(1, jobs))
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t := time.Now()
			r.err = r.exec(work, dir, bin, runRe, pgBase, wal)
			r.dur = time.Since(t)
			status := "done"
			if r.err != nil {
				status = "error: " + r.err.Error()
			}
			fmt.Printf("  %-8s %-14s %s in %s (log %s)\n", r.dialect, r.mode, status, r.dur.Round(time.Second), r.log)
		}()
	}
	wg.Wait()
	rerunDifferences(runs, work, dir, bin, pgBase)
	return compare(runs, verbose, time.Since(start))
}

// reruns is how many times a top-level test that differs from the
// baseline runs again, with and without the plugin, before it counts.
const reruns = 2

// rerunDifferences runs the top-level tests on which a run with the plugin
// and its baseline disagree again, both ways, up to reruns times. A test
// whose outcomes agree on a rerun differed by chance — GORM's suite has
// timing assertions (UpdatedAt compared to the second, which a loaded
// machine crosses, in the baseline as with the plugin) — and is recorded
// in r.flaky, reported and not counted; a test that differs on every
// rerun is a difference.
func rerunDifferences(runs []*run, work, dir, bin, pgBase string) {
	base := map[string]*run{}
	for _, r := range runs {
		if r.mode == "off" && r.err == nil {
			base[r.dialect] = r
		}
	}
	for _, r := range runs {
		b := base[r.dialect]
		if r.mode == "off" || r.err != nil || b == nil {
			continue
		}
		lost, gained, _ := diff(b.results, r.results)
		lost, _ = splitDBFree(lost, dbFree)
		gained, _ = splitDBFree(gained, dbFree)
		tops := map[string]bool{}
		for _, n := range append(lost, gained...) {
			top, _, _ := strings.Cut(n, "/")
			tops[top] = true
		}
		for attempt := 1; attempt <= reruns && len(tops) > 0; attempt++ {
			names := slices.Sorted(maps.Keys(tops))
			re := "^(" + strings.Join(names, "|") + ")$"
			suffix := fmt.Sprintf("_rerun%d", attempt)
			rb := &run{dialect: r.dialect, mode: "off", suffix: suffix}
			rr := &run{dialect: r.dialect, mode: r.mode, suffix: suffix}
			errB := rb.exec(work, dir, bin, re, pgBase, false)
			errR := rr.exec(work, dir, bin, re, pgBase, false)
			fmt.Printf("  %-8s %-14s rerun %d of %s: ", r.dialect, r.mode, attempt, strings.Join(names, " "))
			if errB != nil || errR != nil {
				fmt.Printf("error: %v %v\n", errB, errR)
				break
			}
			var agreed []string
			for _, n := range names {
				if rb.results[n] != "" && rb.results[n] == rr.results[n] {
					agreed = append(agreed, n)
				}
			}
			fmt.Printf("%d agree with the baseline this time\n", len(agreed))
			for _, n := range agreed {
				if r.flaky == nil {
					r.flaky = map[string]bool{}
				}
				r.flaky[n] = true
				delete(tops, n)
			}
		}
	}
}

// withoutFlaky leaves out of names the tests (and subtests) of flaky.
func withoutFlaky(names []string, flaky map[string]bool) (kept, dropped []string) {
	for _, n := range names {
		top, _, _ := strings.Cut(n, "/")
		if flaky[top] {
			dropped = append(dropped, n)
		} else {
			kept = append(kept, n)
		}
	}
	return kept, dropped
}

// suiteModule writes the copy's go.mod: module gorm.io/gorm/tests, as
// GORM's own (lru_test.go imports gorm.io/gorm/internal/lru), with this
// module's requirements, so the versions are the ones pinned here, and
// herald from the repository.
func suiteModule(here, root, dir string) error {
	mod, err := os.ReadFile(filepath.Join(here, "go.mod"))
	if err != nil {
		return err
	}
	sum, err := os.ReadFile(filepath.Join(here, "go.sum"))
	if err != nil {
		return err
	}
	s := strings.Replace(string(mod), "module github.com/heraldgo/herald/integration/gormsuite\n", "module gorm.io/gorm/tests\n", 1)
	s = strings.Replace(s, "github.com/heraldgo/herald => ../..", "github.com/heraldgo/herald => "+root, 1)
	if !strings.Contains(s, "module gorm.io/gorm/tests\n") || !strings.Contains(s, "=> "+root) {
		return errors.New("go.mod: unexpected module or replace line")
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(s), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
}

// copySuite copies the suite's Go files into dir, routes every gorm.Open call through
// heraldOpen, and adds the hook.
func copySuite(src, dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return 0, err
	}
	calls := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return 0, err
		}
		out, n, err := routeOpen(e.Name(), b)
		if err != nil {
			return 0, err
		}
		calls += n
		if err := os.WriteFile(filepath.Join(dir, e.Name()), out, 0o644); err != nil {
			return 0, err
		}
	}
	if calls == 0 {
		return 0, errors.New("no gorm.Open call found in the suite")
	}
	return calls, os.WriteFile(filepath.Join(dir, "zz_herald_hook_test.go"), hook, 0o644)
}

// routeOpen replaces each call gorm.Open(…) in a file of package tests_test
// with heraldOpen(…), and makes heraldTest(t) the first statement of each
// top-level test (the WAL judge's marker of the test's start; a no-op
// otherwise). It returns the file and the number of calls routed.
func routeOpen(name string, src []byte) ([]byte, int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, 0, err
	}
	type edit struct {
		off     int
		old, to string
	}
	var edits []edit
	calls := 0
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Open" {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "gorm" {
			edits = append(edits, edit{fset.Position(sel.Pos()).Offset, "gorm.Open", "heraldOpen"})
			calls++
		}
		return true
	})
	if calls > 0 && f.Name.Name != "tests_test" {
		return nil, 0, fmt.Errorf("%s: gorm.Open in package %s, want tests_test", name, f.Name.Name)
	}
	if f.Name.Name == "tests_test" {
		for _, d := range f.Decls {
			if t := testParam(d); t != "" {
				fd := d.(*ast.FuncDecl)
				edits = append(edits, edit{fset.Position(fd.Body.Lbrace).Offset + 1, "", "heraldTest(" + t + ");"})
			}
		}
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].off < edits[j].off })
	out := slices.Clone(src)
	for i := len(edits) - 1; i >= 0; i-- {
		e := edits[i]
		if string(out[e.off:e.off+len(e.old)]) != e.old {
			return nil, 0, fmt.Errorf("%s: unexpected text at offset %d", name, e.off)
		}
		out = slices.Concat(out[:e.off], []byte(e.to), out[e.off+len(e.old):])
	}
	return out, calls, nil
}

// testParam returns the name of the *testing.T parameter of a top-level
// test function (func TestX(t *testing.T)), or "".
func testParam(d ast.Decl) string {
	fd, ok := d.(*ast.FuncDecl)
	if !ok || fd.Recv != nil || fd.Body == nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" {
		return ""
	}
	ps := fd.Type.Params.List
	if len(ps) != 1 || len(ps[0].Names) != 1 || ps[0].Names[0].Name == "_" {
		return ""
	}
	star, ok := ps[0].Type.(*ast.StarExpr)
	if !ok {
		return ""
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "T" {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "testing" {
		return ""
	}
	return ps[0].Names[0].Name
}

func (r *run) exec(work, dir, bin, runRe, pgBase string, wal bool) error {
	tag := r.dialect + "-" + r.mode + r.suffix
	tmp := filepath.Join(work, tag)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	r.log = filepath.Join(work, tag+".log")
	env := append(os.Environ(),
		"TMPDIR="+tmp,
		"GORM_DIALECT="+r.dialect,
		"HERALD_GORMSUITE_MODE="+r.mode,
		"HERALD_GORMSUITE_REPORT="+filepath.Join(work, tag+".json"),
	)
	var judged *sql.DB // the run's database, judged by the WAL
	if r.dialect == "mysql" {
		dsn, drop, err := mysqlDatabase(mysqlBase(), "herald_gormsuite_"+r.mode+r.suffix)
		if err != nil {
			return err
		}
		defer drop()
		env = append(env, "GORM_DSN="+dsn)
	}
	if r.dialect == "postgres" {
		dsn, drop, err := pgDatabase(pgBase, "herald_gormsuite_"+r.mode+r.suffix)
		if err != nil {
			return err
		}
		defer drop()
		env = append(env, "GORM_DSN="+dsn)
		if wal && r.mode != "off" {
			if judged, err = sql.Open("pgx", dsn); err != nil {
				return err
			}
			defer func() { _ = waljudge.Drop(context.Background(), judged, r.walSlot()); _ = judged.Close() }()
			if err := waljudge.Setup(context.Background(), judged, r.walSlot()); err != nil {
				return err
			}
			env = append(env, "HERALD_GORMSUITE_WAL=1")
		}
	}
	args := []string{"tool", "test2json", "-t", bin, "-test.v=test2json", "-test.count=1", "-test.timeout=20m"}
	if runRe != "" {
		args = append(args, "-test.run="+runRe)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	if err := os.WriteFile(r.log, out.Bytes(), 0o644); err != nil {
		return err
	}
	r.results = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var ev struct{ Action, Test string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			r.results[ev.Test] = ev.Action
		}
	}
	if len(r.results) == 0 {
		return fmt.Errorf("no test results (%w); see %s", runErr, r.log)
	}
	if r.mode != "off" {
		b, err := os.ReadFile(filepath.Join(work, tag+".json"))
		if err != nil {
			return fmt.Errorf("no capture report (the run did not finish?): %w", err)
		}
		if err := json.Unmarshal(b, &r.report); err != nil {
			return err
		}
	}
	if judged != nil {
		return r.judge(judged, filepath.Join(work, tag+".wal.txt"))
	}
	return nil
}

// walSlot is the logical replication slot of a judged run's database
// (slot names are the cluster's: one per run).
func (r *run) walSlot() string { return "herald_judge_" + r.mode }

// judge reads the run's log from the slot and judges it (internal/waljudge),
// writing every finding to out. Tables written by models without a primary
// key are exempt: CaptureAll leaves those models uncaptured, as gormcapture
// documents.
func (r *run) judge(db *sql.DB, out string) error {
	keyed := map[string]bool{}
	for _, ts := range r.report.Tables {
		for _, t := range ts {
			if !slices.Contains(r.report.KeyLess, t) {
				keyed[t] = true
			}
		}
	}
	j := waljudge.New(waljudge.Config{
		Outbox: "herald_outbox",
		Tables: func(model string) []string { return r.report.Tables[model] },
		Exempt: func(table string) string {
			if slices.Contains(r.report.KeyLess, table) && !keyed[table] {
				return "written by a model without a primary key (CaptureAll leaves it uncaptured)"
			}
			return ""
		},
		Images: r.mode != "keys",
	})
	if err := waljudge.Drain(context.Background(), db, r.walSlot(), j); err != nil {
		return err
	}
	r.wal = j.Report()
	var b strings.Builder
	for _, f := range r.wal.Findings {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// pgDatabase creates a fresh database for one run on the server of the
// DSN base and returns its DSN.
func pgDatabase(base, name string) (string, func(), error) {
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
		_ = admin.Close()
		return "", nil, fmt.Errorf("PostgreSQL at %s: %w", base, err)
	}
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		_ = admin.Close()
		return "", nil, err
	}
	// The suite's own DSN form (keyword/value, TimeZone as GORM's
	// postgres driver reads it).
	u, err := url.Parse(base)
	if err != nil {
		_ = admin.Close()
		return "", nil, err
	}
	kv := []string{"host=" + u.Hostname(), "dbname=" + name, "sslmode=disable", "TimeZone=Asia/Shanghai"}
	if p := u.Port(); p != "" {
		kv = append(kv, "port="+p)
	}
	if u.User != nil {
		kv = append(kv, "user="+u.User.Username())
		if pw, ok := u.User.Password(); ok {
			kv = append(kv, "password="+pw)
		}
	}
	dsn := strings.Join(kv, " ")
	drop := func() {
		_, _ = admin.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
		_ = admin.Close()
	}
	return dsn, drop, nil
}

// mysqlBase is the MariaDB/MySQL server's DSN (go-sql-driver form, no
// database): HERALD_MYSQL_DSN's, default root@tcp(127.0.0.1:3306)/.
func mysqlBase() string {
	if b := os.Getenv("HERALD_MYSQL_DSN"); b != "" {
		if i := strings.LastIndexByte(b, '/'); i >= 0 {
			return b[:i+1]
		}
		return b
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// mysqlDatabase creates a fresh database for one run on the MariaDB/MySQL
// server of base and returns its DSN, in the suite's own form (utf8,
// parseTime, loc=Local).
func mysqlDatabase(base, name string) (string, func(), error) {
	admin, err := sql.Open("mysql", base)
	if err != nil {
		return "", nil, err
	}
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		_ = admin.Close()
		return "", nil, fmt.Errorf("MySQL at %s: %w", base, err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		_ = admin.Close()
		return "", nil, err
	}
	drop := func() {
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
		_ = admin.Close()
	}
	return base + name + "?charset=utf8&parseTime=True&loc=Local", drop, nil
}

func count(res map[string]string, top bool) (pass, fail, skip int) {
	for name, a := range res {
		if top && strings.Contains(name, "/") {
			continue
		}
		switch a {
		case "pass":
			pass++
		case "fail":
			fail++
		case "skip":
			skip++
		}
	}
	return
}

func compare(runs []*run, verbose bool, total time.Duration) error {
	base := map[string]*run{}
	for _, r := range runs {
		if r.mode == "off" {
			base[r.dialect] = r
		}
	}
	fmt.Printf("\n%-8s %-14s %18s %18s %8s  %s\n", "dialect", "mode", "top-level p/f/s", "with subtests p/f/s", "time", "pass list vs baseline")
	bad := false
	var details []string
	for _, r := range runs {
		if r.err != nil {
			bad = true
			fmt.Printf("%-8s %-14s %s\n", r.dialect, r.mode, r.err)
			continue
		}
		p, f, s := count(r.results, true)
		ap, af, as := count(r.results, false)
		verdict := "baseline"
		if r.mode != "off" {
			b := base[r.dialect]
			if b == nil || b.err != nil {
				verdict = "no baseline"
				bad = true
			} else {
				lost, gained, unseen := diff(b.results, r.results)
				lost, freeLost := splitDBFree(lost, dbFree)
				gained, freeGained := splitDBFree(gained, dbFree)
				lost, flakyLost := withoutFlaky(lost, r.flaky)
				gained, flakyGained := withoutFlaky(gained, r.flaky)
				if fl := append(flakyLost, flakyGained...); len(fl) > 0 {
					details = append(details, fmt.Sprintf("%s %s: differed from the baseline, then agreed with it when run again both ways (GORM's timing assertions; not counted): %s",
						r.dialect, r.mode, strings.Join(fl, " ")))
				}
				if free := append(freeLost, freeGained...); len(free) > 0 {
					details = append(details, fmt.Sprintf("%s %s: database-free tests (%s: GORM's LRU cache, timed with sleeps; the plugin is never called) that differ from the baseline, not counted: %s",
						r.dialect, r.mode, strings.Join(dbFreeFiles, ", "), strings.Join(free, " ")))
				}
				verdict = "same"
				if len(unseen) > 0 {
					details = append(details, fmt.Sprintf("%s %s: subtests that ran in only one of the two runs, their tests passing in both (GORM's own data-dependent subtests; not a difference): %s", r.dialect, r.mode, strings.Join(unseen, " ")))
				}
				if len(lost)+len(gained) > 0 {
					bad = true
					verdict = fmt.Sprintf("DIFFERS: %d lost, %d gained", len(lost), len(gained))
					details = append(details, fmt.Sprintf("%s %s: pass without the plugin, not with it: %s", r.dialect, r.mode, strings.Join(lost, " ")))
					if len(gained) > 0 {
						details = append(details, fmt.Sprintf("%s %s: pass with the plugin only: %s", r.dialect, r.mode, strings.Join(gained, " ")))
					}
					if verbose {
						details = append(details, failureOutput(r.log, lost))
					}
				}
			}
			var missing, keyless []string
			var events int64
			for _, n := range r.report.Events {
				events += n
			}
			for _, m := range r.report.Written {
				switch {
				case r.report.Events[m] > 0:
				case slices.Contains(r.report.Keyless, m):
					keyless = append(keyless, m)
				default:
					missing = append(missing, m)
				}
			}
			verdict += fmt.Sprintf("; %d events of %d models, %d models written", events, len(r.report.Events), len(r.report.Written))
			if len(keyless) > 0 {
				verdict += fmt.Sprintf(", %d without a key (not captured: %s)", len(keyless), strings.Join(keyless, " "))
			}
			if len(missing) > 0 {
				bad = true
				details = append(details, fmt.Sprintf("%s %s: models written, with a key, and no event: %s", r.dialect, r.mode, strings.Join(missing, " ")))
			}
			if events == 0 {
				bad = true
				verdict += " — NOTHING CAPTURED"
			}
			if w := r.wal; w != nil {
				verdict += fmt.Sprintf("; WAL: %d row changes in %d transactions, %d events: %d missing, %d phantom, %d duplicate, %d wrong operation; image columns %d compared, %d differ (%d not comparable); excluded: %d raw SQL, %d keyless",
					w.Changes, w.Txns, w.Events, w.Missing, w.Phantom, w.Duplicate, w.WrongOp, w.Compared, w.Mismatched, w.Uncompared, w.RawChanges, w.ExemptChanges)
				if w.Failed() {
					bad = true
					var fs []string
					for _, f := range w.Findings {
						if f.Kind != waljudge.Raw && f.Kind != waljudge.Exempted {
							fs = append(fs, "  "+f.String())
						}
					}
					if len(fs) > 40 {
						fs = append(fs[:40], fmt.Sprintf("  … %d more (see %s)", len(fs)-40, strings.TrimSuffix(r.log, ".log")+".wal.txt"))
					}
					details = append(details, fmt.Sprintf("%s %s: the WAL judge found:\n%s", r.dialect, r.mode, strings.Join(fs, "\n")))
				}
				var ex []string
				for _, f := range w.Findings {
					if f.Kind == waljudge.Raw || f.Kind == waljudge.Exempted {
						ex = append(ex, f.Test+":"+f.Table)
					}
				}
				if len(ex) > 0 {
					details = append(details, fmt.Sprintf("%s %s: row changes without events, excluded (hand-written SQL naming the table, or a keyless model's table), per test:table: %s", r.dialect, r.mode, strings.Join(ex, " ")))
				}
			}
		}
		fmt.Printf("%-8s %-14s %18s %18s %8s  %s\n", r.dialect, r.mode, fmt.Sprintf("%d/%d/%d", p, f, s), fmt.Sprintf("%d/%d/%d", ap, af, as), r.dur.Round(time.Second), verdict)
	}
	for _, d := range details {
		fmt.Println(d)
	}
	fmt.Printf("total %s\n", total.Round(time.Second))
	if bad {
		return errors.New("the plugin is not transparent to GORM's test suite (see above)")
	}
	return nil
}

// dbFreeFiles are the suite's files whose tests never touch a database:
// GORM's LRU cache (internal/lru), timed with sleeps of tens of
// milliseconds. The plugin is never called in them, so a run that differs
// from its baseline there differs by the machine's load (TestLoadingExpired
// and TestLRUWithPurge failed in runs with and without the plugin alike on
// a loaded CI host); their differences are listed, not counted.
var dbFreeFiles = []string{"lru_test.go"}

// dbFree holds the top-level tests of dbFreeFiles (dbFreeTests).
var dbFree map[string]bool

var testFuncRE = regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)

// dbFreeTests reads the top-level test names of dbFreeFiles in the copied
// suite dir; a file that is missing (another GORM release) is an error, so
// the list cannot silently go stale.
func dbFreeTests(dir string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range dbFreeFiles {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("the database-free test file %s: %w", f, err)
		}
		for _, m := range testFuncRE.FindAllSubmatch(b, -1) {
			out[string(m[1])] = true
		}
	}
	return out, nil
}

// splitDBFree moves the tests whose top-level test is in free out of names.
func splitDBFree(names []string, free map[string]bool) (kept, dropped []string) {
	for _, n := range names {
		top, _, _ := strings.Cut(n, "/")
		if free[top] {
			dropped = append(dropped, n)
		} else {
			kept = append(kept, n)
		}
	}
	return kept, dropped
}

// diff returns the tests that pass in base but not in r (lost), those
// that pass in r and did not pass in base (gained), but for those that
// ran in only one of the two runs while their top-level test, and every
// test above them that ran in the other run, passed there (unseen:
// subtests GORM's suite makes from the data it reads back, whose number
// varies from run to run without the plugin too — one baseline run of
// TestOmitWithUpdateWithMap read back four friends, not eight). A test's
// subtests are left out when it is listed.
func diff(base, r map[string]string) (lost, gained, unseen []string) {
	for name, a := range base {
		if a != "pass" || r[name] == "pass" {
			continue
		}
		// The mirror of unseen: a data-dependent subtest that ran in base
		// and not in r, under ancestors that all passed in r (GORM's
		// AssertEqual makes per-field subtests only for values that print
		// differently: TestSelectWithUpdate/Toys/_#3/Model ran in one
		// baseline and not in the run with the plugin, whose
		// TestSelectWithUpdate/Toys passed). A parent passes only if every
		// subtest it ran passed, so nothing was lost.
		if _, ran := r[name]; !ran && parentsPass(r, name) {
			unseen = append(unseen, name)
			continue
		}
		lost = append(lost, name)
	}
	for name, a := range r {
		if a != "pass" || base[name] == "pass" {
			continue
		}
		if _, ran := base[name]; !ran && parentsPass(base, name) {
			unseen = append(unseen, name)
			continue
		}
		gained = append(gained, name)
	}
	return collapse(lost), collapse(gained), collapse(unseen)
}

// parentsPass reports whether name is a subtest whose top-level test
// ran and passed in results and whose every other ancestor that ran there
// passed. An ancestor that did not run is itself a subtest GORM's suite
// made from the data it read back ("T/a/b/c" when T/a passed but T/a/b
// did not run: TestSelectWithUpdate compares a struct field by field only
// when it read one back).
func parentsPass(results map[string]string, name string) bool {
	top, _, sub := strings.Cut(name, "/")
	if !sub || results[top] != "pass" {
		return false
	}
	for i := len(top) + 1; i < len(name); i++ {
		if name[i] == '/' {
			if a, ran := results[name[:i]]; ran && a != "pass" {
				return false
			}
		}
	}
	return true
}

// collapse sorts names and leaves out the subtests of a test listed too.
func collapse(names []string) []string {
	sort.Strings(names)
	var out []string
	for _, n := range names {
		if len(out) > 0 && strings.HasPrefix(n, out[len(out)-1]+"/") {
			continue
		}
		out = append(out, n)
	}
	return out
}

// failureOutput returns the output test2json recorded for tests.
func failureOutput(log string, tests []string) string {
	b, err := os.ReadFile(log)
	if err != nil {
		return ""
	}
	want := map[string]bool{}
	for _, t := range tests {
		want[t] = true
	}
	var sb strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Action == "output" && want[ev.Test] {
			sb.WriteString(ev.Output)
		}
	}
	return sb.String()
}
