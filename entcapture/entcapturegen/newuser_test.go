package entcapturegen_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The files of the README's ent steps, as the README shows them (the
// doccheck test finds the README's snippets in this file).
const (
	readmeMixin = `
func (Todo) Mixin() []ent.Mixin {
	return []ent.Mixin{entcapture.Mixin(envelope.Options{})}
}
`
	readmeGenerate = `// ent/generate.go
package ent

//go:generate go run -mod=mod entc.go
`
	readmeEntc = `// ent/entc.go
//go:build ignore

package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/heraldgo/herald/entcapture/entcapturegen"
)

func main() {
	if err := entc.Generate("./schema", &gen.Config{}, entc.Extensions(entcapturegen.Extension())); err != nil {
		log.Fatal(err)
	}
}
`
	userMain = `package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/mattn/go-sqlite3"

	"example.com/todo/ent"
	_ "example.com/todo/ent/runtime"
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

func main() {
	ctx := context.Background()
	db, err := sql.Open("sqlite3", "file:todo.db?_foreign_keys=1&_busy_timeout=10000")
	if err != nil {
		log.Fatal(err)
	}
	if err := envelope.Migrate(ctx, db, envelope.SQLite, ""); err != nil {
		log.Fatal(err)
	}
	client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.SQLite, db))))
	if err := client.Schema.Create(ctx); err != nil {
		log.Fatal(err)
	}
	client.Todo.Create().SaveX(ctx) // todo.inserted: the row and its event, in one transaction
	var topic string
	if err := db.QueryRow("SELECT topic FROM herald_outbox").Scan(&topic); err != nil {
		log.Fatal(err)
	}
	fmt.Println(topic)
}
`
	userEnqueue = `package main

import (
	"context"

	"example.com/todo/ent"
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

func enqueue(ctx context.Context, tx *ent.Tx) error {
	_, err := entcapture.Enqueue(ctx, tx, envelope.Message{Topic: "mail.send", Payload: 1})
	return err
}
`
)

// TestNewEntUser does what a new ent user does, from ent's scaffold to a
// captured write, in a module of its own (herald replaced by this
// repository): go run entgo.io/ent/cmd/ent new Todo; add entcapture.Mixin.
// With ent's default generate.go (ent's CLI, which runs no extension) the
// write panics, and a call of entcapture.Enqueue does not compile, each
// naming the fix; with the README's generate.go and entc.go the write is
// captured. It needs the go command and the module proxy (or a module
// cache holding ent and herald's dependencies).
func TestNewEntUser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds ent's CLI and a program in a new module (minutes)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(want bool, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=1")
		out, err := cmd.CombinedOutput()
		if (err == nil) != want {
			t.Fatalf("%s %s: err = %v, want success %v:\n%s", name, strings.Join(args, " "), err, want, out)
		}
		return string(out)
	}
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/todo\n\ngo 1.26.0\n\nrequire github.com/heraldgo/herald v0.0.0\n\nreplace github.com/heraldgo/herald => "+root+"\n")
	run(true, "go", "run", "-mod=mod", "entgo.io/ent/cmd/ent", "new", "Todo")

	// The schema opts in.
	schema := filepath.Join(dir, "ent", "schema", "todo.go")
	src, err := os.ReadFile(schema)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), `import "entgo.io/ent"`, "import (\n\t\"entgo.io/ent\"\n\n\t\"github.com/heraldgo/herald/entcapture\"\n\t\"github.com/heraldgo/herald/envelope\"\n)", 1)
	write("ent/schema/todo.go", s+readmeMixin)
	write("main.go", userMain)

	// ent's default generate.go: the CLI, no extension.
	gen, err := os.ReadFile(filepath.Join(dir, "ent", "generate.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gen), "entgo.io/ent/cmd/ent generate") {
		t.Fatalf("ent new's generate.go is not what the README says it is:\n%s", gen)
	}
	run(true, "go", "generate", "./ent")
	out := run(false, "go", "run", ".")
	for _, want := range []string{"no entcapture glue", "//go:build ignore", "go run -mod=mod entc.go", "entcapturegen.Extension()"} {
		if !strings.Contains(out, want) {
			t.Errorf("the write without the glue fails without naming the fix (%q):\n%s", want, out)
		}
	}
	write("enqueue.go", userEnqueue)
	out = run(false, "go", "build", "-o", os.DevNull, ".")
	if !strings.Contains(out, "missing method EntcGoWithEntcapturegen") {
		t.Errorf("Enqueue on a client generated without the extension: the compile error does not name the fix:\n%s", out)
	}

	// The README's steps.
	write("ent/generate.go", readmeGenerate)
	write("ent/entc.go", readmeEntc)
	run(true, "go", "generate", "./ent")
	out = run(true, "go", "run", ".")
	if strings.TrimSpace(out) != "todo.inserted" {
		t.Fatalf("the captured write: %q, want todo.inserted", out)
	}
}
