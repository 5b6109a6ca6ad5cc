package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

// BenchmarkTimeToDeadLetter measures, with the relay's defaults, how long
// an event whose receiver always fails takes from its write to its dead
// letter (README, "Running herald in production"): MaxAttempts failures
// with backoff between them, found by polls whose interval grows while
// nothing succeeds. With a Wakeup, MaxPollInterval defaults to a minute,
// and a retry falling due is not signalled, so the polls find it later.
//
//	go test -run='^$' -bench=BenchmarkTimeToDeadLetter -benchtime=1x -count=3 ./integration/
func BenchmarkTimeToDeadLetter(b *testing.B) {
	for _, c := range []struct {
		name string
		wake bool
	}{{"polling", false}, {"wakeup", true}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				db, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(b)))
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if err := envelope.Migrate(ctx, db, envelope.SQLite, ""); err != nil {
					b.Fatal(err)
				}
				dead := make(chan time.Time, 1)
				cfg := relay.Config{Logger: quiet, Observer: relay.ObserverFuncs{
					OnDeadLettered: func(context.Context, relay.DeadLettered) { dead <- time.Now() },
				}}
				var w *wakeup.InProcess
				if c.wake {
					w = wakeup.NewInProcess()
					cfg.Wakeup = w
				}
				r, err := relay.New(db, delivery.Func(func(context.Context, *envelope.Event) error {
					return errors.New("receiver down")
				}), cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Start(ctx); err != nil {
					b.Fatal(err)
				}
				wr, _ := envelope.NewWriter(envelope.SQLite, "")
				start := time.Now()
				if _, err := wr.Write(ctx, db, []envelope.Message{{Topic: "t", OrderingKey: "k", Payload: 1}}); err != nil {
					b.Fatal(err)
				}
				if w != nil {
					_ = w.Signal(ctx, []string{"t"})
				}
				at := <-dead
				b.ReportMetric(at.Sub(start).Seconds(), "s-to-dead-letter")
				_ = r.Stop(ctx)
				if w != nil {
					_ = w.Close()
				}
				_ = db.Close()
			}
		})
	}
}
