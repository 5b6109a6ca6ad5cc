package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSkipPattern: the tests that panicked are skipped, and nothing else.
func TestSkipPattern(t *testing.T) {
	for _, c := range []struct {
		tests []string
		want  string
	}{
		{[]string{"TestSQLite/Types"}, "^TestSQLite$/^(Types)$"},
		{[]string{"TestPostgres/12/Types", "TestPostgres/12/Upsert"}, "^TestPostgres$/^12$/^(Types|Upsert)$"},
		{[]string{"TestRuntimeHooks"}, "^(TestRuntimeHooks)$"},
		{[]string{"TestA/x", "TestB/y"}, "^(TestA|TestB)$"},
	} {
		if got := skipPattern(c.tests); got != c.want {
			t.Errorf("skipPattern(%q) = %q, want %q", c.tests, got, c.want)
		}
	}
}

// TestDiffLeaves: a lost subtest is listed, not its parents, so that a
// known entry for one subtest does not hide another.
func TestDiffLeaves(t *testing.T) {
	base := map[string]string{"T": "pass", "T/12": "pass", "T/12/Types": "pass", "T/12/Upsert": "pass", "U": "pass"}
	r := map[string]string{"T": "fail", "T/12": "fail", "T/12/Types": "fail", "T/12/Upsert": "pass", "U": "pass"}
	lost, gained, _ := diff(base, r)
	if len(lost) != 1 || lost[0] != "T/12/Types" || len(gained) != 0 {
		t.Fatalf("lost %q, gained %q; want lost [T/12/Types]", lost, gained)
	}
	r["T/12/Upsert"] = "fail"
	if lost, _, _ = diff(base, r); len(lost) != 2 {
		t.Fatalf("lost %q, want T/12/Types and T/12/Upsert", lost)
	}
}

// TestSchemaTypes: the schemas of a schema package, through a local base
// type too, and those with a composite id.
func TestSchemaTypes(t *testing.T) {
	dir := t.TempDir()
	src := `package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/mixin"
)

type base struct{ ent.Schema }

type User struct{ ent.Schema }

type Pet struct{ base }

type Like struct{ ent.Schema }

func (Like) Annotations() []schema.Annotation {
	return []schema.Annotation{field.ID("user_id", "pet_id")}
}

type TimeMixin struct{ mixin.Schema }
`
	if err := os.WriteFile(filepath.Join(dir, "s.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	types, _, composite, err := schemaTypes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(types) != 3 || types["User"] != "Schema" || types["Pet"] != "base" || types["Like"] != "Schema" {
		t.Errorf("types %v, want User (Schema), Pet (base), Like (Schema)", types)
	}
	if len(composite) != 1 || !composite["Like"] {
		t.Errorf("composite %v, want Like", composite)
	}
}
