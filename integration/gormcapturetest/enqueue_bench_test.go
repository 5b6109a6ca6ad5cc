package gormcapture_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// BenchmarkEnqueue: in the caller's transaction, a GORM Create alone
// (plain, on a database without the plugin), the Create plus one Enqueue
// with an ordering key, and the Create plus a hand-written INSERT into the
// outbox table — alternated in one run; ratios are to plain.
//
//	go test -run '^$' -bench 'BenchmarkEnqueue$' -benchtime 2000x ./gormcapturetest/
func BenchmarkEnqueue(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.name, func(b *testing.B) {
			plain, db, _ := pluginPair(b, d.dialect)
			now := "now()"
			if d.dialect == envelope.SQLite {
				now = "strftime('%Y-%m-%dT%H:%M:%fZ')"
			}
			hand := `INSERT INTO herald_outbox (id, topic, payload, headers, ordering_key, created_at) VALUES (?, ?, ?, '{}', ?, ` + now + `)`
			run := func(db *gorm.DB, i int, extra func(tx *gorm.DB) error) {
				must(b, db.Transaction(func(tx *gorm.DB) error {
					if err := tx.Create(&BenchRow{Name: "n", Status: "new", Amount: i}).Error; err != nil {
						return err
					}
					return extra(tx)
				}))
			}
			none := func(*gorm.DB) error { return nil }
			enqueue := func(i int) func(tx *gorm.DB) error {
				return func(tx *gorm.DB) error {
					_, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "orders.created", Payload: map[string]any{"id": i, "status": "new"}, OrderingKey: fmt.Sprint("order:", i%100)})
					return err
				}
			}
			handWritten := func(i int) func(tx *gorm.DB) error {
				return func(tx *gorm.DB) error {
					id, _ := uuid.NewV7()
					return tx.Exec(hand, id.String(), "orders.created", fmt.Sprintf(`{"id":%d,"status":"new"}`, i), fmt.Sprint("order:", i%100)).Error
				}
			}
			for i := range 50 {
				run(plain, i, none)
				run(db, i, enqueue(i))
				run(db, i, handWritten(i))
			}
			var tp, te, th time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s := time.Now()
				run(plain, i, none)
				m1 := time.Now()
				run(db, i, enqueue(i))
				m2 := time.Now()
				run(db, i, handWritten(i))
				tp, te, th = tp+m1.Sub(s), te+m2.Sub(m1), th+time.Since(m2)
			}
			n := float64(b.N)
			b.ReportMetric(float64(tp.Nanoseconds())/n, "plain-ns/op")
			b.ReportMetric(float64(te.Nanoseconds())/n, "enqueue-ns/op")
			b.ReportMetric(float64(th.Nanoseconds())/n, "hand-ns/op")
			b.ReportMetric(float64(te)/float64(tp), "enqueue-ratio")
			b.ReportMetric(float64(th)/float64(tp), "hand-ratio")
		})
	}
}

// BenchmarkEnqueueMany: EnqueueMany of 1000 events (50 ordering keys) per
// transaction on PostgreSQL, beside the floor: a bare multi-row insert of
// the same rows with one INSERT … SELECT FROM unnest(…) in a transaction.
// Reports events per second of each, the ratio of their total times, and
// the median of the per-iteration ratios (robust to a load spike hitting
// one side).
//
//	go test -run '^$' -bench 'BenchmarkEnqueueMany' -benchtime 100x ./gormcapturetest/
func BenchmarkEnqueueMany(b *testing.B) {
	const n = 1000
	db, sqlDB := openDB(b, envelope.Postgres, nil)
	must(b, db.Use(gormcapture.New(gormcapture.Config{})))
	ms := make([]envelope.Message, n)
	for i := range ms {
		ms[i] = envelope.Message{Topic: "orders.created", Payload: map[string]any{"id": i, "status": "new", "fee": "12.50"}, OrderingKey: fmt.Sprint("order:", i%50)}
	}
	bare := func() {
		ids, topics, payloads, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		for i := range ids {
			id, _ := uuid.NewV7()
			ids[i], topics[i], keys[i] = id.String(), "orders.created", fmt.Sprint("order:", i%50)
			payloads[i] = fmt.Sprintf(`{"fee":"12.50","id":%d,"status":"new"}`, i)
		}
		tx, err := sqlDB.Begin()
		must(b, err)
		_, err = tx.Exec(`INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at)
			SELECT u.id, u.topic, u.payload, u.okey, now() FROM unnest($1::uuid[], $2::text[], $3::json[], $4::text[]) AS u(id, topic, payload, okey)`,
			ids, topics, payloads, keys)
		must(b, err)
		must(b, tx.Commit())
	}
	many := func() {
		must(b, db.Transaction(func(tx *gorm.DB) error {
			_, err := gormcapture.EnqueueMany(tx, ms)
			return err
		}))
	}
	for range 3 {
		bare()
		many()
	}
	var tb, tm time.Duration
	var ratios []float64
	b.ResetTimer()
	for b.Loop() {
		s := time.Now()
		bare()
		m := time.Now()
		many()
		e := time.Now()
		tb, tm = tb+m.Sub(s), tm+e.Sub(m)
		ratios = append(ratios, float64(e.Sub(m))/float64(m.Sub(s)))
	}
	b.ReportMetric(float64(b.N*n)/tm.Seconds(), "enqueue-ev/s")
	b.ReportMetric(float64(b.N*n)/tb.Seconds(), "bare-ev/s")
	b.ReportMetric(float64(tm)/float64(tb), "ratio")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
}
