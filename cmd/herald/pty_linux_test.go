package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
	"github.com/heraldgo/herald/internal/testkit"
)

// openPTY opens a pseudo-terminal pair through /dev/ptmx.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("TIOCSPTLCK: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("TIOCGPTN: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// onTerminal runs the binary with a terminal as its stdin, stdout and
// stderr, answers its question with answer once the question is on the
// screen, and returns the screen and the exit status.
func onTerminal(t *testing.T, env []string, answer string, args ...string) (string, int) {
	t.Helper()
	m, s := openPTY(t)
	defer m.Close()
	cmd := exec.Command(herald(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var (
		mu     sync.Mutex
		screen bytes.Buffer
	)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return // EIO once the process has closed the terminal
			}
		}
	}()
	text := func() string { mu.Lock(); defer mu.Unlock(); return screen.String() }
	testkit.Eventually(t, time.Minute, func() bool { return strings.Contains(text(), "Go ahead? [y/N]") }, "no question on the terminal:\n%s", text())
	if _, err := m.WriteString(answer + "\n"); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	// The process has exited; its last lines may still be in the
	// terminal's buffer: read until the master reports EIO (no writer
	// left), not merely until something is on the screen.
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatalf("the terminal was not drained after the process exited:\n%s", text())
	}
	return text(), code
}

// TestDiscardAsksOnATerminal: on a terminal, herald dead discard shows
// what it will delete and asks; "n" deletes nothing (exit 1), "y" deletes.
func TestDiscardAsksOnATerminal(t *testing.T) {
	dsn := testkit.ModerncDSN(testkit.SQLitePath(t))
	env := []string{"HERALD_DSN=" + dsn}
	mustRun(t, env, "migrate", "up")
	db, err := migrate.Open(envelope.SQLite, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	writeEvents(t, db, envelope.SQLite,
		envelope.Message{Topic: "shop.order.placed", Payload: 1},
		envelope.Message{Topic: "shop.order.paid", Payload: 2})
	killAll(t, db)

	screen, code := onTerminal(t, env, "n", "dead", "discard", "--all")
	if code != 1 || !strings.Contains(screen, "2 dead letter(s) in herald_outbox match every dead letter") ||
		!strings.Contains(screen, "shop.order.paid") || !strings.Contains(screen, "not confirmed; nothing done") {
		t.Fatalf("answered n: exit %d\n%s", code, screen)
	}
	if n := countDead(t, db); n != 2 {
		t.Fatalf("dead letters after answering n: %d, want 2", n)
	}
	screen, code = onTerminal(t, env, "y", "dead", "discard", "--all")
	if code != 0 || !strings.Contains(screen, "discarded 2 of 2") || !strings.Contains(screen, "discarded 2 dead letter(s)") {
		t.Fatalf("answered y: exit %d\n%s", code, screen)
	}
	if n := countDead(t, db); n != 0 {
		t.Fatalf("dead letters after answering y: %d, want 0", n)
	}
}
