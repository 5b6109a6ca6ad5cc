package entcapturegen

import (
	stdsql "database/sql"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"entgo.io/ent"
	entsql "entgo.io/ent/dialect/entsql"
	"entgo.io/ent/entc/gen"
	"entgo.io/ent/entc/load"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"

	"github.com/heraldgo/herald/entcapture"
	annot "github.com/heraldgo/herald/entcapture/internal/annotation"
	"github.com/heraldgo/herald/envelope"
)

type genLoan struct {
	ent.Schema
	opts envelope.Options
}

func (genLoan) Fields() []ent.Field { return []ent.Field{field.String("status")} }

func (s genLoan) Mixin() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(s.opts)} }

func graphOf(t *testing.T, s ent.Interface, features ...gen.Feature) *gen.Graph {
	t.Helper()
	b, err := load.MarshalSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := load.UnmarshalSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	ls.Name = "Loan"
	storage, err := gen.NewStorage("sql")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gen.NewGraph(&gen.Config{Package: "example.com/x/ent", Storage: storage, Features: features}, ls)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGenerationChecks: code generation fails, naming the schema and the
// option, for a declaration it can see is wrong, and for the features
// capture needs when they are not enabled.
func TestGenerationChecks(t *testing.T) {
	t.Parallel()
	all := []gen.Feature{gen.FeatureExecQuery, gen.FeatureUpsert}
	for _, c := range []struct {
		name     string
		opts     envelope.Options
		features []gen.Feature
		want     string
	}{
		{"unknown field", envelope.Options{Fields: []string{"nope"}}, all, `Loan Options.Fields: no column "nope"`},
		{"unknown exclude", envelope.Options{Exclude: []string{"nope"}}, all, `Loan Options.Exclude: no column "nope"`},
		{"unknown template name", envelope.Options{Topic: "{nope}"}, all, "Loan Options.Topic"},
		{"feature off", envelope.Options{}, []gen.Feature{gen.FeatureUpsert}, "sql/execquery"},
	} {
		err := check(graphOf(t, genLoan{opts: c.opts}, c.features...))
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrConfiguration containing %q", c.name, err, c.want)
		}
	}
	if err := check(graphOf(t, genLoan{opts: envelope.Options{Fields: []string{"status"}}}, all...)); err != nil {
		t.Errorf("a good declaration: %v", err)
	}
}

// ent's tx template leaves the stdsql import to goimports, which may miss
// it (see fixTxImport): the hook adds it when stdsql is used and not
// imported, and leaves every other file as it is.
func TestAddStdsqlImport(t *testing.T) {
	const uses = `func (tx *txDriver) ExecContext() (stdsql.Result, error) { return nil, nil }
`
	for _, c := range []struct {
		name, src string
		changed   bool
	}{
		{"grouped imports, stdsql missing", "package ent\n\nimport (\n\t\"context\"\n\t\"sync\"\n)\n\nvar _ context.Context\nvar _ sync.Mutex\n\n" + uses, true},
		{"no imports at all", "package ent\n\n" + uses, true},
		{"already imported", "package ent\n\nimport (\n\t\"context\"\n\tstdsql \"database/sql\"\n)\n\nvar _ context.Context\n\n" + uses, false},
		{"not used", "package ent\n\nimport (\n\t\"context\"\n)\n\nvar _ context.Context\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, changed, err := addStdsqlImport([]byte(c.src))
			if err != nil {
				t.Fatal(err)
			}
			if changed != c.changed {
				t.Fatalf("changed = %v, want %v:\n%s", changed, c.changed, out)
			}
			if !changed {
				if string(out) != c.src {
					t.Fatalf("an unchanged file was rewritten:\n%s", out)
				}
				return
			}
			// The result compiles as far as the type checker can tell
			// without the rest of the package: stdsql resolves.
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "tx.go", out, 0)
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			conf := types.Config{Importer: importer.Default(), Error: func(error) {}}
			info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
			_, _ = conf.Check("ent", fset, []*ast.File{f}, info)
			found := false
			for id, obj := range info.Uses {
				if id.Name == "stdsql" {
					pn, ok := obj.(*types.PkgName)
					found = ok && pn.Imported().Path() == "database/sql"
				}
			}
			if !found {
				t.Fatalf("stdsql does not resolve to database/sql in:\n%s", out)
			}
			if again, changed, _ := addStdsqlImport(out); changed || string(again) != string(out) {
				t.Fatalf("a second pass changed the file again:\n%s", again)
			}
		})
	}
}

