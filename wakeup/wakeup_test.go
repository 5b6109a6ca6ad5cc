package wakeup_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/wakeup"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestInProcess(t *testing.T) {
	t.Parallel()
	w := wakeup.NewInProcess()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	got := map[string]int{}
	listening := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(listening)
		done <- w.Listen(ctx, func(topics []string) {
			mu.Lock()
			defer mu.Unlock()
			for _, tp := range topics {
				got[tp]++
			}
		})
	}()
	<-listening
	// Signals sent before Listen registered are not seen; keep signalling
	// until the listener has seen one, from several goroutines at once.
	testkit.Eventually(t, 5*time.Second, func() bool {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); _ = w.Signal(ctx, []string{"a", "b"}) }()
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return got["a"] > 0 && got["b"] > 0
	}, "listener never saw a signal")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Listen returned %v after ctx ended", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := w.Signal(context.Background(), []string{"x"}); !errors.Is(err, wakeup.ErrClosed) {
		t.Fatalf("Signal after Close = %v", err)
	}
}

func TestInProcessCoalesces(t *testing.T) {
	t.Parallel()
	w := wakeup.NewInProcess()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan []string, 10)
	block := make(chan struct{})
	first := true
	ready := make(chan struct{})
	go func() {
		_ = w.Listen(ctx, func(topics []string) {
			if topics == nil {
				return // the subscription notice
			}
			slices.Sort(topics)
			calls <- topics
			if first {
				first = false
				<-block // busy while more signals arrive
			}
		})
	}()
	go func() {
		testkit.Eventually(t, 5*time.Second, func() bool {
			_ = w.Signal(ctx, []string{"warmup"})
			return len(calls) > 0
		}, "no signal")
		close(ready)
	}()
	<-ready
	<-calls // warmup, listener now blocked in fn
	for range 100 {
		_ = w.Signal(ctx, []string{"x", "y"})
		_ = w.Signal(ctx, []string{"y", "z"})
	}
	close(block)
	// All signals sent while busy arrive as one call, each topic once
	// (a late warmup may be folded in too).
	got := <-calls
	got = slices.DeleteFunc(got, func(s string) bool { return s == "warmup" })
	if !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("coalesced topics %v", got)
	}
	select {
	case extra := <-calls:
		if !slices.Equal(extra, []string{"warmup"}) {
			t.Fatalf("signals not coalesced: extra call %v", extra)
		}
	default:
	}
}

// TestListenSubscribed: Listen calls fn with nil topics once it is
// subscribed, so a listener can poll for what was signalled before; a
// signal sent after that notice is never lost.
func TestListenSubscribed(t *testing.T) {
	t.Parallel()
	w := wakeup.NewInProcess()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan []string, 4)
	go func() { _ = w.Listen(ctx, func(topics []string) { calls <- topics }) }()
	if first := <-calls; first != nil {
		t.Fatalf("first call %v, want the nil subscription notice", first)
	}
	if err := w.Signal(ctx, []string{"t"}); err != nil {
		t.Fatal(err)
	}
	if got := <-calls; !slices.Equal(got, []string{"t"}) {
		t.Fatalf("signal after the notice: %v", got)
	}
}

func TestCloseStopsListen(t *testing.T) {
	t.Parallel()
	w := wakeup.NewInProcess()
	done := make(chan error, 1)
	go func() { done <- w.Listen(context.Background(), func([]string) {}) }()
	_ = w.Close()
	if err := <-done; err != nil && !errors.Is(err, wakeup.ErrClosed) {
		t.Fatal(err)
	}
}

func TestTopics(t *testing.T) {
	t.Parallel()
	var ts wakeup.Topics
	ts.Add("b", "a", "b")
	ts.Add("a", "c")
	if !slices.Equal(ts.List(), []string{"b", "a", "c"}) || ts.Len() != 3 {
		t.Fatalf("Topics = %v", ts.List())
	}
}
