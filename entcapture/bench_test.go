package entcapture_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/loan"
)

// Benchmarks compare a captured ent write with the same write on a second
// database whose client does not capture that operation (the schema's
// hook only returns at once), alternating the two in one loop so that
// both see the same machine state; each reports both times and the ratio.
//
//	go test -run '^$' -bench . -benchtime 2000x ./entcapture/

type benchPair struct {
	plain, captured *ent.Client
	trunc           func()
}

func newBenchPair(b *testing.B, d envelope.Dialect, mode envelope.PayloadMode) benchPair {
	b.Helper()
	open := func(ops []envelope.Operation) (*ent.Client, func()) {
		db := openDB(b, d)
		drv := entcapture.Driver(entsql.OpenDB(entDialect(d), db),
			entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: mode, Operations: ops}}})
		c := ent.NewClient(ent.Driver(drv))
		createSchema(b, func(ctx context.Context) error { return c.Schema.Create(ctx) })
		trunc := func() { _, err := db.Exec(`DELETE FROM herald_outbox`); must(b, err) }
		return c, trunc
	}
	plain, _ := open([]envelope.Operation{envelope.Deleted})
	captured, trunc := open(nil)
	return benchPair{plain, captured, trunc}
}

func report(b *testing.B, plain, captured time.Duration, n int) {
	b.ReportMetric(float64(plain.Nanoseconds())/float64(n), "plain-ns/op")
	b.ReportMetric(float64(captured.Nanoseconds())/float64(n), "captured-ns/op")
	b.ReportMetric(float64(captured)/float64(plain), "ratio")
}

