package envelope_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// BenchmarkWrite measures one Write in its own transaction: a single event,
// and 1000 events in one call (one multi-row INSERT).
//
//	go test -run='^$' -bench=BenchmarkWrite -benchtime=2s ./envelope
func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct {
		name string
		d    envelope.Dialect
		open func(b *testing.B) *sql.DB
	}{
		{"sqlite", envelope.SQLite, func(b *testing.B) *sql.DB {
			db, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(b)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			return db
		}},
		{"postgres", envelope.Postgres, func(b *testing.B) *sql.DB { db, _ := testkit.Postgres(b); return db }},
	} {
		for _, n := range []int{1, 1000} {
			b.Run(c.name+"/"+itoa(n), func(b *testing.B) {
				db := c.open(b)
				ctx := context.Background()
				if err := envelope.Migrate(ctx, db, c.d, ""); err != nil {
					b.Fatal(err)
				}
				w, _ := envelope.NewWriter(c.d, "")
				ms := make([]envelope.Message, n)
				for i := range ms {
					ms[i] = envelope.Message{Topic: "bench.topic", Payload: map[string]any{"id": i, "name": "row", "fee": "12.50"}, OrderingKey: "k:" + itoa(i%50)}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := w.Write(ctx, tx, ms); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
