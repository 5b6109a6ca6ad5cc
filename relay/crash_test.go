package relay

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// The crash child's environment: the dialect and DSN of the database to
// relay from.
const (
	envCrashDialect = "HERALD_RELAY_CRASH_DIALECT"
	envCrashDSN     = "HERALD_RELAY_CRASH_DSN"
)

// crashChildLease is the child relay's lease: what the parent waits out.
const crashChildLease = 2 * time.Second

// TestCrashChild is the relay process TestCrashBetweenDeliveryAndMark
// kills: it leases a batch, "delivers" it (printing each event id), then
// hangs before the mark until it is killed. It does nothing unless started
// by that test.
func TestCrashChild(t *testing.T) {
	dialect, dsn := os.Getenv(envCrashDialect), os.Getenv(envCrashDSN)
	if dsn == "" {
		t.Skip("the crash test's child process; run by TestCrashBetweenDeliveryAndMark")
	}
	db, err := openDB(driverOf(envelope.Dialect(dialect)), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hang := make(chan struct{}) // never closed: the process dies first
	d := &batchFunc{fn: func(es []*envelope.Event) []error {
		for _, e := range es {
			fmt.Printf("delivered %s\n", e.ID)
		}
		fmt.Println("ready")
		<-hang
		return nil
	}}
	r, err := New(db, d, Config{Name: "doomed", Lease: crashChildLease, DeliveryTimeout: crashChildLease / 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-hang
}

func TestCrashBetweenDeliveryAndMark(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		var written []*envelope.Event
		for i := range 30 {
			written = append(written, e.enqueue(t, msg("crash", fmt.Sprintf("k%d", i%3), i))...)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envCrashDialect+"="+string(e.d), envCrashDSN+"="+e.dsn)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var delivered []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				break
			}
			if id, ok := strings.CutPrefix(line, "delivered "); ok {
				delivered = append(delivered, id)
			}
		}
		// The child has delivered its batch and not marked it: kill it.
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if len(delivered) != 3 { // one per key: the batch holds each key's head
			t.Fatalf("the child delivered %d events before it was killed, want 3", len(delivered))
		}
		if n := e.count(t, "published_at IS NOT NULL"); n != 0 {
			t.Fatalf("%d events marked published by a relay killed before its mark", n)
		}

		rec := &recorder{}
		r := e.newRelay(t, rec, Config{Name: "survivor"})
		start(t, r)
		testkit.Eventually(t, time.Minute, func() bool { return rec.count() >= len(written) }, "every event delivered after the crash")
		ids := rec.ids()
		for _, ev := range written {
			if ids[ev.ID] != 1 {
				t.Fatalf("event %d delivered %d times by the survivor", ev.Sequence, ids[ev.ID])
			}
		}
		// The child's batch was delivered again, by the survivor.
		for _, id := range delivered {
			if ids[uuid.MustParse(id)] != 1 {
				t.Fatalf("event %s, delivered by the killed relay, was not delivered again", id)
			}
		}
		testkit.Eventually(t, time.Minute, func() bool { return e.count(t, "published_at IS NULL") == 0 }, "all marked")
	})
}
