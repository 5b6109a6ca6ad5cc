package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/outbox"
)

// BenchmarkOverhead: a handler that writes its message's effect in a
// transaction, bare and through the inbox, one message per transaction
// and batches of 100 (the effect of a batch is one multi-row insert, its
// ids one statement more). ns/msg is what one message costs.
//
//	go test -run '^$' -bench BenchmarkOverhead -benchtime 2s -count 3 ./inbox/
func BenchmarkOverhead(b *testing.B) {
	for _, c := range dbCases {
		b.Run(c.name, func(b *testing.B) {
			db := openBench(b, c)
			d := c.d
			ctx := context.Background()
			in, err := inbox.New(ctx, db, inbox.Config{Consumer: "bench", Dialect: d})
			if err != nil {
				b.Fatal(err)
			}
			one := `INSERT INTO effects (id) VALUES (` + outbox.Placeholder(d, 1) + `)`
			many := `INSERT INTO effects (id) SELECT value FROM json_each(?)`
			if d == envelope.Postgres {
				many = `INSERT INTO effects (id) SELECT json_array_elements_text($1::json)`
			}
			// herald's ids are UUIDv7: time-ordered, so each batch's rows
			// land at the end of the primary key, as in production.
			next := func() string { return uuid.Must(uuid.NewV7()).String() }
			b.Run("single/bare", func(b *testing.B) {
				for b.Loop() {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tx.ExecContext(ctx, one, next()); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
			})
			b.Run("single/inbox", func(b *testing.B) {
				for b.Loop() {
					id := next()
					if _, err := in.Handle(ctx, inbox.Message{ID: id}, func(ctx context.Context, tx *sql.Tx) error {
						_, err := tx.ExecContext(ctx, one, id)
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
			})
			batch := func() ([]inbox.Message, string) {
				ms := make([]inbox.Message, 100)
				ids := make([]string, 100)
				for i := range ms {
					ids[i] = next()
					ms[i] = inbox.Message{ID: ids[i]}
				}
				j, _ := json.Marshal(ids)
				return ms, string(j)
			}
			b.Run("batch100/bare", func(b *testing.B) {
				for b.Loop() {
					_, j := batch()
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tx.ExecContext(ctx, many, j); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(100*b.N), "ns/msg")
			})
			b.Run("batch100/inbox", func(b *testing.B) {
				for b.Loop() {
					ms, _ := batch()
					if _, err := in.HandleBatch(ctx, ms, func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
						ids := make([]string, len(fresh))
						for i, m := range fresh {
							ids[i] = m.ID
						}
						j, _ := json.Marshal(ids)
						_, err := tx.ExecContext(ctx, many, string(j))
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(100*b.N), "ns/msg")
			})
		})
	}
}
