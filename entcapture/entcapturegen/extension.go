// Package entcapturegen is the entc extension of herald's ent capture: it
// generates the typed glue entcapture's hook needs. Only entc.go (the
// code generator, built with //go:build ignore) imports it, so a service
// that imports entcapture for Driver, Mixin and Enqueue links no part of
// ent's code generator (entc/gen, entc/load, golang.org/x/tools, go/types).
// It is named entcapturegen, not gen, so that it does not shadow
// entgo.io/ent/entc/gen in the entc.go files that import both.
package entcapturegen

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	entschema "entgo.io/ent/dialect/sql/schema"
	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
	"entgo.io/ent/schema/field"
	"golang.org/x/tools/go/ast/astutil"
	"golang.org/x/tools/imports"

	"github.com/heraldgo/herald/entcapture"
	annot "github.com/heraldgo/herald/entcapture/internal/annotation"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/pgform"
)

// GlueFile is the file Extension writes beside the generated code.
const GlueFile = "entcapture.go"

//go:embed entcapture.tmpl
var templates string

// Extension is the entc extension that generates the typed glue the
// capture hook needs (table and column names, id type, .Sensitive()
// fields, typed scans of rows, the caller's transaction and its commit
// hooks), and enables the ent features capture uses (sql/execquery,
// sql/upsert). Add it to the code generation in entc.go:
//
//	entc.Generate("./schema", &gen.Config{}, entc.Extensions(entcapturegen.Extension()))
//
// Code generation fails, naming the schema and the option, when a
// captured schema's Options name a column it does not have, or when the
// schema cannot be captured.
func Extension() entc.Extension { return extension{} }

type extension struct{ entc.DefaultExtension }

func (extension) Options() []entc.Option {
	return []entc.Option{entc.FeatureNames("sql/execquery", "sql/upsert")}
}

func (extension) Templates() []*gen.Template {
	return []*gen.Template{gen.MustParse(gen.NewTemplate("entcapture").Parse(templates))}
}

func (extension) Hooks() []gen.Hook {
	return []gen.Hook{func(next gen.Generator) gen.Generator {
		return gen.GenerateFunc(func(g *gen.Graph) error {
			if err := checkEntRelease(); err != nil {
				return err
			}
			if err := check(g); err != nil {
				return err
			}
			p, err := planOf(g)
			if err != nil {
				return err
			}
			for _, n := range p.parents {
				if n.Annotations == nil {
					n.Annotations = gen.Annotations{}
				}
				n.Annotations[annot.Cascade] = true
			}
			if err := next.Generate(g); err != nil {
				return err
			}
			if err := fixTxImport(g.Target); err != nil {
				return err
			}
			if err := fixEntImports(g.Target); err != nil {
				return err
			}
			return writeGlue(g, p)
		})
	}}
}

// The extension overrides ent's "dialect/sql/create_bulk" template with a
// copy of ent v0.14.5's (entcapture.tmpl) that marks the bulk's context.
// On another ent release that copy could silently lose the release's own
// changes to CreateBulk, or (without the mark) make a captured CreateBulk
// non-atomic, so generation checks that the release's create_bulk is the
// one the copy was made from: same release, or the same parse tree.
const (
	bulkRelease = "v0.14.5"
	// bulkTreeHash is the sha256 of the parse tree (text/template's
	// Tree.Root.String()) of ent v0.14.5's create_bulk, in
	// entc/gen/template/dialect/sql/create.tmpl.
	bulkTreeHash = "a7587fd9d25833767b85fbd5c6a56b77f1a17425c38518be1ba10bf663f829fc"
)

// checkEntRelease checks the ent release the code generator is built
// with (its build info; entc.go runs as a program) against the create_bulk
// template the extension overrides.
func checkEntRelease() error {
	version := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "entgo.io/ent" {
				version = m.Version
				if m.Replace != nil {
					version = m.Replace.Version
				}
			}
		}
	}
	return checkBulkTemplate(version, func() ([]byte, error) {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "entgo.io/ent").Output()
		if err != nil {
			return nil, fmt.Errorf("go list -m entgo.io/ent: %w", err)
		}
		return os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "entc", "gen", "template", "dialect", "sql", "create.tmpl"))
	})
}

// checkBulkTemplate passes ent v0.14.5, and another release (version; ""
// when unknown) whose create.tmpl, read by read, has v0.14.5's
// create_bulk; otherwise it fails naming the release.
func checkBulkTemplate(version string, read func() ([]byte, error)) error {
	if version == bulkRelease {
		return nil
	}
	name := version
	if name == "" {
		name = "(unknown release)"
	}
	fail := func(why string) error {
		return outbox.Configurationf("entcapturegen.Extension", "entgo.io/ent %s: %s; entcapturegen overrides CreateBulk with ent %s's create_bulk template, "+
			"and generating it for another release could make a captured CreateBulk non-atomic or lose the release's changes: "+
			"use entgo.io/ent %s, or a herald release made for ent %s", name, why, bulkRelease, bulkRelease, name)
	}
	src, err := read()
	if err != nil {
		return fail("cannot read its create_bulk template (" + err.Error() + ")")
	}
	t, err := gen.NewTemplate("ent").Parse(string(src))
	if err != nil {
		return fail("cannot parse its create.tmpl (" + err.Error() + ")")
	}
	bulk := t.Lookup("dialect/sql/create_bulk")
	if bulk == nil || bulk.Tree == nil {
		return fail("its create.tmpl defines no dialect/sql/create_bulk")
	}
	if sum := sha256.Sum256([]byte(bulk.Root.String())); hex.EncodeToString(sum[:]) != bulkTreeHash {
		return fail("its create_bulk template differs from " + bulkRelease + "'s")
	}
	return nil
}

