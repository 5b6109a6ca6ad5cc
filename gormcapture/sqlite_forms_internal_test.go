package gormcapture

import (
	"context"
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// BenchmarkSQLiteEventForms measures where a SQLite bulk capture's events
// statement spends its time against the hand-written floor's (BenchmarkUpdateWhere):
// the INSERT … SELECT of 10,000 BeforeAndAfter events from the before
// images and the updated rows, each form in a transaction rolled back,
// alternated in one loop on one database:
//
//   - floor: json_object() of the values, random hex ids (what a
//     hand-written statement does);
//   - herald: the form fusedUpdateSQLite writes — each value rendered by
//     sqliteJSON (a typeof guard that converts a value stored in another
//     class than its column's as the driver's scan would, and json_quote
//     with U+2028/U+2029 escaped as jsonform does), spliced into the
//     envelope's text, UUID v7 ids from one base;
//   - herald without the guards (CAST and json_quote alone), herald with
//     random ids, and both: what each of herald's guarantees costs.
//
// Reports ms per form and each ÷ the floor's.
//
//	go test -run '^$' -bench BenchmarkSQLiteEventForms -benchtime 10x ./gormcapture/
func BenchmarkSQLiteEventForms(b *testing.B) {
	const rows = 10000
	db, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the temporary table lives on one connection
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.SQLite, ""); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE bench_rows (id INTEGER PRIMARY KEY, name TEXT, status TEXT, amount INTEGER, version INTEGER)`,
		`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 10000) INSERT INTO bench_rows SELECT i, 'n', 'new', i, 0 FROM g`,
		`CREATE TEMP TABLE b (k INTEGER PRIMARY KEY, c0, c1, c2, c3, c4)`,
		`INSERT INTO b SELECT id, id, name, status, amount, version FROM bench_rows`,
		`UPDATE bench_rows SET status = 'done', version = version + 1`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	intField := &schema.Field{FieldType: reflect.TypeFor[int64]()}
	strField := &schema.Field{FieldType: reflect.TypeFor[string]()}
	guarded := func(f *schema.Field, decl, e string) string {
		s, ok := sqliteJSON(f, decl, e)
		if !ok {
			b.Fatalf("no SQLite rendering of %s %s", decl, e)
		}
		return s
	}
	bare := func(f *schema.Field, _, e string) string {
		if f == strField {
			return `json_quote(` + e + `)`
		}
		return `CAST(` + e + ` AS TEXT)`
	}
	payload := func(render func(*schema.Field, string, string) string) string {
		cols := []struct {
			name string
			f    *schema.Field
			decl string
		}{{"id", intField, "INTEGER"}, {"name", strField, "TEXT"}, {"status", strField, "TEXT"}, {"amount", intField, "INTEGER"}, {"version", intField, "INTEGER"}}
		var p strings.Builder
		p.WriteString(`'{"model":"BenchRow","operation":"updated","pk":'||(` + render(intField, "INTEGER", "t.id") + `)||',"changed":["status","version"],"before":{`)
		for i, c := range cols {
			if i > 0 {
				p.WriteString(`||',`)
			} else {
				p.WriteString(`'||'`)
			}
			p.WriteString(`"` + c.name + `":'||(` + render(c.f, c.decl, "b.c"+string(rune('0'+i))) + `)`)
		}
		p.WriteString(`||'},"after":{`)
		for i, c := range cols {
			if i > 0 {
				p.WriteString(`||',`)
			} else {
				p.WriteString(`'||'`)
			}
			p.WriteString(`"` + c.name + `":'||(` + render(c.f, c.decl, "t."+c.name) + `)`)
		}
		p.WriteString(`||'},"occurred_at":"2026-11-30T23:00:00.000000Z"}'`)
		return "(" + p.String() + ")"
	}
	v7 := sqliteV7ID(`'01890000-0000-7000-'`, func() string { return "1000" }, "b.k")
	random := `lower(hex(randomblob(16)))`
	heraldForm := func(id string, render func(*schema.Field, string, string) string) string {
		return `INSERT INTO herald_outbox (id, topic, payload, headers, ordering_key, created_at) SELECT ` + id + `, 'bench_row.updated', ` +
			payload(render) + `, '{}', 'BenchRow:'||t.id, '2026-11-30T23:00:00.000000Z' FROM b JOIN bench_rows t ON t.id = b.k ORDER BY b.k`
	}
	forms := []struct{ name, q string }{
		{"floor", `INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at) SELECT lower(hex(randomblob(16))), 'bench_row.updated',
			json_object('model', 'BenchRow', 'operation', 'updated', 'pk', t.id,
				'before', json_object('id', b.c0, 'name', b.c1, 'status', b.c2, 'amount', b.c3, 'version', b.c4),
				'after', json_object('id', t.id, 'name', t.name, 'status', t.status, 'amount', t.amount, 'version', t.version)),
			'BenchRow:'||t.id, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM b JOIN bench_rows t ON t.id = b.k ORDER BY b.k`},
		{"herald", heraldForm(v7, guarded)},
		{"no-guards", heraldForm(v7, bare)},
		{"random-ids", heraldForm(random, guarded)},
		{"no-guards-random-ids", heraldForm(random, bare)},
	}
	run := func(q string) time.Duration {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		s := time.Now()
		res, err := tx.ExecContext(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(s)
		if n, _ := res.RowsAffected(); n != rows {
			b.Fatalf("%d events written, want %d", n, rows)
		}
		return d
	}
	for _, f := range forms {
		run(f.q)
	}
	took := make([]time.Duration, len(forms))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range forms {
			k := (i + j) % len(forms)
			took[k] += run(forms[k].q)
		}
	}
	for j, f := range forms {
		b.ReportMetric(float64(took[j].Microseconds())/1000/float64(b.N), f.name+"-ms")
		if j > 0 {
			b.ReportMetric(float64(took[j])/float64(took[0]), f.name+"-ratio")
		}
	}
}