// TestBulkTemplateRelease (issue 18): generation passes ent v0.14.5, and
// another release whose create_bulk template is v0.14.5's; a release
// whose create_bulk differs fails with ErrConfiguration naming it (it used
// to generate the v0.14.5 copy silently).
func TestBulkTemplateRelease(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "entgo.io/ent").Output()
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "entc", "gen", "template", "dialect", "sql", "create.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(b []byte) func() ([]byte, error) { return func() ([]byte, error) { return b, nil } }
	if err := checkBulkTemplate("v0.14.5", func() ([]byte, error) { t.Fatal("read for v0.14.5"); return nil, nil }); err != nil {
		t.Errorf("v0.14.5: %v", err)
	}
	if err := checkBulkTemplate("v0.14.6", read(orig)); err != nil {
		t.Errorf("a release with v0.14.5's create_bulk (this module's ent, %s): %v", strings.TrimSpace(string(out)), err)
	}
	changed := strings.Replace(string(orig), "mutators[0].Mutate(ctx,", "mutators[0].Mutate(context.WithoutCancel(ctx),", 1)
	if changed == string(orig) {
		t.Fatal("the create_bulk template changed: update the test")
	}
	for _, c := range []struct {
		name, version string
		read          func() ([]byte, error)
		want          string
	}{
		{"changed create_bulk", "v0.15.0", read([]byte(changed)), "entgo.io/ent v0.15.0: its create_bulk template differs from v0.14.5's"},
		{"no create_bulk", "v0.15.0", read([]byte(`{{ define "dialect/sql/create" }}{{ end }}`)), "defines no dialect/sql/create_bulk"},
		{"unreadable", "", func() ([]byte, error) { return nil, os.ErrNotExist }, "(unknown release): cannot read"},
	} {
		err := checkBulkTemplate(c.version, c.read)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrConfiguration containing %q", c.name, err, c.want)
		}
	}
}

type genNullable struct{ ent.Schema }

func (genNullable) Fields() []ent.Field {
	return []ent.Field{
		field.String("plain").Optional().Nillable(),
		field.String("null_str").Optional().Nillable().GoType(&stdsql.NullString{}),
	}
}

func (genNullable) Mixin() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(envelope.Options{})} }

// TestNillablePointerGoType: a Nillable field whose GoType is a pointer
// (ent's integration suite: GoType(&sql.NullString{})) is that pointer in
// the entity, so the glue assigns and reads it as it is; the glue took its
// address (**sql.NullString) and did not compile.
func TestNillablePointerGoType(t *testing.T) {
	t.Parallel()
	g := graphOf(t, genNullable{})
	var sb strings.Builder
	glueType(func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }, g.Nodes[0])
	src := sb.String()
	for _, want := range []string{"e.Plain = &v", "e.NullStr = v", "row[c] = *e.Plain", "row[c] = e.NullStr"} {
		if !strings.Contains(src, want) {
			t.Errorf("the glue lacks %q:\n%s", want, src)
		}
	}
	for _, bad := range []string{"e.NullStr = &v", "row[c] = *e.NullStr"} {
		if strings.Contains(src, bad) {
			t.Errorf("the glue has %q", bad)
		}
	}
}

// Owner and Pet: a captured Pet whose owner foreign key is ON DELETE
// SET DEFAULT (setDefault) or SET NULL.
type (
	Owner struct {
		ent.Schema
		setDefault bool
	}
	Pet struct{ ent.Schema }
)

func (o Owner) Edges() []ent.Edge {
	action := entsql.SetNull
	if o.setDefault {
		action = entsql.SetDefault
	}
	return []ent.Edge{edge.To("pets", Pet.Type).Annotations(entsql.OnDelete(action))}
}