// fixTxImport makes sure the generated tx.go imports database/sql as
// stdsql when it uses it. ent's tx template writes the sql/execquery
// feature's methods (which name stdsql.Result and *stdsql.Rows) but not
// their import: it leaves that to goimports, which takes it from a
// sibling file of the package on disk. ent (v0.14.5, entc/gen assets.format)
// formats and rewrites the package's files in parallel, so the sibling may
// be read while it is being rewritten; tx.go then comes out without the
// import and does not compile ("undefined: stdsql"): ent/ent#4513, whose
// fix (ent/ent#4514, tx.tmpl rendering the additional imports) is not in a
// release. Seen once in the integration/entexamples harness; this makes it
// impossible, and is a no-op once ent emits the import itself.
func fixTxImport(dir string) error {
	p := filepath.Join(dir, "tx.go")
	src, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("entcapture: %w", err)
	}
	out, changed, err := addStdsqlImport(src)
	if err != nil {
		return fmt.Errorf("entcapture: %s: %w", p, err)
	}
	if !changed {
		return nil
	}
	if err := os.WriteFile(p, out, 0o644); err != nil {
		return fmt.Errorf("entcapture: %w", err)
	}
	return nil
}

// fixEntImports makes sure the generated package's files import ent's
// own package as "entgo.io/ent". ent's client template (v0.14.5) names
// ent.Hook and ent.Interceptor without importing "entgo.io/ent" and leaves
// the import to goimports, which looks first at the package's other files
// on disk — rewritten in parallel by the same formatting pass (see
// fixTxImport) — and otherwise searches the module for a package named
// ent. In this repository that search took another generated package
// (internal/capturecases/entcc/ent) in one `go generate` of four; in a
// user's module with two ent packages it would do the same. A file of the
// package that imports, without an alias, a package named ent other than
// "entgo.io/ent" (it cannot be the package itself) has that import
// dropped and goimports run again, now with every file on disk complete:
// the result is what the race-free pass writes.
func fixEntImports(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return fmt.Errorf("entcapture: %w", err)
	}
	for _, p := range files {
		src, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("entcapture: %w", err)
		}
		out, changed, err := dropStrayEntImport(p, src)
		if err != nil {
			return fmt.Errorf("entcapture: %s: %w", p, err)
		}
		if !changed {
			continue
		}
		if err := os.WriteFile(p, out, 0o644); err != nil {
			return fmt.Errorf("entcapture: %w", err)
		}
	}
	return nil
}

// dropStrayEntImport drops from the Go file named file (content src) an
// unaliased import of a package named ent other than "entgo.io/ent",
// lets goimports resolve ent again, and reports whether it changed
// anything.
func dropStrayEntImport(file string, src []byte) ([]byte, bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return nil, false, err
	}
	stray := ""
	for _, imp := range f.Imports {
		ip, err := strconv.Unquote(imp.Path.Value)
		if err == nil && imp.Name == nil && ip != entPkg && path.Base(ip) == "ent" {
			stray = ip
		}
	}
	if stray == "" {
		return src, false, nil
	}
	astutil.DeleteImport(fset, f, stray)
	var buf bytes.Buffer
	if err := format.Node(&buf, fset, f); err != nil {
		return nil, false, err
	}
	out, err := imports.Process(file, buf.Bytes(), nil)
	return out, err == nil, err
}

// entPkg is ent's own package.
const entPkg = "entgo.io/ent"

// addStdsqlImport adds `stdsql "database/sql"` to the imports of a Go
// file that names stdsql without importing it, and reports whether it did.
func addStdsqlImport(src []byte) ([]byte, bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ParseComments)
	if err != nil {
		return nil, false, err
	}
	for _, imp := range f.Imports {
		if imp.Name != nil && imp.Name.Name == "stdsql" {
			return src, false, nil
		}
	}
	used := false
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "stdsql" {
				used = true
			}
		}
		return !used
	})
	if !used {
		return src, false, nil
	}
	at, text := fset.Position(f.Name.End()).Offset, "\n\nimport stdsql \"database/sql\"\n"
	for _, d := range f.Decls {
		if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.IMPORT && gd.Lparen.IsValid() {
			at, text = fset.Position(gd.Lparen).Offset+1, "\n\tstdsql \"database/sql\"\n"
			break
		}
	}
	out := make([]byte, 0, len(src)+len(text))
	out = append(append(append(out, src[:at]...), text...), src[at:]...)
	out, err = format.Source(out)
	return out, err == nil, err
}

