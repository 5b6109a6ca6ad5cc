package wakehub

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/testkit"
)

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var retryIn = regexp.MustCompile(`failures_in_a_row=(\d+) retry_in=(\S+)`)

// TestFailingRightAfterReadyBacksOff: a session that subscribes and then
// fails at once (a broker that accepts the subscription and refuses every
// fetch) counts as a failure in a row — the back-off doubles and the fifth
// is an ERROR — while one that stayed subscribed for StableAfter starts a
// new count at MinBackoff.
func TestFailingRightAfterReadyBacksOff(t *testing.T) {
	t.Parallel()
	logs := &logBuf{}
	const stable = 200 * time.Millisecond
	var sessions atomic.Int32
	h := New(func(ctx context.Context, ready func(), _ func([]string)) error {
		n := sessions.Add(1)
		ready()
		if n == 7 { // the seventh stays subscribed for a while, then fails
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(2 * stable):
			}
		}
		return errors.New("fetch refused")
	}, Options{
		Name: "test", Logger: slog.New(slog.NewTextHandler(logs, nil)),
		MinBackoff: time.Millisecond, MaxBackoff: time.Second, StableAfter: stable,
	})
	defer h.Close()
	var polls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.Listen(ctx, func([]string) { polls.Add(1) }) }()

	testkit.Eventually(t, 20*time.Second, func() bool { return sessions.Load() >= 8 }, "sessions not retried: %d; logs:\n%s", sessions.Load(), logs)
	out := logs.String()
	var got []string
	for _, m := range retryIn.FindAllStringSubmatch(out, 7) {
		got = append(got, m[1]+"@"+m[2])
	}
	want := []string{"1@1ms", "2@2ms", "3@4ms", "4@8ms", "5@16ms", "6@32ms", "1@1ms"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("failures in a row @ back-off: %v, want %v (sessions failing right after ready must count; one subscribed for StableAfter starts anew); logs:\n%s", got, want, out)
	}
	if !strings.Contains(out, "level=ERROR") || strings.Count(out, "level=ERROR") < 2 {
		t.Fatalf("the fifth and sixth failures in a row are not ERRORs; logs:\n%s", out)
	}
}
