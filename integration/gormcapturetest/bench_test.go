package gormcapture_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
)

// Benchmarks compare a captured write with the same write on a database
// without the plugin, alternating the two in one run so that both see the
// same machine state; each reports both times and their ratio.
//
//	go test -run '^$' -bench . -benchtime 2000x ./gormcapturetest/

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
	plain, captured, p := pluginPair(b, d)
	must(b, p.Capture(&BenchRow{}, envelope.Options{Payload: mode}))
	trunc := func() { must(b, captured.Exec(`DELETE FROM herald_outbox`).Error) }
	if d == envelope.Postgres {
		trunc = func() { must(b, captured.Exec(`TRUNCATE herald_outbox`).Error) }
	}
	return pair{plain, captured, trunc}
}

// pluginPair opens two databases of dialect d with BenchRow's table: one
// without the plugin, one with it installed (capturing nothing yet).
func pluginPair(b *testing.B, d envelope.Dialect) (plain, withPlugin *gorm.DB, p *gormcapture.Plugin) {
	b.Helper()
	plain, _ = openDB(b, d, nil)
	must(b, plain.AutoMigrate(&BenchRow{}))
	withPlugin, _ = openDB(b, d, nil)
	must(b, withPlugin.AutoMigrate(&BenchRow{}))
	p = gormcapture.New(gormcapture.Config{})
	must(b, withPlugin.Use(p))
	return plain, withPlugin, p
}

// report records both sides' time per op and the ratio.
func report(b *testing.B, plain, captured time.Duration, n int) {
	b.ReportMetric(float64(plain.Nanoseconds())/float64(n), "plain-ns/op")
	b.ReportMetric(float64(captured.Nanoseconds())/float64(n), "captured-ns/op")
	b.ReportMetric(float64(captured)/float64(plain), "ratio")
}

// alternateWrites warms plain and captured up (50 writes each), then runs
// them alternately, b.N times each, and reports both sides' time per op,
// their ratio and, where getrusage exists, the process's CPU time per op
// (Go: GORM, the plugin, the driver; not the server's).
func alternateWrites(b *testing.B, plain, captured func(i int)) {
	b.Helper()
	for i := range 50 {
		plain(i)
		captured(i)
	}
	var tp, tc, cp, cc time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s, cs := time.Now(), testkit.ProcessCPU()
		plain(i)
		m, cm := time.Now(), testkit.ProcessCPU()
		captured(i)
		ce := testkit.ProcessCPU()
		tp, tc = tp+m.Sub(s), tc+time.Since(m)
		cp, cc = cp+cm-cs, cc+ce-cm
	}
	report(b, tp, tc, b.N)
	if cp > 0 {
		b.ReportMetric(float64(cp.Microseconds())/float64(b.N), "plain-cpu-us/op")
		b.ReportMetric(float64(cc.Microseconds())/float64(b.N), "captured-cpu-us/op")
	}
}

// BenchmarkCreate: a single-row Create, After mode, in GORM's default
// transaction (BEGIN, INSERT, COMMIT) and in a caller's transaction. Besides
// the times it reports each side's process CPU time per Create (Go's
// share: GORM, the plugin, the driver), on systems with getrusage.
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
				alternateWrites(b, func(i int) { create(bp.plain, i) }, func(i int) { create(bp.captured, i) })
			})
		}
	}
}

// BenchmarkCreateUncaptured: a single-row Create, in GORM's default
// transaction, of a model the plugin does not capture, on a database with
// the plugin against one without: what the plugin costs the writes it does
// not capture (its pool's begin and commit, its callbacks' checks). Reports
// each side's time and process CPU per Create.
//
//	go test -run '^$' -bench 'BenchmarkCreateUncaptured' -benchtime 3000x ./gormcapturetest/
func BenchmarkCreateUncaptured(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.name, func(b *testing.B) {
			plain, withPlugin, _ := pluginPair(b, d.dialect)
			create := func(db *gorm.DB, i int) {
				must(b, db.Create(&BenchRow{Name: "n", Status: "new", Amount: i}).Error)
			}
			alternateWrites(b, func(i int) { create(plain, i) }, func(i int) { create(withPlugin, i) })
		})
	}
}