// check validates the captured schemas before anything is generated.
func check(g *gen.Graph) error {
	for _, f := range []string{"sql/execquery", "sql/upsert"} {
		if ok, _ := g.FeatureEnabled(f); !ok {
			return outbox.Configurationf("entcapturegen.Extension", "feature %s is not enabled: add entc.FeatureNames(%q) to the code generation (entc.Extensions(entcapturegen.Extension()) enables it unless overridden)", f, f)
		}
	}
	for _, n := range g.Nodes {
		a, ok, err := annotation(n)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if n.IsView() || (!n.HasOneFieldID() && !n.HasCompositeID()) {
			return &envelope.Error{Kind: envelope.ErrUnsupported, Where: n.Name,
				Msg: "entcapture captures schemas with an id (one field, or an edge schema's composite id); drop entcapture.Mixin from this schema (views are not captured)"}
		}
		if strings.EqualFold(n.Table(), envelope.DefaultTable) {
			return outbox.Configurationf(n.Name, "table %s is the outbox table: the outbox cannot capture its own events; drop entcapture.Mixin from schema %s", n.Table(), n.Name)
		}
		if err := (envelope.Options{Fields: a.Fields, Exclude: a.Exclude, Topic: a.Topic, OrderingKey: a.OrderingKey, Tenant: a.Tenant}).Validate(); err != nil {
			var e *envelope.Error
			if errors.As(err, &e) {
				e.Where = n.Name + " " + e.Where
			}
			return err
		}
		cols := columnsOf(n)
		tenant := []string{}
		if a.Tenant != "" {
			tenant = []string{a.Tenant}
		}
		for opt, names := range map[string][]string{"Fields": a.Fields, "Exclude": a.Exclude, "Tenant": tenant} {
			for _, c := range names {
				if !slices.Contains(cols, c) {
					return outbox.Configurationf(n.Name+" Options."+opt, "no column %q in table %s (columns: %v)", c, n.Table(), cols)
				}
			}
		}
	}
	return nil
}

// hasDBDefault reports whether the field's column has a database default
// (entsql.Default, DefaultExpr, DefaultExprs): a create that leaves it
// unset gets the database's value, not NULL.
func hasDBDefault(f *gen.Field) bool {
	a := f.EntSQL()
	return a != nil && (a.Default != "" || a.DefaultExpr != "" || len(a.DefaultExprs) > 0)
}

// timePrecision returns the fractional-second digits a time field's
// PostgreSQL column keeps when its SchemaType declares fewer than
// PostgreSQL's 6 ("timestamptz(3)").
func timePrecision(f *gen.Field) (int, bool) {
	if f.Type == nil || f.Type.Type != field.TypeTime {
		return 0, false
	}
	st := strings.ToLower(f.Column().SchemaType[dialect.Postgres])
	i := strings.IndexByte(st, '(')
	j := strings.IndexByte(st, ')')
	if i < 0 || j < i {
		return 0, false
	}
	p, err := strconv.Atoi(strings.TrimSpace(st[i+1 : j]))
	if err != nil || p < 0 || p >= 6 {
		return 0, false
	}
	return p, true
}

func annotation(n *gen.Type) (entcapture.Annotation, bool, error) {
	raw, ok := n.Annotations[annot.Capture]
	if !ok || raw == nil {
		return entcapture.Annotation{}, false, nil
	}
	var a entcapture.Annotation
	b, err := json.Marshal(raw)
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil {
		return a, false, outbox.Configurationf(n.Name, "bad %s annotation: %v", annot.Capture, err)
	}
	return a, true, nil
}

// columnsOf lists a type's columns in table order: the id, the fields,
// then the foreign keys of edges that declare no field.
func columnsOf(n *gen.Type) []string {
	var cols []string
	if n.HasOneFieldID() {
		cols = append(cols, n.ID.StorageKey())
	}
	for _, f := range n.Fields {
		cols = append(cols, f.StorageKey())
	}
	for _, fk := range n.ForeignKeys {
		if !fk.UserDefined {
			cols = append(cols, fk.Field.StorageKey())
		}
	}
	return cols
}

