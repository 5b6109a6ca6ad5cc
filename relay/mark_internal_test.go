package relay

import (
	"context"
	"errors"
	"testing"
)

func TestRetryMark(t *testing.T) {
	t.Parallel()
	busy := errors.New("database is locked")
	calls := 0
	err := retryMark(context.Background(), func() error {
		calls++
		if calls < 3 {
			return busy
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("retryMark = %v after %d calls, want success on the third", err, calls)
	}

	calls = 0
	err = retryMark(context.Background(), func() error { calls++; return busy })
	if !errors.Is(err, busy) || calls != len(markRetries)+1 {
		t.Fatalf("retryMark = %v after %d calls, want the error after %d", err, calls, len(markRetries)+1)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	err = retryMark(ctx, func() error { calls++; return busy })
	if !errors.Is(err, busy) || calls != 1 {
		t.Fatalf("retryMark with its timeout gone = %v after %d calls, want one try", err, calls)
	}
}
