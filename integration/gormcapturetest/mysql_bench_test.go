package gormcapture_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
)

// BenchmarkMySQLCreate: a single-row Create, After mode, in GORM's default
// transaction, captured on MariaDB/MySQL, alternated with a plain GORM
// Create on another database of the same server.
//
//	go test -run '^$' -bench 'BenchmarkMySQL' -benchtime 300x ./gormcapturetest/
func BenchmarkMySQLCreate(b *testing.B) {
	bp := benchPair(b, envelope.MySQL, envelope.After)
	create := func(db *gorm.DB, i int) {
		must(b, db.Create(&BenchRow{Name: "n", Status: "new", Amount: i}).Error)
	}
	for i := range 20 { // warm up both
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
}

// BenchmarkMySQLUpdateWhere: Updates with a Where matching 2,000 rows
// (HERALD_BENCH_ROWS sets another number), BeforeAndAfter, captured (one
// locking SELECT, the UPDATE, one SELECT by key, one multi-row event
// INSERT), alternated with the same Updates on a database without the
// plugin.
//
//	HERALD_BENCH_ROWS=10000 go test -run '^$' -bench 'BenchmarkMySQLUpdateWhere' -benchtime 5x ./gormcapturetest/
func BenchmarkMySQLUpdateWhere(b *testing.B) {
	rows := 2000
	if v, err := strconv.Atoi(os.Getenv("HERALD_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	bp := benchPair(b, envelope.MySQL, envelope.BeforeAndAfter)
	for _, db := range []*gorm.DB{bp.plain, bp.captured} {
		batch := make([]BenchRow, rows)
		for i := range batch {
			batch[i] = BenchRow{Name: fmt.Sprint("r", i), Status: "new", Amount: i}
		}
		must(b, db.CreateInBatches(&batch, 1000).Error)
	}
	bp.trunc()
	update := func(db *gorm.DB, i int) {
		tx := db.Model(&BenchRow{}).Where("amount >= ?", 0).Updates(map[string]any{"status": fmt.Sprint("s", i), "version": gorm.Expr("version + 1")})
		must(b, tx.Error)
		if tx.RowsAffected != int64(rows) {
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
}
