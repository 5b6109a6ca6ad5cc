package testkit

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The goroutine-leak check of Main and of internal/deliverytest, on the
// standard library alone: the tests of the core packages import testkit, and
// go mod tidy keeps in the go.sum of every program that imports those
// packages the checksums of what their tests import (go.uber.org/goleak
// was the one module there that such a program does not build with). It
// follows goleak's rules: a goroutine of the testing package or of
// os/signal, or one in a cgo call, is not a leak; the others are, unless
// named by an ignore rule; it retries while goroutines wind down.

// Goroutine is one goroutine of a stack dump.
type Goroutine struct {
	ID    int
	State string   // "chan receive", "select", "IO wait, 2 minutes", …
	Funcs []string // the functions of its stack, innermost first
	Stack string   // the goroutine's stack as runtime.Stack prints it
}

// LeakRule says a goroutine is not a leak.
type LeakRule func(Goroutine) bool

// IgnoreTop ignores goroutines whose innermost function is fn.
func IgnoreTop(fn string) LeakRule {
	return func(g Goroutine) bool { return len(g.Funcs) > 0 && g.Funcs[0] == fn }
}

// IgnoreAny ignores goroutines with fn anywhere in their stack.
func IgnoreAny(fn string) LeakRule {
	return func(g Goroutine) bool {
		for _, f := range g.Funcs {
			if f == fn {
				return true
			}
		}
		return false
	}
}

// IgnoreRunning ignores the goroutines running now (but the caller), for a
// check of what a piece of code leaves behind.
func IgnoreRunning() LeakRule {
	ids := map[int]bool{}
	for _, g := range goroutines() {
		ids[g.ID] = true
	}
	return func(g Goroutine) bool { return ids[g.ID] }
}

// Leaks returns the goroutines other than the caller's that no rule and no
// standard rule ignores, waiting up to about two seconds for them to end.
func Leaks(rules ...LeakRule) []Goroutine {
	var found []Goroutine
	delay := time.Millisecond
	for deadline := time.Now().Add(2 * time.Second); ; {
		found = found[:0]
		self := currentID()
		for _, g := range goroutines() {
			if g.ID != self && !standard(g) && !anyRule(rules, g) {
				found = append(found, g)
			}
		}
		if len(found) == 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(delay)
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// LeakError is nil when leaks is empty, else an error listing the stacks.
func LeakError(leaks []Goroutine) error {
	if len(leaks) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "found %d unexpected goroutine(s):\n", len(leaks))
	for _, g := range leaks {
		b.WriteString(g.Stack)
		b.WriteString("\n\n")
	}
	return fmt.Errorf("%s", strings.TrimRight(b.String(), "\n"))
}

func anyRule(rules []LeakRule, g Goroutine) bool {
	for _, r := range rules {
		if r(g) {
			return true
		}
	}
	return false
}

// standard: what goleak never reports either — the testing package's own
// goroutines waiting for tests, os/signal's, and cgo calls in progress.
func standard(g Goroutine) bool {
	if len(g.Funcs) == 0 {
		return true
	}
	switch g.Funcs[0] {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		return strings.HasPrefix(g.State, "chan receive")
	case "os/signal.signal_recv", "os/signal.loop":
		return true
	}
	for _, f := range g.Funcs {
		switch f {
		case "runtime.ensureSigM", "runtime.ReadTrace":
			return true
		case "runtime.goexit":
			if strings.HasPrefix(g.State, "syscall") {
				return true
			}
		}
	}
	return false
}

func currentID() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _ := parseHeader(string(bytes.SplitN(buf, []byte("\n"), 2)[0]))
	return id
}

// goroutines parses runtime.Stack(all) into goroutines.
func goroutines() []Goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []Goroutine
	for _, block := range strings.Split(strings.TrimSpace(string(buf)), "\n\n") {
		lines := strings.Split(block, "\n")
		id, state := parseHeader(lines[0])
		if id == 0 {
			continue
		}
		g := Goroutine{ID: id, State: state, Stack: block}
		for _, l := range lines[1:] {
			if l == "" || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by ") {
				continue
			}
			if i := strings.LastIndex(l, "("); i > 0 {
				l = l[:i]
			}
			g.Funcs = append(g.Funcs, l)
		}
		out = append(out, g)
	}
	return out
}

// parseHeader reads "goroutine 7 [chan receive, 2 minutes]:".
func parseHeader(line string) (id int, state string) {
	rest, ok := strings.CutPrefix(line, "goroutine ")
	if !ok {
		return 0, ""
	}
	num, rest, ok := strings.Cut(rest, " [")
	if !ok {
		return 0, ""
	}
	id, err := strconv.Atoi(num)
	if err != nil {
		return 0, ""
	}
	state, _, _ = strings.Cut(rest, "]")
	return id, state
}