// BenchmarkUpdateWhere: Updates with a Where matching 10,000 rows,
// BeforeAndAfter, in GORM's default transaction, interleaved with the same
// Updates on a database without the plugin (plain) and with the
// hand-written floor: the least a BeforeAndAfter capture of the update can
// do in herald's table, on a third database.
//
//   - PostgreSQL: integration/peerbench's floor, one statement — a locked
//     SELECT of the rows (before), the UPDATE … RETURNING with
//     row_to_json(before), and an INSERT … SELECT json_build_object(…) of
//     the events (floorPostgres).
//   - SQLite, which has no data-modifying CTE and no old values in
//     RETURNING: the fastest of the hand-written forms measured (a temporary
//     table of the before images, the UPDATE, one INSERT … SELECT
//     json_object(…) joining the two; an AFTER UPDATE trigger and computing
//     the after image from the SET cost the same), floorSQLite.
//
// Besides each side's time per op it reports herald÷floor, floor÷plain and
// herald÷plain (ratio).
//
//	go test -run '^$' -bench 'BenchmarkUpdateWhere' -benchtime 10x ./gormcapturetest/
func BenchmarkUpdateWhere(b *testing.B) {
	const rows = 10000
	for _, d := range dialects {
		b.Run(d.name, func(b *testing.B) {
			bp := benchPair(b, d.dialect, envelope.BeforeAndAfter)
			floor, _ := openDB(b, d.dialect, nil)
			must(b, floor.AutoMigrate(&BenchRow{}))
			for _, db := range []*gorm.DB{bp.plain, bp.captured, floor} {
				batch := make([]BenchRow, rows)
				for i := range batch {
					batch[i] = BenchRow{Name: fmt.Sprint("r", i), Status: "new", Amount: i}
				}
				must(b, db.CreateInBatches(&batch, 2000).Error)
			}
			bp.trunc()
			truncFloor := func() { must(b, floor.Exec(`DELETE FROM herald_outbox`).Error) }
			if d.dialect == envelope.Postgres {
				truncFloor = func() { must(b, floor.Exec(`TRUNCATE herald_outbox`).Error) }
			}
			check := func(tx *gorm.DB) {
				must(b, tx.Error)
				if tx.RowsAffected != rows {
					b.Fatalf("RowsAffected = %d", tx.RowsAffected)
				}
			}
			update := func(db *gorm.DB, i int) {
				check(db.Model(&BenchRow{}).Where("amount >= ?", 0).Updates(map[string]any{"status": fmt.Sprint("s", i), "version": gorm.Expr("version + 1")}))
			}
			handWritten := func(i int) {
				if d.dialect == envelope.Postgres {
					check(floor.Exec(floorPostgres, fmt.Sprint("s", i)))
					return
				}
				must(b, floor.Transaction(func(tx *gorm.DB) error {
					for _, q := range floorSQLite {
						var args []any
						if strings.Contains(q, "?") {
							args = append(args, fmt.Sprint("s", i))
						}
						r := tx.Exec(q, args...)
						if r.Error != nil {
							return r.Error
						}
					}
					return nil
				}))
			}
			var tp, tc, tf time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s := time.Now()
				update(bp.plain, i)
				m := time.Now()
				update(bp.captured, i)
				f := time.Now()
				handWritten(i)
				tp, tc, tf = tp+m.Sub(s), tc+f.Sub(m), tf+time.Since(f)
				b.StopTimer()
				bp.trunc()
				truncFloor()
				b.StartTimer()
			}
			report(b, tp, tc, b.N)
			b.ReportMetric(float64(tf.Nanoseconds())/float64(b.N), "floor-ns/op")
			b.ReportMetric(float64(tc)/float64(tf), "herald/floor")
			b.ReportMetric(float64(tf)/float64(tp), "floor/plain")
		})
	}
}

