package gormcapture_test

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// Benchmarks compare a captured write with the same write on a database
// without the plugin, alternating the two in one run so that both see the
// same machine state; each reports both times and their ratio.
//
//	go test -run '^$' -bench . -benchtime 2000x ./gormcapture/

type BenchRow struct {
	ID      int64
	Name    string
	Status  string
	Amount  int
	Version int64
}

type pair struct {
	plain, captured *gorm.DB
	trunc           func() // empties the captured outbox
}

func benchPair(b *testing.B, d envelope.Dialect, mode envelope.PayloadMode) pair {
	b.Helper()
	plain, _ := openDB(b, d, nil)
	must(b, plain.AutoMigrate(&BenchRow{}))
	captured, _ := openDB(b, d, nil)
	must(b, captured.AutoMigrate(&BenchRow{}))
	p := gormcapture.New(gormcapture.Config{})
	must(b, captured.Use(p))
	must(b, p.Capture(&BenchRow{}, envelope.Options{Payload: mode}))
	trunc := func() { must(b, captured.Exec(`DELETE FROM herald_outbox`).Error) }
	if d == envelope.Postgres {
		trunc = func() { must(b, captured.Exec(`TRUNCATE herald_outbox`).Error) }
	}
	return pair{plain, captured, trunc}
}

// report records both sides' time per op and the ratio.
func report(b *testing.B, plain, captured time.Duration, n int) {
	b.ReportMetric(float64(plain.Nanoseconds())/float64(n), "plain-ns/op")
	b.ReportMetric(float64(captured.Nanoseconds())/float64(n), "captured-ns/op")
	b.ReportMetric(float64(captured)/float64(plain), "ratio")
}

// BenchmarkCreate: a single-row Create, After mode, in GORM's default
// transaction (BEGIN, INSERT, COMMIT) and in a caller's transaction.
func BenchmarkCreate(b *testing.B) {
	for _, d := range dialects {
		for _, inTx := range []bool{false, true} {
			name := d.name + "/default-tx"
			if inTx {
				name = d.name + "/caller-tx"
			}
			b.Run(name, func(b *testing.B) {
				bp := benchPair(b, d.dialect, envelope.After)
				create := func(db *gorm.DB, i int) {
					row := &BenchRow{Name: "n", Status: "new", Amount: i}
					if !inTx {
						must(b, db.Create(row).Error)
						return
					}
					must(b, db.Transaction(func(tx *gorm.DB) error { return tx.Create(row).Error }))
				}
				for i := range 50 { // warm up both
					create(bp.plain, i)
					create(bp.captured, i)
				}
				var tp, tc time.Duration
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					s := time.Now()
					create(bp.plain, i)
					m := time.Now()
					create(bp.captured, i)
					tp, tc = tp+m.Sub(s), tc+time.Since(m)
				}
				report(b, tp, tc, b.N)
			})
		}
	}
}

// BenchmarkUpdateWhere: Updates with a Where matching 10,000 rows,
// BeforeAndAfter, in GORM's default transaction.
func BenchmarkUpdateWhere(b *testing.B) {
	const rows = 10000
	for _, d := range dialects {
		b.Run(d.name, func(b *testing.B) {
			bp := benchPair(b, d.dialect, envelope.BeforeAndAfter)
			for _, db := range []*gorm.DB{bp.plain, bp.captured} {
				batch := make([]BenchRow, rows)
				for i := range batch {
					batch[i] = BenchRow{Name: fmt.Sprint("r", i), Status: "new", Amount: i}
				}
				must(b, db.CreateInBatches(&batch, 2000).Error)
			}
			bp.trunc()
			update := func(db *gorm.DB, i int) {
				tx := db.Model(&BenchRow{}).Where("amount >= ?", 0).Updates(map[string]any{"status": fmt.Sprint("s", i), "version": gorm.Expr("version + 1")})
				must(b, tx.Error)
				if tx.RowsAffected != rows {
					b.Fatalf("RowsAffected = %d", tx.RowsAffected)
				}
			}
			var tp, tc time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s := time.Now()
				update(bp.plain, i)
				m := time.Now()
				update(bp.captured, i)
				tp, tc = tp+m.Sub(s), tc+time.Since(m)
				b.StopTimer()
				bp.trunc()
				b.StartTimer()
			}
			report(b, tp, tc, b.N)
		})
	}
}
