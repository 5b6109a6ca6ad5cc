package gormcapture

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// BenchmarkKeySetPostgres isolates the statement that reads rows by a set
// of keys (selectByKeys) on PostgreSQL: 10,000 rows read FOR UPDATE in a
// transaction rolled back, by an integer key and by a (text, uuid) key,
// with the key set as one bind parameter per value (keysIn, the form
// before rule 5) and as one JSON parameter (keySetIn), alternated in one
// loop on one database. It reports each form's time per read (the
// composite per-key form fails on PostgreSQL at this size: "stack depth
// limit exceeded", logged).
//
//	go test -run '^$' -bench 'BenchmarkKeySetPostgres' -benchtime 20x ./gormcapture/
func BenchmarkKeySetPostgres(b *testing.B) {
	const n = 10000
	ctx := context.Background()
	_, dsn := testkit.Postgres(b)
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE bench_ints (id bigint PRIMARY KEY, name text)`,
		fmt.Sprintf(`INSERT INTO bench_ints SELECT g, 'n' || g FROM generate_series(1, %d) g`, n),
		`CREATE TABLE bench_pairs (region text, ref uuid, name text, PRIMARY KEY (region, ref))`,
		fmt.Sprintf(`INSERT INTO bench_pairs SELECT 'r' || (g %% 7), md5(g::text)::uuid, 'n' FROM generate_series(1, %d) g`, n),
		`ANALYZE bench_ints, bench_pairs`,
	} {
		if err := db.Exec(q).Error; err != nil {
			b.Fatal(err)
		}
	}
	keysOf := func(q string) [][]any {
		rows, err := db.Raw(q).Rows()
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var out [][]any
		for rows.Next() {
			k := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range k {
				ptrs[i] = &k[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				b.Fatal(err)
			}
			out = append(out, k)
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		return out
	}
	p := &Plugin{dialect: envelope.Postgres}
	for _, c := range []struct {
		name, table string
		cols        []string
		keys        [][]any
	}{
		{"int", "bench_ints", []string{"id"}, keysOf(`SELECT id FROM bench_ints`)},
		{"text+uuid", "bench_pairs", []string{"region", "ref"}, keysOf(`SELECT region, ref::text FROM bench_pairs`)},
	} {
		b.Run(c.name, func(b *testing.B) {
			read := func(where clause.Expression) error {
				tx := db.Begin()
				defer tx.Rollback()
				st := &gorm.Statement{DB: tx, Table: c.table, Context: ctx, Clauses: map[string]clause.Clause{}}
				st.AddClause(clause.Select{Columns: []clause.Column{{Name: c.cols[0]}}})
				st.AddClause(clause.From{})
				st.AddClause(clause.Where{Exprs: []clause.Expression{where}})
				st.AddClause(clause.Locking{Strength: clause.LockingStrengthUpdate})
				st.Build("SELECT", "FROM", "WHERE", "FOR")
				rows, err := tx.Statement.ConnPool.QueryContext(ctx, st.SQL.String(), st.Vars...)
				if err != nil {
					return err
				}
				defer rows.Close()
				got := 0
				for rows.Next() {
					got++
				}
				if err := rows.Err(); err != nil {
					return err
				}
				if got != n {
					b.Fatalf("%d rows, want %d", got, n)
				}
				return nil
			}
			var perKey, oneParam time.Duration
			var perKeyErr error
			for b.Loop() {
				t0 := time.Now()
				if perKeyErr == nil {
					perKeyErr = read(keysIn(c.cols, c.keys))
				}
				t1 := time.Now()
				where, ok, err := p.keySetIn(ctx, nil, c.table, c.cols, c.keys)
				if err != nil || !ok {
					b.Fatalf("keySetIn: %v, %v", ok, err)
				}
				if err := read(where); err != nil {
					b.Fatal(err)
				}
				perKey, oneParam = perKey+t1.Sub(t0), oneParam+time.Since(t1)
			}
			if perKeyErr != nil {
				b.Logf("one parameter per key: %v", perKeyErr)
			} else {
				b.ReportMetric(float64(perKey.Milliseconds())/float64(b.N), "per-key-ms/op")
			}
			b.ReportMetric(float64(oneParam.Milliseconds())/float64(b.N), "json-ms/op")
		})
	}
}

// TestSQLiteTimeForm: on mattn's SQLite driver the form learnt by binding
// a time in SELECT ? is the text the driver writes: a time key in the JSON
// parameter finds the row a bound time wrote, and a time in another
// location or fraction finds none, as bound. (modernc's driver is tested
// through GORM in integration/gormcapturetest, TestModerncTimeKeys: a
// test of this package importing modernc would put it in the go.sum of
// every program that imports gormcapture.)
func TestSQLiteTimeForm(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ name, driver, dsn string }{
		{"mattn", "sqlite3", testkit.MattnDSN(testkit.SQLitePath(t))},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := sql.Open(c.driver, c.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			at := time.Date(2024, 3, 1, 10, 0, 1, 123456789, time.FixedZone("", -4*3600))
			if _, err := db.Exec(`CREATE TABLE t (at TIMESTAMP, n INTEGER)`); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`INSERT INTO t VALUES (?, 1)`, at); err != nil {
				t.Fatal(err)
			}
			p := &Plugin{dialect: envelope.SQLite}
			if p.sqliteTimeFormat(ctx, db) == nil {
				t.Fatal("no time form learnt")
			}
			for _, k := range []struct {
				at   time.Time
				want int
			}{{at, 1}, {at.UTC(), 0}, {at.Add(time.Nanosecond), 0}} {
				where, ok, err := p.keySetIn(ctx, db, "t", []string{"at"}, [][]any{{k.at}})
				if err != nil || !ok {
					t.Fatalf("keySetIn: %v, %v", ok, err)
				}
				e := where.(clause.Expr)
				q := strings.Replace(e.SQL, "?", "at", 1) // the column
				var got int
				if err := db.QueryRow(`SELECT count(*) FROM t WHERE `+q, e.Vars[1:]...).Scan(&got); err != nil {
					t.Fatal(err)
				}
				var bound int
				if err := db.QueryRow(`SELECT count(*) FROM t WHERE at = ?`, k.at).Scan(&bound); err != nil {
					t.Fatal(err)
				}
				if got != k.want || bound != k.want {
					t.Errorf("%s: the JSON key set finds %d rows, a bound time %d; want %d", k.at, got, bound, k.want)
				}
			}
		})
	}
}
