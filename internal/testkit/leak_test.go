package testkit_test

import (
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/testkit"
)

//go:noinline
func parkedOn(ch chan struct{}) { <-ch }

// TestLeaksFindsAGoroutineLeftRunning: a goroutine started after the
// snapshot and still blocked is a leak, named with its stack; once it ends,
// none is left; an IgnoreAny rule naming its function ignores it.
func TestLeaksFindsAGoroutineLeftRunning(t *testing.T) {
	before := testkit.IgnoreRunning()
	ch := make(chan struct{})
	done := make(chan struct{})
	go func() { parkedOn(ch); close(done) }()

	leaks := testkit.Leaks(before)
	if len(leaks) != 1 {
		t.Fatalf("leaks: %d, want 1: %v", len(leaks), testkit.LeakError(leaks))
	}
	const fn = "github.com/heraldgo/herald/internal/testkit_test.parkedOn"
	if leaks[0].Funcs[0] != "runtime.gopark" && leaks[0].Funcs[0] != fn || !strings.Contains(leaks[0].State, "chan receive") {
		t.Errorf("leak: state %q, funcs %q", leaks[0].State, leaks[0].Funcs)
	}
	if err := testkit.LeakError(leaks); err == nil || !strings.Contains(err.Error(), "parkedOn") {
		t.Errorf("LeakError: %v, want the stack naming parkedOn", err)
	}
	if l := testkit.Leaks(before, testkit.IgnoreAny(fn)); len(l) != 0 {
		t.Errorf("IgnoreAny(%s) left %d: %v", fn, len(l), testkit.LeakError(l))
	}
	close(ch)
	<-done
	if l := testkit.Leaks(before); len(l) != 0 {
		t.Errorf("after the goroutine ended: %v", testkit.LeakError(l))
	}
}