func writeGlue(g *gen.Graph, p *plan) error {
	target := filepath.Join(g.Target, GlueFile)
	captured := p.captured
	glued := slices.Concat(p.captured, p.parents)
	var b bytes.Buffer
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	pf("// Code generated by entcapture (github.com/heraldgo/herald), DO NOT EDIT.\n\npackage %s\n\n", path.Base(g.Package))
	pf("import (\n\t\"context\"\n\tstdsql \"database/sql\"\n\n\t\"entgo.io/ent\"\n\t\"entgo.io/ent/dialect\"\n\t\"entgo.io/ent/dialect/sql\"\n\n\t\"github.com/heraldgo/herald/entcapture/entcapturert\"\n")
	for _, n := range glued {
		pf("\t%q\n", path.Join(g.Package, n.PackageDir()))
	}
	pf(")\n\n")
	pf(`// HeraldDriver returns the client's driver (for a transaction's client,
// tx.Client() or m.Client() in a hook, the driver the transaction was
// begun on), for entcapture.Enqueue.
func (c *Client) HeraldDriver() dialect.Driver {
	if d, ok := heraldTxDriver(c.driver); ok {
		return d.drv
	}
	return c.driver
}

// HeraldTx returns the transaction of a transaction's client (nil for
// another client), for entcapture.Enqueue.
func (c *Client) HeraldTx() dialect.Tx {
	if d, ok := heraldTxDriver(c.driver); ok {
		return d.tx
	}
	return nil
}

// HeraldOnCommit runs f after the client's transaction commits, for entcapture.Enqueue.
func (c *Client) HeraldOnCommit(f func()) bool { return heraldOnCommit(c.driver, f) }

// heraldTxDriver finds the transaction driver under d (client.Debug()
// wraps it).
func heraldTxDriver(d dialect.Driver) (*txDriver, bool) {
	for {
		switch x := d.(type) {
		case *txDriver:
			return x, true
		case *dialect.DebugDriver:
			d = x.Driver
		default:
			return nil, false
		}
	}
}

// EntcGoWithEntcapturegen implements entcapture.Conn.
func (c *Client) EntcGoWithEntcapturegen() {}

// EntcGoWithEntcapturegen implements entcapture.Conn.
func (tx *Tx) EntcGoWithEntcapturegen() {}

// HeraldDriver returns the driver the transaction was begun on, for entcapture.Enqueue.
func (tx *Tx) HeraldDriver() dialect.Driver { return tx.config.driver.(*txDriver).drv }

// HeraldTx returns the transaction, for entcapture.Enqueue.
func (tx *Tx) HeraldTx() dialect.Tx { return tx.config.driver.(*txDriver).tx }

// HeraldOnCommit runs f after the transaction commits, for entcapture.Enqueue.
func (tx *Tx) HeraldOnCommit(f func()) bool { return heraldOnCommit(tx.config.driver, f) }

func heraldOnCommit(d dialect.Driver, f func()) bool {
	txd, ok := heraldTxDriver(d)
	if !ok {
		return false
	}
	txd.mu.Lock()
	txd.onCommit = append(txd.onCommit, func(next Committer) Committer {
		return CommitFunc(func(ctx context.Context, tx *Tx) error {
			err := next.Commit(ctx, tx)
			if err == nil {
				f()
			}
			return err
		})
	})
	txd.mu.Unlock()
	return true
}

var _ = stdsql.ErrNoRows

`)
	if len(p.parents) > 0 {
		pf("// heraldCascadeHook is the client hook of the schemas that are not\n// captured but whose deletes cascade to captured rows.\nvar heraldCascadeHook = entcapturert.CascadeHook()\n\n")
	}
	schemaConfig, _ := g.FeatureEnabled("sql/schemaconfig")
	if schemaConfig {
		pf("// heraldDB is the database schema of a table entcapture reads, in c.\nfunc heraldDB(c SchemaConfig, s *entcapturert.Schema) (string, bool) {\n\tswitch s {\n")
		for _, n := range glued {
			pf("\tcase herald%sSchema:\n\t\treturn c.%[1]s, true\n", n.Name)
		}
		for _, j := range p.joins {
			pf("\tcase %s:\n\t\treturn c.%s, true\n", j.glueVar(), j.configField)
		}
		pf("\t}\n\treturn \"\", false\n}\n\n")
	}
	for _, n := range glued {
		glueType(pf, n)
		if schemaConfig {
			pf("// HeraldDB implements entcapturert.Glue.\nfunc (m *%s) HeraldDB(s *entcapturert.Schema) (string, bool) { return heraldDB(m.schemaConfig, s) }\n\n", n.MutationName())
		} else {
			pf("// HeraldDB implements entcapturert.Glue: the code has no SchemaConfig.\nfunc (m *%s) HeraldDB(*entcapturert.Schema) (string, bool) { return \"\", false }\n\n", n.MutationName())
		}
	}
	var idScans []*gen.Type
	for _, j := range p.joins {
		glueJoin(pf, j)
		for _, r := range j.refs {
			if !slices.Contains(idScans, r) {
				idScans = append(idScans, r)
			}
		}
	}
	for _, n := range idScans {
		glueIDScan(pf, n)
	}
	pf("func init() {\n")
	pf("\tentcapturert.Register(")
	for _, n := range captured {
		pf("herald%sSchema, ", n.Name)
	}
	for _, j := range p.joins {
		pf("%s, ", j.glueVar())
	}
	pf(")\n")
	for _, n := range glued {
		v := "herald" + n.Name
		pf("\t%sSchema.Scan = (*%s)(nil).HeraldScan\n", v, n.MutationName())
		if db := dbOf(n.EntSQL()); db != "" {
			pf("\t%sSchema.DB = %q\n", v, db)
		}
		if _, ok, _ := annotation(n); !ok {
			for _, c := range p.cascades[n.Name] {
				pf("\t%sSchema.Cascades = append(%[1]sSchema.Cascades, entcapturert.Cascade{Child: %s, Column: %q, SetNull: %v})\n", v, c.child, c.column, c.setNull)
			}
			continue
		}
		pf("\t%sSchema.Hooks = func() []ent.Hook { return %s.Hooks[:] }\n", v, n.Package())
		for _, e := range n.Edges {
			if e.OwnFK() && len(e.Rel.Columns) > 0 {
				pf("\tif %sSchema.EdgeColumns == nil {\n\t\t%[1]sSchema.EdgeColumns = map[string]string{}\n\t}\n", v)
				pf("\t%sSchema.EdgeColumns[%q] = %q\n", v, e.Name, e.Rel.Column())
			}
			if e.Through == nil && (e.O2M() || (e.O2O() && (!e.OwnFK() || e.Bidi))) && len(e.Rel.Columns) > 0 {
				if _, ok, _ := annotation(e.Type); ok {
					pf("\t%sSchema.ChildEdges = append(%[1]sSchema.ChildEdges, entcapturert.ChildEdge{Name: %q, Child: herald%sSchema, Column: %q})\n", v, e.Name, e.Type.Name, e.Rel.Column())
				}
			}
			if !e.M2M() || len(e.Rel.Columns) != 2 {
				continue
			}
			var through string
			if e.Through != nil {
				if _, ok, _ := annotation(e.Through); !ok {
					continue
				}
				through = "herald" + e.Through.Name + "Schema"
			} else if j := p.joinOf(e.Rel.Table); j != nil {
				through = j.glueVar()
			} else {
				continue
			}
			own, other := e.Rel.Columns[0], e.Rel.Columns[1]
			if e.IsInverse() {
				own, other = other, own
			}
			pf("\t%sSchema.Edges = append(%[1]sSchema.Edges, entcapturert.ThroughEdge{Name: %q, Through: %s, Own: %q, Other: %q, Bidi: %v})\n", v, e.Name, through, own, other, e.Bidi)
		}
		for _, c := range p.cascades[n.Name] {
			pf("\t%sSchema.Cascades = append(%[1]sSchema.Cascades, entcapturert.Cascade{Child: %s, Column: %q, SetNull: %v})\n", v, c.child, c.column, c.setNull)
		}
	}
	for _, j := range p.joins {
		pf("\t%[1]s.Scan = heraldScan%[2]s\n\t%[1]s.JoinOwner = herald%[3]sSchema\n", j.glueVar(), j.name, j.owner.Name)
		if j.db != "" {
			pf("\t%s.DB = %q\n", j.glueVar(), j.db)
		}
	}
	pf("}\n")
	src, err := format.Source(b.Bytes())
	if err != nil {
		return fmt.Errorf("herald/entcapture: format generated glue: %w\n%s", err, b.Bytes())
	}
	if len(captured) == 0 {
		_ = os.Remove(target)
		return nil
	}
	if err := os.WriteFile(target, src, 0o644); err != nil { //nolint:gosec // generated source, readable like ent's own
		return fmt.Errorf("herald/entcapture: write %s: %w", target, err)
	}
	return nil
}