// BenchmarkUpdateReturning: a bulk update of 10,000 rows that asks for
// RETURNING (clause.Returning), BeforeAndAfter: GORM reads the rows into
// the caller's value, so the plugin reads the rows as updated again by
// their keys — one statement whose key set is one bind parameter (rule 5;
// before, an IN list of one parameter per key). Plain: the same update
// without the plugin.
//
//	go test -run '^$' -bench 'BenchmarkUpdateReturning/postgres' -benchtime 10x ./integration/gormcapturetest/
func BenchmarkUpdateReturning(b *testing.B) {
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
				var out []BenchRow
				tx := db.Model(&out).Clauses(clause.Returning{}).Where("amount >= ?", 0).Updates(map[string]any{"status": fmt.Sprint("s", i), "version": gorm.Expr("version + 1")})
				must(b, tx.Error)
				if tx.RowsAffected != rows || len(out) != rows {
					b.Fatalf("RowsAffected = %d, %d rows returned", tx.RowsAffected, len(out))
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

// floorPostgres is integration/peerbench's floorSQL on bench_rows.
const floorPostgres = `WITH before AS (SELECT * FROM bench_rows WHERE amount >= 0 FOR UPDATE),
u AS (UPDATE bench_rows f SET status = ?, version = f.version + 1 FROM before b WHERE f.id = b.id
      RETURNING f.id, f.name, f.status, f.amount, f.version, row_to_json(b) AS before_image)
INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at)
SELECT gen_random_uuid(), 'bench_row.updated',
       json_build_object('model', 'BenchRow', 'operation', 'updated', 'pk', u.id, 'before', u.before_image,
           'after', json_build_object('id', u.id, 'name', u.name, 'status', u.status, 'amount', u.amount, 'version', u.version)),
       'BenchRow:' || u.id, now()
FROM u`

// floorSQLite is the floor on SQLite: the rows' before images into a
// temporary table, the UPDATE of those rows, and the events from the two
// joined.
var floorSQLite = []string{
	`CREATE TEMP TABLE IF NOT EXISTS herald_floor_before (pk INTEGER PRIMARY KEY, j TEXT)`,
	`INSERT INTO temp.herald_floor_before SELECT id, json_object('id', id, 'name', name, 'status', status, 'amount', amount, 'version', version)
FROM bench_rows WHERE amount >= 0`,
	`UPDATE bench_rows SET status = ?, version = version + 1 WHERE id IN (SELECT pk FROM temp.herald_floor_before)`,
	`INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at)
SELECT lower(hex(randomblob(16))), 'bench_row.updated',
       json_object('model', 'BenchRow', 'operation', 'updated', 'pk', t.id, 'before', json(b.j),
           'after', json_object('id', t.id, 'name', t.name, 'status', t.status, 'amount', t.amount, 'version', t.version)),
       'BenchRow:' || t.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM temp.herald_floor_before b JOIN bench_rows t ON t.id = b.pk ORDER BY b.pk`,
	`DELETE FROM temp.herald_floor_before`,
}

// BenchmarkCreateFloor measures what BenchmarkCreate's ratio cannot go
// below on SQLite: the plain Create of BenchmarkCreate (in GORM's default
// transaction, and in a caller's) against the same Create followed, in
// its transaction, by nothing but a prepared INSERT of an event row as
// the capture writes it — into the outbox table itself ("outbox-ratio")
// and into a copy of it without indexes ("bare-ratio"). No savepoint, no
// RETURNING read of the row, no Go envelope.
//
//	go test -run '^$' -bench 'BenchmarkCreateFloor' -benchtime 2000x ./gormcapturetest/
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
