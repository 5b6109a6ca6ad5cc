package gormcapture_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
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

// BenchmarkCreateFloor measures what BenchmarkCreate's ratio cannot go
// below on SQLite: the plain Create of BenchmarkCreate (in GORM's default
// transaction, and in a caller's) against the same Create followed, in
// its transaction, by nothing but a prepared INSERT of an event row as
// the capture writes it — into the outbox table itself ("outbox-ratio")
// and into a copy of it without indexes ("bare-ratio"). No savepoint, no
// RETURNING read of the row, no Go envelope.
//
//	go test -run '^$' -bench 'BenchmarkCreateFloor' -benchtime 2000x ./gormcapture/
func BenchmarkCreateFloor(b *testing.B) {
	bp := benchPair(b, envelope.SQLite, envelope.After)
	must(b, bp.captured.Create(&BenchRow{Name: "n", Status: "new", Amount: 1}).Error)
	var topic, payload, headers, okey, created string
	must(b, bp.captured.Raw(`SELECT topic, payload, headers, ordering_key, created_at FROM herald_outbox`).Row().
		Scan(&topic, &payload, &headers, &okey, &created))

	floor := func(table string) (*gorm.DB, *sql.Stmt) {
		db, raw := openDB(b, envelope.SQLite, nil)
		must(b, db.AutoMigrate(&BenchRow{}))
		must(b, envelope.Migrate(context.Background(), raw, envelope.SQLite, ""))
		if table == "bare" {
			must(b, db.Exec(`CREATE TABLE bare AS SELECT * FROM herald_outbox WHERE 0`).Error)
		}
		sqlDB, err := db.DB()
		must(b, err)
		st, err := sqlDB.Prepare(`INSERT INTO ` + table + ` (id, topic, payload, headers, ordering_key, idempotency_key, created_at, next_attempt_at) VALUES (?,?,?,?,?,?,?,?) RETURNING sequence, id`)
		must(b, err)
		return db, st
	}
	outboxDB, outboxSt := floor("herald_outbox")
	bareDB, bareSt := floor("bare")
	for _, inTx := range []bool{false, true} {
		name := "sqlite/default-tx"
		if inTx {
			name = "sqlite/caller-tx"
		}
		b.Run(name, func(b *testing.B) {
			create := func(db *gorm.DB, i int, st *sql.Stmt) {
				row := &BenchRow{Name: "n", Status: "new", Amount: i}
				if st == nil && !inTx {
					must(b, db.Create(row).Error)
					return
				}
				must(b, db.Transaction(func(tx *gorm.DB) error {
					if err := tx.Create(row).Error; err != nil || st == nil {
						return err
					}
					stx, ok := tx.Statement.ConnPool.(*sql.Tx)
					if !ok {
						return fmt.Errorf("ConnPool %T", tx.Statement.ConnPool)
					}
					var seq any // NULL in the copy without the key
					var id string
					return stx.Stmt(st).QueryRow( //nolint:sqlclosecheck // the transaction's copy, closed with it
						uuid.NewString(), topic, payload, headers, fmt.Sprint(okey, row.ID), nil, created, nil).Scan(&seq, &id)
				}))
			}
			var tp, to, tb time.Duration
			for i := 0; b.Loop(); i++ {
				s := time.Now()
				create(bp.plain, i, nil)
				m := time.Now()
				create(outboxDB, i, outboxSt)
				n := time.Now()
				create(bareDB, i, bareSt)
				tp, to, tb = tp+m.Sub(s), to+n.Sub(m), tb+time.Since(n)
			}
			b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "plain-ns/op")
			b.ReportMetric(float64(to)/float64(tp), "outbox-ratio")
			b.ReportMetric(float64(tb)/float64(tp), "bare-ratio")
		})
	}
}