func dbOf(a *entsql.Annotation) string {
	if a == nil {
		return ""
	}
	return a.Schema
}

type cascade struct {
	child, column string // child: the glue variable of the child's Schema
	setNull       bool
}

// plan is what the glue covers: the captured schemas; the schemas that
// are not captured but whose deletes reach captured rows through ON
// DELETE CASCADE or SET NULL (directly, or through other such schemas);
// the join tables of plain many-to-many edges between captured schemas;
// and the foreign keys a delete follows, by parent schema.
type plan struct {
	captured, parents []*gen.Type
	joins             []*joinTable
	cascades          map[string][]cascade
}

// joinTable is the join table of a plain many-to-many edge (no edge
// schema), captured as a model named as the table (user_groups), as
// GORM names the join table of a many2many:user_groups relation, keyed by
// its two foreign keys.
type joinTable struct {
	name, table, db string       // name: the table's in Go identifiers, UserGroups
	configField     string       // its field in ent's SchemaConfig: UserGroups
	owner           *gen.Type    // the schema that declares the edge (edge.To)
	cols            [2]string    // its columns, in table order
	refs            [2]*gen.Type // the schemas whose ids they hold
}

func (j *joinTable) glueVar() string { return "heraldJoin" + j.name + "Schema" }

func (p *plan) joinOf(table string) *joinTable {
	for _, j := range p.joins {
		if j.table == table {
			return j
		}
	}
	return nil
}

