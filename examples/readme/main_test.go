package main

import (
	"os"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/testkit"
)

// README.md quotes this program from its imports to its end, verbatim.
func TestREADMEQuotesThisFile(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "import (")
	if i < 0 {
		t.Fatal("main.go has no import block")
	}
	quoted := "```go\npackage main\n\n" + string(src[i:]) + "```\n"
	if !strings.Contains(string(readme), quoted) {
		t.Fatalf("README.md does not quote examples/readme/main.go from its imports on; paste this block into README.md:\n%s", quoted)
	}
}

// The README's example runs as written on SQLite (a file in the working
// directory)...
func TestREADMEExampleSQLite(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("DATABASE_URL", "")
	main()
	main() // and again on the same file: the table exists, Migrate is idempotent
}

// ...and on PostgreSQL with DATABASE_URL set.
func TestREADMEExamplePostgres(t *testing.T) {
	_, dsn := testkit.Postgres(t)
	t.Setenv("DATABASE_URL", dsn)
	main()
}
