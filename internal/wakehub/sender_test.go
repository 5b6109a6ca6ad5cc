package wakehub

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestSenderCoalesces: Signal never blocks, and topics signalled while a
// publish is in flight go out once each in the next one.
func TestSenderCoalesces(t *testing.T) {
	t.Parallel()
	calls := make(chan []string, 10)
	block := make(chan struct{})
	first := true
	s := NewSender(func(_ context.Context, topics []string) error {
		calls <- slices.Clone(topics)
		if first {
			first = false
			<-block
		}
		return nil
	}, time.Minute, Options{})
	defer s.Close()
	if err := s.Signal([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	if got := <-calls; !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first publish %v", got)
	}
	for range 100 { // the publisher is blocked: none of these may block
		_ = s.Signal([]string{"x", "y"})
		_ = s.Signal([]string{"y", "z"})
	}
	close(block)
	if got := <-calls; !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("coalesced publish %v, want [x y z] once each", got)
	}
	select {
	case extra := <-calls:
		t.Fatalf("signals not coalesced: extra publish %v", extra)
	default:
	}
}