func planOf(g *gen.Graph) (*plan, error) {
	p := &plan{cascades: map[string][]cascade{}}
	isCaptured := map[string]bool{}
	for _, n := range g.Nodes {
		if _, ok, _ := annotation(n); ok {
			p.captured = append(p.captured, n)
			isCaptured[n.Name] = true
		}
	}
	for _, n := range p.captured {
		for _, e := range n.Edges {
			if !e.M2M() || e.Through != nil || e.IsInverse() || len(e.Rel.Columns) != 2 || !isCaptured[e.Type.Name] || p.joinOf(e.Rel.Table) != nil {
				continue
			}
			j := &joinTable{name: pascal(e.Rel.Table), table: e.Rel.Table, owner: n, configField: n.Name + e.StructField(),
				cols: [2]string{e.Rel.Columns[0], e.Rel.Columns[1]}, refs: [2]*gen.Type{n, e.Type}, db: dbOf(n.EntSQL())}
			if db := dbOf(e.EntSQL()); db != "" {
				j.db = db
			}
			p.joins = append(p.joins, j)
		}
	}
	tables, err := g.Tables()
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: tables: %w", err)
	}
	byTable := map[string]*gen.Type{}
	for _, n := range g.Nodes {
		if !n.IsView() {
			byTable[n.Table()] = n
		}
	}
	// Every ON DELETE CASCADE / SET NULL foreign key (ent's defaults
	// included: a nullable foreign key is SET NULL, an edge schema's and
	// a join table's are CASCADE), by the referenced schema.
	type fk struct {
		child   *gen.Type  // nil for a join table
		join    *joinTable // the captured join table, or nil
		column  string
		setNull bool
	}
	fks := map[string][]fk{}
	for _, t := range tables {
		for _, f := range t.ForeignKeys {
			parent, ok := byTable[f.RefTable.Name]
			if child := byTable[t.Name]; ok && child != nil && isCaptured[child.Name] && (f.OnDelete == entschema.SetDefault || f.OnUpdate == entschema.SetDefault) {
				// The rows the database rewrites would have no events, or
				// wrong ones (the capture nulls; the default is the
				// database's): refused here rather than missed at run time.
				return nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: child.Name,
					Msg: fmt.Sprintf("foreign key %s of table %s to %s is ON DELETE/ON UPDATE SET DEFAULT, which entcapture does not follow: use entsql.SetNull or entsql.Cascade (followed), or NoAction/Restrict and change the rows in code", f.Symbol, t.Name, parent.Table())}
			}
			if !ok || len(f.Columns) != 1 || (f.OnDelete != entschema.Cascade && f.OnDelete != entschema.SetNull) {
				continue
			}
			k := fk{child: byTable[t.Name], join: p.joinOf(t.Name), column: f.Columns[0].Name, setNull: f.OnDelete == entschema.SetNull}
			if k.child == nil && k.join == nil {
				continue
			}
			fks[parent.Name] = append(fks[parent.Name], k)
		}
	}
	// reaches: a delete of the schema's rows changes captured rows.
	memo := map[string]int{} // 1 visiting, 2 yes, 3 no
	var reaches func(name string) bool
	leads := func(k fk) bool {
		if k.join != nil || isCaptured[k.child.Name] {
			return true
		}
		return !k.setNull && k.child.HasOneFieldID() && reaches(k.child.Name)
	}
	reaches = func(name string) bool {
		switch memo[name] {
		case 1, 3:
			return false
		case 2:
			return true
		}
		memo[name] = 1
		ok := false
		for _, k := range fks[name] {
			if leads(k) {
				ok = true
			}
		}
		memo[name] = 3
		if ok {
			memo[name] = 2
		}
		return ok
	}
	for _, n := range g.Nodes {
		if n.IsView() || !n.HasOneFieldID() {
			continue
		}
		var cs []cascade
		for _, k := range fks[n.Name] {
			if !leads(k) {
				continue
			}
			c := cascade{column: k.column, setNull: k.setNull}
			if k.join != nil {
				c.child = k.join.glueVar()
			} else {
				c.child = "herald" + k.child.Name + "Schema"
			}
			cs = append(cs, c)
		}
		if len(cs) == 0 {
			continue
		}
		p.cascades[n.Name] = cs
		if !isCaptured[n.Name] {
			p.parents = append(p.parents, n)
		}
	}
	return p, nil
}

