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

// BenchmarkPayloadColumn compares the outbox at schema version 1 (payload
// and headers JSONB) with version 2 (JSON) on PostgreSQL: Write of one
// event and of 1000, each a BeforeAndAfter envelope of a ten-column row
// (about 600 bytes), in its own transaction.
//
//	go test -run='^$' -bench=BenchmarkPayloadColumn -count=5 ./envelope
func BenchmarkPayloadColumn(b *testing.B) {
	row := func(i int, status string) map[string]any {
		return map[string]any{"id": i, "status": status, "fee": "12.50", "reader_id": 3, "title": "The Name of the Rose",
			"isbn": "978-0-15-144647-6", "due_at": "2026-10-20T12:00:00Z", "renewals": 1, "branch": "central", "notes": "returned via drop box"}
	}
	for _, v := range []int{1, 2} {
		for _, n := range []int{1, 1000} {
			b.Run("version"+itoa(v)+"/"+itoa(n), func(b *testing.B) {
				db, _ := testkit.Postgres(b)
				ctx := context.Background()
				if err := envelope.MigrateTo(ctx, db, envelope.Postgres, "", v); err != nil {
					b.Fatal(err)
				}
				w, _ := envelope.NewWriter(envelope.Postgres, "")
				ms := make([]envelope.Message, n)
				for i := range ms {
					ms[i] = envelope.Message{Topic: "library.loan.updated", OrderingKey: "library.Loan:" + itoa(i),
						Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
						Payload: map[string]any{"model": "library.Loan", "operation": "updated", "pk": i, "changed": []string{"status"},
							"before": row(i, "lent"), "after": row(i, "returned"), "occurred_at": "2026-10-06T12:00:00Z"}}
				}
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
