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
		t.Fatalf("README.md does not quote examples/mysql/main.go from its imports on; paste this block into README.md:\n%s", quoted)
	}
}

// The example runs as written on the machine's MariaDB (a database of the
// test's own; HERALD_MYSQL_DSN names another server).
func TestExampleOnMariaDB(t *testing.T) {
	_, dsn := testkit.MySQL(t)
	os.Args = []string{"mysql", "-dsn", dsn}
	main()
}