// BenchmarkCreate: a single-row Create, After mode, in a caller's
// transaction (client.Tx, Create, Commit), and without one (through
// entcapture.Driver, which opens the transaction).
func BenchmarkCreate(b *testing.B) {
	for _, d := range dialects {
		for _, inTx := range []bool{true, false} {
			name := d.name + "/caller-tx"
			if !inTx {
				name = d.name + "/no-tx"
			}
			b.Run(name, func(b *testing.B) {
				bp := newBenchPair(b, d.dialect, envelope.After)
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

// BenchmarkUpdateWhere: Update().Where() matching 10,000 rows
// (HERALD_BENCH_ROWS sets another number; HERALD_ENTCAPTURE_MYSQL=1 adds
// MariaDB/MySQL, where both captured variants read around the write),
// BeforeAndAfter, without a caller transaction. A third database's client
// captures the same update without the RETURNING the wrapper adds (the
// rows read by id after the write, as on a client without the wrapper):
// noreturning-ns/op, and noreturning-ratio against the plain write. The
// two captured variants alternate which goes first.
func BenchmarkUpdateWhere(b *testing.B) {
	rows := 10000
	if v, err := strconv.Atoi(os.Getenv("HERALD_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	for _, d := range dialects {
		b.Run(d.name, func(b *testing.B) {
			bp := newBenchPair(b, d.dialect, envelope.BeforeAndAfter)
			db := openDB(b, d.dialect)
			drv := entcapture.Driver(entsql.OpenDB(entDialect(d.dialect), db),
				entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: envelope.BeforeAndAfter}}})
			entcapture.WithoutReturning(drv)
			reading := ent.NewClient(ent.Driver(drv))
			createSchema(b, func(ctx context.Context) error { return reading.Schema.Create(ctx) })
			ctx := context.Background()
			for _, c := range []*ent.Client{bp.plain, bp.captured, reading} {
				for start := 0; start < rows; start += 2000 {
					bs := make([]*ent.LoanCreate, min(2000, rows-start))
					for i := range bs {
						bs[i] = c.Loan.Create().SetStatus("lent").SetDays(start + i).SetReturned(false)
					}
					c.Loan.CreateBulk(bs...).ExecX(ctx)
				}
			}
			trunc := func() {
				bp.trunc()
				_, err := db.Exec(`DELETE FROM herald_outbox`)
				must(b, err)
			}
			trunc()
			update := func(c *ent.Client) {
				if n := c.Loan.Update().Where(loan.DaysGTE(0)).AddDays(1).SaveX(ctx); n != rows {
					b.Fatalf("updated %d rows", n)
				}
			}
			var tp, tc, tr time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s := time.Now()
				update(bp.plain)
				m := time.Now()
				// The two captured variants take turns going first.
				first, second := bp.captured, reading
				if i%2 == 1 {
					first, second = reading, bp.captured
				}
				update(first)
				r := time.Now()
				update(second)
				d1, d2 := r.Sub(m), time.Since(r)
				if i%2 == 1 {
					d1, d2 = d2, d1
				}
				tp, tc, tr = tp+m.Sub(s), tc+d1, tr+d2
				b.StopTimer()
				trunc()
				b.StartTimer()
			}
			report(b, tp, tc, b.N)
			b.ReportMetric(float64(tr.Nanoseconds())/float64(b.N), "noreturning-ns/op")
			b.ReportMetric(float64(tr)/float64(tp), "noreturning-ratio")
		})
	}
}

// BenchmarkCreateFloor measures what BenchmarkCreate's ratio cannot go
// below on SQLite: the plain create of BenchmarkCreate (in a caller's
// transaction, and without one) against the same create followed, in one
// transaction, by nothing but a prepared INSERT of an event row as the
// capture writes it — into the outbox table itself ("outbox-ratio") and
// into a copy of it without indexes ("bare-ratio"). No savepoint, no Go
// envelope, no capture: only the row the event adds and the index entries
// it needs.
//
//	go test -run '^$' -bench 'BenchmarkCreateFloor' -benchtime 2000x ./entcapture/
func BenchmarkCreateFloor(b *testing.B) {
	ctx := context.Background()
	// Clients whose Loan writes other than deletes are not captured, as
	// BenchmarkCreate's plain side.
	open := func() (*sql.DB, *ent.Client) {
		db := openDB(b, envelope.SQLite)
		c := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.SQLite, db),
			entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: envelope.After, Operations: []envelope.Operation{envelope.Deleted}}}})))
		createSchema(b, func(ctx context.Context) error { return c.Schema.Create(ctx) })
		return db, c
	}
	_, plain := open()
	// The event row, as a captured create writes it.
	capDB := openDB(b, envelope.SQLite)
	captured := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.SQLite, capDB),
		entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: envelope.After}}})))
	createSchema(b, func(ctx context.Context) error { return captured.Schema.Create(ctx) })
	captured.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx)
	var topic, payload, headers, okey, created string
	must(b, capDB.QueryRow(`SELECT topic, payload, headers, ordering_key, created_at FROM herald_outbox`).Scan(&topic, &payload, &headers, &okey, &created))

	floor := func(table string) (*ent.Client, *sql.Stmt) {
		db, c := open()
		if table == "bare" {
			_, err := db.Exec(`CREATE TABLE bare AS SELECT * FROM herald_outbox WHERE 0`)
			must(b, err)
		}
		st, err := db.Prepare(`INSERT INTO ` + table + ` (id, topic, payload, headers, ordering_key, idempotency_key, created_at, next_attempt_at) VALUES (?,?,?,?,?,?,?,?) RETURNING sequence, id`)
		must(b, err)
		return c, st
	}
	outbox, outboxSt := floor("herald_outbox")
	bare, bareSt := floor("bare")
	withEvent := func(c *ent.Client, st *sql.Stmt, i int) {
		tx, err := c.Tx(ctx)
		must(b, err)
		l := tx.Loan.Create().SetStatus("lent").SetDays(i).SetReturned(false).SaveX(ctx)
		stx := entcapture.SQLTx(tx.HeraldTx())
		var seq any // NULL in the copy without the key
		var id string
		must(b, stx.StmtContext(ctx, st).QueryRowContext( //nolint:sqlclosecheck // the transaction's copy, closed with it
			ctx, uuid.NewString(), topic, payload, headers, fmt.Sprint(okey, l.ID), nil, created, nil).Scan(&seq, &id))
		must(b, tx.Commit())
	}
	for _, inTx := range []bool{true, false} {
		name := "sqlite/caller-tx"
		if !inTx {
			name = "sqlite/no-tx"
		}
		b.Run(name, func(b *testing.B) {
			create := func(i int) {
				if !inTx {
					plain.Loan.Create().SetStatus("lent").SetDays(i).SetReturned(false).SaveX(ctx)
					return
				}
				tx, err := plain.Tx(ctx)
				must(b, err)
				tx.Loan.Create().SetStatus("lent").SetDays(i).SetReturned(false).SaveX(ctx)
				must(b, tx.Commit())
			}
			var tp, to, tb time.Duration
			for i := 0; b.Loop(); i++ {
				s := time.Now()
				create(i)
				m := time.Now()
				withEvent(outbox, outboxSt, i)
				n := time.Now()
				withEvent(bare, bareSt, i)
				tp, to, tb = tp+m.Sub(s), to+n.Sub(m), tb+time.Since(n)
			}
			b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "plain-ns/op")
			b.ReportMetric(float64(to)/float64(tp), "outbox-ratio")
			b.ReportMetric(float64(tb)/float64(tp), "bare-ratio")
		})
	}
}
