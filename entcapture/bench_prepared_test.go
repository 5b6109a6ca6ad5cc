//go:build unix

package entcapture_test

import (
	"context"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/testkit"
)

// BenchmarkCreatePrepared: BenchmarkCreate on SQLite with a third side,
// the captured create with every statement unprepared (as before
// CaptureDriver prepared them), the three alternated in one loop. Besides
// wall time it reports each side's process CPU time (getrusage), less
// sensitive to a shared machine's scheduling: old-ratio, new-ratio (wall)
// and old-cpu-ratio, new-cpu-ratio, against the plain create.
//
//	go test -run '^$' -bench 'BenchmarkCreatePrepared' -benchtime 2000x ./entcapture/
func BenchmarkCreatePrepared(b *testing.B) {
	cpu := testkit.ProcessCPU
	for _, inTx := range []bool{true, false} {
		name := "sqlite/caller-tx"
		if !inTx {
			name = "sqlite/no-tx"
		}
		b.Run(name, func(b *testing.B) {
			open := func(ops []envelope.Operation, unprepared bool) *ent.Client {
				db := openDB(b, envelope.SQLite)
				drv := entcapture.Driver(entsql.OpenDB(entDialect(envelope.SQLite), db),
					entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: envelope.After, Operations: ops}}})
				if unprepared {
					entcapture.DisablePrepared(drv)
				}
				c := ent.NewClient(ent.Driver(drv))
				createSchema(b, func(ctx context.Context) error { return c.Schema.Create(ctx) })
				return c
			}
			cs := []*ent.Client{open([]envelope.Operation{envelope.Deleted}, false), open(nil, true), open(nil, false)}
			ctx := context.Background()
			create := func(c *ent.Client, i int) {
				if !inTx {
					c.Loan.Create().SetStatus("lent").SetDays(i).SetReturned(false).SaveX(ctx)
					return
				}
				tx, err := c.Tx(ctx)
				must(b, err)
				tx.Loan.Create().SetStatus("lent").SetDays(i).SetReturned(false).SaveX(ctx)
				must(b, tx.Commit())
			}
			for i := range 50 {
				for _, c := range cs {
					create(c, i)
				}
			}
			wall := make([]time.Duration, len(cs))
			used := make([]time.Duration, len(cs))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				for k, c := range cs {
					s, u := time.Now(), cpu()
					create(c, i)
					wall[k] += time.Since(s)
					used[k] += cpu() - u
				}
			}
			b.ReportMetric(float64(wall[0].Nanoseconds())/float64(b.N), "plain-ns/op")
			b.ReportMetric(float64(wall[1])/float64(wall[0]), "old-ratio")
			b.ReportMetric(float64(wall[2])/float64(wall[0]), "new-ratio")
			b.ReportMetric(float64(used[1])/float64(used[0]), "old-cpu-ratio")
			b.ReportMetric(float64(used[2])/float64(used[0]), "new-cpu-ratio")
		})
	}
}