// pascal turns a table name into a Go identifier: user_groups, UserGroups.
func pascal(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		switch {
		case r == '_' || r == '.' || r == '-' || r == ' ':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// glueJoin writes a join table's Schema and its scan, which reads each
// column as the id of the schema it references.
func glueJoin(pf func(string, ...any), j *joinTable) {
	pf("// %s describes the join table %s to entcapture.\nvar %[1]s = &entcapturert.Schema{\n", j.glueVar(), j.table)
	pf("\tName: %q,\n\tTable: %[1]q,\n\tColumns: []string{%q, %q},\n\tKey: []string{%[2]q, %[3]q},\n}\n\n", j.table, j.cols[0], j.cols[1])
	pf("func heraldScan%s(rows *stdsql.Rows, cols []string) ([]map[string]any, error) {\n", j.name)
	pf("\tvar out []map[string]any\n\tfor rows.Next() {\n\t\tvals := make([]any, len(cols))\n\t\tgets := make([]func() (any, error), len(cols))\n\t\tfor i, c := range cols {\n\t\t\tswitch c {\n")
	for i, c := range j.cols {
		pf("\t\t\tcase %q:\n\t\t\t\tvals[i], gets[i] = heraldIDScan%s()\n", c, j.refs[i].Name)
	}
	pf("\t\t\tdefault:\n\t\t\t\tv := new(any)\n\t\t\t\tvals[i], gets[i] = v, func() (any, error) { return *v, nil }\n\t\t\t}\n\t\t}\n")
	pf("\t\tif err := rows.Scan(vals...); err != nil {\n\t\t\treturn nil, err\n\t\t}\n\t\trow := make(map[string]any, len(cols))\n\t\tfor i, c := range cols {\n")
	pf("\t\t\tv, err := gets[i]()\n\t\t\tif err != nil {\n\t\t\t\treturn nil, err\n\t\t\t}\n\t\t\trow[c] = v\n\t\t}\n\t\tout = append(out, row)\n\t}\n\treturn out, rows.Err()\n}\n\n")
}

// glueIDScan writes, for a schema whose ids a join table holds, the scan
// of one id column as the schema's entity scans its id.
func glueIDScan(pf func(string, ...any), n *gen.Type) {
	pf("func heraldIDScan%s() (any, func() (any, error)) {\n\te := &%[1]s{}\n\tvals, err := e.scanValues([]string{%s.%s})\n", n.Name, n.Package(), n.ID.Constant())
	pf("\tif err != nil {\n\t\treturn new(any), func() (any, error) { return nil, err }\n\t}\n")
	pf("\treturn vals[0], func() (any, error) {\n\t\tif err := e.assignValues([]string{%s.%s}, vals); err != nil {\n\t\t\treturn nil, err\n\t\t}\n\t\treturn e.ID, nil\n\t}\n}\n\n", n.Package(), n.ID.Constant())
}

func glueType(pf func(string, ...any), n *gen.Type) {
	pkg := n.Package()
	mut := n.MutationName()
	v := "herald" + n.Name
	var sensitive, nullable, dbDefaults []string
	precision := map[string]int{}
	types := map[string]map[string]string{} // dialect → column → declared type
	fields := map[string]string{}
	for _, f := range n.Fields {
		for d, typ := range f.Column().SchemaType {
			// geometry: MySQL's own (GeoJSON); PostGIS's keeps its Go
			// type's form, so its schema is left as it was (fused creates).
			if pgform.Handles(typ) && (d == dialect.MySQL || pgform.Parse(typ).Base != "geometry") {
				if types[d] == nil {
					types[d] = map[string]string{}
				}
				types[d][f.StorageKey()] = typ
			}
		}
		fields[f.Name] = f.StorageKey()
		if f.Sensitive() {
			sensitive = append(sensitive, f.StorageKey())
		}
		switch {
		case hasDBDefault(f):
			dbDefaults = append(dbDefaults, f.StorageKey())
		case f.Optional && !f.Default:
			nullable = append(nullable, f.StorageKey())
		}
		if p, ok := timePrecision(f); ok {
			precision[f.StorageKey()] = p
		}
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	quote := func(ss []string) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = strconv.Quote(s)
		}
		return "[]string{" + strings.Join(q, ", ") + "}"
	}
	pf("// %sSchema describes %s to entcapture.\nvar %sSchema = &entcapturert.Schema{\n", v, n.Name, v)
	pf("\tName: %q,\n\tTable: %s.Table,\n\tColumns: %s,\n", n.Name, pkg, quote(columnsOf(n)))
	if n.HasOneFieldID() {
		pf("\tPK: %q,\n", n.ID.StorageKey())
	} else {
		key := make([]string, len(n.EdgeSchema.ID))
		for i, f := range n.EdgeSchema.ID {
			key[i] = f.StorageKey()
		}
		pf("\tKey: %s,\n", quote(key))
	}
	if len(sensitive) > 0 {
		pf("\tSensitive: %s,\n", quote(sensitive))
	}
	if len(nullable) > 0 {
		pf("\tNullable: %s,\n", quote(nullable))
	}
	if len(dbDefaults) > 0 {
		pf("\tDBDefaults: %s,\n", quote(dbDefaults))
	}
	if len(precision) > 0 {
		pf("\tPrecision: map[string]int{")
		for _, c := range slices.Sorted(maps.Keys(precision)) {
			pf("%q: %d, ", c, precision[c])
		}
		pf("},\n")
	}
	if len(types) > 0 {
		pf("\tTypes: map[string]map[string]string{\n")
		for _, d := range slices.Sorted(maps.Keys(types)) {
			pf("\t\t%q: {", d)
			for _, c := range slices.Sorted(maps.Keys(types[d])) {
				pf("%q: %q, ", c, types[d][c])
			}
			pf("},\n")
		}
		pf("\t},\n")
	}
	pf("\tFields: map[string]string{")
	for _, k := range names {
		pf("%q: %q, ", k, fields[k])
	}
	pf("},\n}\n\n")

	pf(`// HeraldSchema implements entcapturert.Glue.
func (m *%[1]s) HeraldSchema() *entcapturert.Schema { return %[2]sSchema }

// HeraldDriver implements entcapturert.Glue.
func (m *%[1]s) HeraldDriver() dialect.Driver {
	if d, ok := heraldTxDriver(m.driver); ok {
		return d.drv
	}
	return m.driver
}

// HeraldTx implements entcapturert.Glue.
func (m *%[1]s) HeraldTx() dialect.Tx {
	if d, ok := heraldTxDriver(m.driver); ok {
		return d.tx
	}
	return nil
}

// HeraldOnCommit implements entcapturert.Glue.
func (m *%[1]s) HeraldOnCommit(f func()) bool { return heraldOnCommit(m.driver, f) }

// HeraldBeforeDelete implements entcapturert.Glue.
func (m *%[1]s) HeraldBeforeDelete(f func(context.Context) error) { m.heraldDelete = f }

// HeraldBeforeInsert implements entcapturert.Glue.
func (m *%[1]s) HeraldBeforeInsert(f func([]sql.ConflictOption)) { m.heraldBefore = f }

// HeraldPredicates implements entcapturert.Glue.
func (m *%[1]s) HeraldPredicates() []func(*sql.Selector) {
	ps := make([]func(*sql.Selector), len(m.predicates))
	for i, p := range m.predicates {
		ps[i] = p
	}
	return ps
}

// HeraldRow implements entcapturert.Glue.
func (m *%[1]s) HeraldRow(v ent.Value) (map[string]any, bool) {
	e, ok := v.(*%[3]s)
	if !ok || e == nil {
		return nil, false
	}
	return %[2]sRow(e, %[2]sSchema.Columns, nil), true
}

// HeraldScan implements entcapturert.Glue.
func (m *%[1]s) HeraldScan(rows *stdsql.Rows, cols []string) ([]map[string]any, error) {
	var out []map[string]any
	for rows.Next() {
		dst, row, err := m.HeraldScanner(cols)
		if err != nil {
			return nil, err
		}
		if err := rows.Scan(dst...); err != nil {
			return nil, err
		}
		r, err := row()
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// HeraldScanner implements entcapturert.Glue: the scan destinations of one
// row of cols, and the row once scanned (NULL as nil).
func (m *%[1]s) HeraldScanner(cols []string) ([]any, func() (map[string]any, error), error) {
	e := &%[3]s{}
	vals, err := e.scanValues(cols)
	if err != nil {
		return nil, nil, err
	}
	dst := entcapturert.NullAware(vals)
	return dst, func() (map[string]any, error) {
		if err := e.assignValues(cols, vals); err != nil {
			return nil, err
		}
		return %[2]sRow(e, cols, dst), nil
	}, nil
}

// HeraldModifiers implements entcapturert.Glue: the UPDATE's modifiers
// (Modify, AppendX), as its sqlSave last saw them.
func (m *%[1]s) HeraldModifiers() []func(*sql.UpdateBuilder) { return m.heraldModifiers }

`, mut, v, n.Name)
	if n.HasOneFieldID() {
		pf("// HeraldID implements entcapturert.Glue.\nfunc (m *%s) HeraldID() (any, bool) {\n\tif m.id == nil {\n\t\treturn nil, false\n\t}\n\treturn *m.id, true\n}\n\n", mut)
	} else {
		pf("// HeraldID implements entcapturert.Glue: a composite id has none.\nfunc (m *%s) HeraldID() (any, bool) { return nil, false }\n\n", mut)
	}
	pf("// HeraldNew implements entcapturert.Glue: the entity a create of the\n// mutation's fields returns, as its createSpec builds it, without edges\n// (and without the id the database generates).\n")
	pf("func (m *%s) HeraldNew() ent.Value {\n\te := &%s{}\n", mut, n.Name)
	if n.HasOneFieldID() {
		pf("\tif v, ok := m.ID(); ok {\n\t\te.ID = v\n\t}\n")
	}
	for _, f := range n.Fields {
		if f.IsEdgeField() {
			continue
		}
		// NillableValue: a Nillable field of a pointer GoType is that
		// pointer in the entity, not a pointer to it.
		if f.NillableValue() {
			pf("\tif v, ok := m.%s(); ok {\n\t\te.%s = &v\n\t}\n", f.MutationGet(), f.StructField())
		} else {
			pf("\tif v, ok := m.%s(); ok {\n\t\te.%s = v\n\t}\n", f.MutationGet(), f.StructField())
		}
	}
	pf("\treturn e\n}\n\n")
	pf("func %sRow(e *%s, cols []string, vals []any) map[string]any {\n\trow := make(map[string]any, len(cols))\n\tfor i, c := range cols {\n", v, n.Name)
	pf("\t\tif vals != nil && entcapturert.IsNull(vals[i]) {\n\t\t\trow[c] = nil\n\t\t\tcontinue\n\t\t}\n\t\tswitch c {\n")
	if n.HasOneFieldID() {
		pf("\t\tcase %q:\n\t\t\trow[c] = e.ID\n", n.ID.StorageKey())
	}
	for _, f := range n.Fields {
		if f.HasValueScanner() {
			// The column holds what the field's ValueScanner makes of the
			// value (its Value), not the Go value: the event holds it too.
			// (ent v0.14.5 generates no Nillable field with a ValueScanner.)
			pf("\t\tcase %q:\n\t\t\trow[c] = entcapturert.ScannedValue(%s.ValueScanner.%s, e.%[3]s, %v)\n", f.StorageKey(), pkg, f.StructField(), f.Type != nil && f.Type.Type == field.TypeString)
			continue
		}
		if f.NillableValue() {
			pf("\t\tcase %q:\n\t\t\tif e.%[2]s != nil {\n\t\t\t\trow[c] = *e.%[2]s\n\t\t\t} else {\n\t\t\t\trow[c] = nil\n\t\t\t}\n", f.StorageKey(), f.StructField())
		} else {
			pf("\t\tcase %q:\n\t\t\trow[c] = e.%s\n", f.StorageKey(), f.StructField())
		}
	}
	for _, fk := range n.ForeignKeys {
		if fk.UserDefined {
			continue
		}
		pf("\t\tcase %q:\n\t\t\tif e.%[2]s != nil {\n\t\t\t\trow[c] = *e.%[2]s\n\t\t\t} else {\n\t\t\t\trow[c] = nil\n\t\t\t}\n", fk.Field.StorageKey(), fk.StructField())
	}
	pf("\t\t}\n\t}\n\treturn row\n}\n\n")
	pf("var _ entcapturert.Glue = (*%s)(nil)\n\n", mut)
}
