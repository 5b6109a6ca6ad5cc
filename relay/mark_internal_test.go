package relay

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
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

// TestAddDueCoversEveryRetry: the poll loop's wakes stay sorted, every due
// time added has a wake at or after it within the grid (never before: a
// wake before a retry's due time finds nothing), and due times denser
// than the grid — in any order, increasing as in an outage, or shuffled —
// keep at most one wake per grid step, not one per time added.
func TestAddDueCoversEveryRetry(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	const grid = 250 * time.Millisecond
	const span = 10 * time.Second
	rng := mrand.New(mrand.NewPCG(1, 2))
	increasing := make([]time.Time, 5000)
	for i := range increasing {
		increasing[i] = base.Add(span * time.Duration(i) / time.Duration(len(increasing)))
	}
	shuffled := slices.Clone(increasing)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for name, added := range map[string][]time.Time{"increasing": increasing, "shuffled": shuffled} {
		var dues []time.Time
		for _, d := range added {
			dues = addDue(dues, d, grid)
		}
		dues = addDue(dues, time.Time{}, grid)
		if !slices.IsSortedFunc(dues, time.Time.Compare) {
			t.Fatalf("%s: wakes not sorted", name)
		}
		for _, d := range added {
			i, _ := slices.BinarySearchFunc(dues, d, time.Time.Compare)
			if i == len(dues) || dues[i].Sub(d) > grid {
				t.Fatalf("%s: due time %s has no wake within %s after it", name, d.Sub(base), grid)
			}
		}
		if most := int(span/grid) + 1; len(dues) > most {
			t.Fatalf("%s: %d wakes for %d due times over %s; want at most %d, one per %s", name, len(dues), len(added), span, most, grid)
		}
	}
	// A wake keeps its due time's monotonic clock reading (time.Time's
	// String prints it as m=…): the loop's waits must not follow the wall
	// clock's jumps.
	if now := time.Now(); !strings.Contains(addDue(nil, now, grid)[0].String(), "m=") {
		t.Fatalf("the wake for %s lost its monotonic clock reading", now)
	}
}