func (Pet) Fields() []ent.Field { return []ent.Field{field.String("name")} }
func (Pet) Edges() []ent.Edge {
	return []ent.Edge{edge.From("owner", Owner.Type).Ref("pets").Unique()}
}
func (Pet) Mixin() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(envelope.Options{})} }

// TestSetDefaultRefused: ent's ON DELETE SET DEFAULT into a captured
// schema is refused at code generation, naming the schema and the
// remedy — the database would rewrite captured rows with no event
// (issue 23, section 3); SET NULL is followed and generates.
func TestSetDefaultRefused(t *testing.T) {
	t.Parallel()
	graph := func(o Owner) *gen.Graph {
		t.Helper()
		var ls []*load.Schema
		for _, s := range []ent.Interface{o, Pet{}} {
			b, err := load.MarshalSchema(s)
			if err != nil {
				t.Fatal(err)
			}
			l, err := load.UnmarshalSchema(b)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		storage, err := gen.NewStorage("sql")
		if err != nil {
			t.Fatal(err)
		}
		g, err := gen.NewGraph(&gen.Config{Package: "example.com/x/ent", Storage: storage, Features: []gen.Feature{gen.FeatureExecQuery, gen.FeatureUpsert}}, ls...)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	_, err := planOf(graph(Owner{setDefault: true}))
	if !errors.Is(err, envelope.ErrUnsupported) || !strings.Contains(err.Error(), "Pet") || !strings.Contains(err.Error(), "SET DEFAULT") {
		t.Fatalf("SET DEFAULT into a captured schema: %v; want ErrUnsupported naming Pet and SET DEFAULT", err)
	}
	p, err := planOf(graph(Owner{}))
	if err != nil || len(p.cascades["Owner"]) != 1 {
		t.Fatalf("SET NULL: plan %+v, %v; want one followed cascade", p, err)
	}
}

// TestTemplatesSpellTheAnnotationNames: the templates test a schema's
// annotations by name ($.Annotations.HeraldCapture); the names are the
// constants the mixin and the generator use, so renaming one without the
// other fails here instead of generating glue for no schema.
func TestTemplatesSpellTheAnnotationNames(t *testing.T) {
	for _, name := range []string{annot.Capture, annot.Cascade} {
		if !strings.Contains(templates, ".Annotations."+name+" ") && !strings.Contains(templates, ".Annotations."+name+"}") {
			t.Errorf("entcapture.tmpl never tests .Annotations.%s", name)
		}
	}
	if got := (entcapture.Annotation{}).Name(); got != annot.Capture {
		t.Errorf("entcapture.Annotation's Name() = %q, want %q", got, annot.Capture)
	}
}

// ent's client template leaves "entgo.io/ent" to goimports, which may
// resolve ent to another package of the module (see fixEntImports): the
// hook drops that import and resolves ent again from the package's other
// files, and leaves files that import ent rightly, or another ent under
// an alias, as they are.
func TestFixEntImports(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"hook.go":    "package ent\n\nimport \"entgo.io/ent\"\n\nvar _ ent.Hook\n",
		"client.go":  "package ent\n\nimport (\n\t\"context\"\n\n\t\"example.com/other/ent\"\n)\n\nvar _ context.Context\nvar _ ent.Hook\n",
		"aliased.go": "package ent\n\nimport (\n\tother \"example.com/other/ent\"\n\n\t\"entgo.io/ent\"\n)\n\nvar _ other.Thing\nvar _ ent.Hook\n",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := fixEntImports(dir); err != nil {
		t.Fatal(err)
	}
	for name, src := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name != "client.go" {
			if string(got) != src {
				t.Errorf("%s was rewritten:\n%s", name, got)
			}
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, got, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("%v:\n%s", err, got)
		}
		var paths []string
		for _, imp := range f.Imports {
			paths = append(paths, imp.Path.Value)
		}
		if want := []string{`"context"`, `"entgo.io/ent"`}; !slices.Equal(paths, want) {
			t.Errorf("client.go imports %v, want %v:\n%s", paths, want, got)
		}
	}
}
