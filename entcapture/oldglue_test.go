package entcapture_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOldGlueNamesTheFix: glue generated before the generated code's
// names moved to entcapturert (testdata/oldglue) does not build, and the
// compiler's message names the fix: re-run go generate.
func TestOldGlueNamesTheFix(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "build", "./testdata/oldglue").CombinedOutput()
	if err == nil {
		t.Fatal("glue from an older entcapturegen builds: a user upgrading herald would not learn to re-run go generate")
	}
	if !strings.Contains(string(out), "cannot use generic type entcapture.Schema[GlueFromAnOlderEntcapturegen_RerunGoGenerate any] without instantiation") {
		t.Errorf("go build of old glue: %v\n%s\nwant the message naming the fix (GlueFromAnOlderEntcapturegen_RerunGoGenerate)", err, out)
	}
}
