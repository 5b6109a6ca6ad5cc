package relaybench_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgo/herald/integration/relaybench"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestDrainsDeliverEverything checks the benchmark's own machinery on a
// small table: each drain marks every event published.
func TestDrainsDeliverEverything(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	for _, mode := range []string{"bare", "relay", "relay-batch"} {
		for _, keys := range []int{0, 7} {
			if err := relaybench.Reset(ctx, db, "herald_outbox"); err != nil {
				t.Fatal(err)
			}
			if err := relaybench.Fill(ctx, db, "herald_outbox", 500, keys); err != nil {
				t.Fatal(err)
			}
			var err error
			switch mode {
			case "bare":
				_, err = relaybench.DrainBare(ctx, db, "herald_outbox", 500, 100, 2)
			default:
				_, err = relaybench.DrainRelays(ctx, db, "herald_outbox", 500, 100, 2, mode == "relay-batch")
			}
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			var left int
			if err := db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE published_at IS NULL`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Fatalf("%s, %d keys: %d events left", mode, keys, left)
			}
		}
	}
}

func TestLeaseAndMarkCostAndCounting(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.Postgres(t)
	var n atomic.Int64
	db, err := relaybench.OpenCounting(dsn, &n)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := relaybench.Reset(ctx, db, "herald_outbox"); err != nil {
		t.Fatal(err)
	}
	if err := relaybench.Fill(ctx, db, "herald_outbox", 3000, 0); err != nil {
		t.Fatal(err)
	}
	if n.Load() < 3 {
		t.Fatalf("counted %d statements", n.Load())
	}
	lease, mark, err := relaybench.LeaseAndMarkCost(ctx, db, "herald_outbox", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if lease.WALRecords == 0 || mark.WALRecords == 0 {
		t.Fatalf("costs: %+v %+v", lease, mark)
	}
	t.Logf("per event: lease %.1f WAL records, mark %.1f", float64(lease.WALRecords)/1000, float64(mark.WALRecords)/1000)
}

func TestPollsIn(t *testing.T) {
	t.Parallel()
	// Polls in one hour on an idle table with the defaults, ramp included.
	noWake := relaybench.PollsIn(time.Hour, relay.DefaultMinPollInterval, relay.DefaultMaxPollInterval, relay.DefaultPollMultiplier)
	wake := relaybench.PollsIn(time.Hour, relay.DefaultMinPollInterval, relay.DefaultMaxPollIntervalWithWakeup, relay.DefaultPollMultiplier)
	if noWake != 726 || wake != 72 {
		t.Fatalf("polls per idle hour: %d without a wakeup, %d with one", noWake, wake)
	}
	if got := relaybench.PollsIn(time.Second, 250*time.Millisecond, 250*time.Millisecond, 1); got != 5 {
		t.Fatalf("fixed 250ms for 1s: %d polls", got)
	}
}

// BenchmarkDrain drains b.N pending events (unordered, a ~250-byte
// payload) per run: by relays with a no-op delivery.Func, by relays with a
// no-op BatchDelivery, and by the bare SQL lease-and-mark loop, at batch
// sizes 100 and 1000 with one and two workers. It reports events/s.
//
//	go test -run '^$' -bench Drain -benchtime 20000x ./integration/relaybench
func BenchmarkDrain(b *testing.B) {
	for _, mode := range []string{"bare", "relay", "relay-batch"} {
		for _, batch := range []int{100, 1000} {
			for _, workers := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/batch=%d/workers=%d", mode, batch, workers), func(b *testing.B) {
					db, _ := testkit.Postgres(b)
					ctx := context.Background()
					if err := relaybench.Reset(ctx, db, "herald_outbox"); err != nil {
						b.Fatal(err)
					}
					if err := relaybench.Fill(ctx, db, "herald_outbox", b.N, 0); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					var elapsed time.Duration
					var err error
					switch mode {
					case "bare":
						elapsed, err = relaybench.DrainBare(ctx, db, "herald_outbox", b.N, batch, workers)
					default:
						elapsed, err = relaybench.DrainRelays(ctx, db, "herald_outbox", b.N, batch, workers, mode == "relay-batch")
					}
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
				})
			}
		}
	}
}
