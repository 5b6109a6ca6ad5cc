package entcapture_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoCodeGenerator: the runtime package, and the smallest ent + pgx
// service capturing its writes (testdata/entpgx), link no part of ent's
// code generator; the entc extension lives in entcapturegen, which only
// entc.go imports.
func TestNoCodeGenerator(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{".", "./testdata/entpgx"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "entgo.io/ent/entc") || strings.HasPrefix(dep, "golang.org/x/tools") ||
				strings.HasPrefix(dep, "github.com/heraldgo/herald/entcapture/entcapturegen") || dep == "go/types" || dep == "testing" {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
