package gormcapture_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// Span is a named string type: an int4range column's text.
type Span string

// HandDoc's fields declare no type: its table is made by hand
// (handDocsPG), with jsonb, json, text[], int4range and point columns. Only
// the database says what their forms are. Plain's `type:text` tag is a
// declaration, and wins over its column's jsonb.
type HandDoc struct {
	ID    int64
	Obj   string
	Raw   []byte
	Tags  *string
	Span  Span
	Spot  *string
	Note  string
	Plain string `gorm:"type:text"`
}

const handDocsPG = `CREATE TABLE hand_docs (id bigserial PRIMARY KEY, obj jsonb, raw json, tags text[],
	span int4range, spot point, note text, plain jsonb)`

// relayed starts a relay on db and returns a func that waits for n more
// events and returns their payloads.
func relayed(t *testing.T, db *sql.DB) func(n int) []string {
	t.Helper()
	var (
		mu  sync.Mutex
		got []string
	)
	r, err := relay.New(db, delivery.Func(func(_ context.Context, e *envelope.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(e.Payload))
		return nil
	}), relay.Config{Name: "dbtypes", MinPollInterval: time.Millisecond, MaxPollInterval: 10 * time.Millisecond})
	must(t, err)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return func(n int) []string {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= n }, "%d events delivered", n)
		mu.Lock()
		defer mu.Unlock()
		out := got[:n:n]
		got = got[n:]
		return out
	}
}

func contains(t *testing.T, what, payload string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(payload, w) {
			t.Errorf("%s lacks %s:\n %s", what, w, payload)
		}
	}
}

// TestDatabaseTypesPostgres: fields without a type: tag (string, []byte,
// *string, a named string type) on columns a hand-written migration made
// jsonb, json, text[], int4range and point carry those types' forms in
// the events a relay delivers — an embedded object, a list, a range
// object, GeoJSON — from a create, a single-row update, a bulk update
// (which would otherwise be fused: rendered in SQL from the Go types) and
// a delete; a text column holding JSON text stays a string, and a `type:`
// tag wins over the database's type. The types are read when Capture
// finds the table ("preloaded") or at the first write ("lazy", the table
// made after Capture) (issue 23 §1).
func TestDatabaseTypesPostgres(t *testing.T) {
	t.Parallel()
	for _, lazy := range []bool{false, true} {
		name := "preloaded"
		if lazy {
			name = "lazy"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, dsn := testkit.Postgres(t)
			gdb, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
			must(t, err)
			if sqlDB, err := gdb.DB(); err == nil {
				t.Cleanup(func() { _ = sqlDB.Close() })
			}
			must(t, envelope.Migrate(context.Background(), db, envelope.Postgres, ""))
			if !lazy {
				_, err = db.Exec(handDocsPG)
				must(t, err)
			}
			p := gormcapture.New(gormcapture.Config{})
			must(t, gdb.Use(p))
			must(t, p.Capture(&HandDoc{}, envelope.Options{Payload: envelope.BeforeAndAfter}))
			if lazy {
				_, err = db.Exec(handDocsPG)
				must(t, err)
			}
			next := relayed(t, db)

			str := func(s string) *string { return &s }
			d := &HandDoc{Obj: `{"a": 1, "b": [1, 2]}`, Raw: []byte(`[true, null]`), Tags: str(`{a,"b,c"}`),
				Span: "[1,3)", Spot: str("(1,2)"), Note: `{"x": 1}`, Plain: `{"p": 1}`}
			must(t, gdb.Create(d).Error)
			must(t, gdb.Create(&HandDoc{Obj: `{}`, Raw: []byte(`{}`), Tags: str(`{}`), Span: "empty", Spot: str("(0,0)"), Plain: `{}`}).Error)
			created := next(2)
			contains(t, "created event", created[0], `"obj":{"a":1,"b":[1,2]}`, `"raw":[true,null]`, `"tags":["a","b,c"]`,
				`"span":{"lower":1,"upper":3,"lower_inc":true,"upper_inc":false,"is_empty":false}`,
				`"spot":{"type":"Point","coordinates":[1,2]}`, `"note":"{\"x\": 1}"`, `"plain":"{\"p\": 1}"`)
			contains(t, "second created event", created[1], `"obj":{}`, `"tags":[]`, `"is_empty":true`)

			must(t, gdb.Model(&HandDoc{ID: d.ID}).Updates(map[string]any{"obj": `[true]`, "tags": `{x}`}).Error)
			upd := next(1)[0]
			contains(t, "updated event", upd, `"before":{"id":1,"obj":{"a":1,"b":[1,2]}`, `"after":{"id":1,"obj":[true]`, `"tags":["x"]`)

			must(t, gdb.Model(&HandDoc{}).Where("id > 0").Update("note", "n").Error) // two rows: the bulk path
			bulk := next(2)
			for _, e := range bulk {
				contains(t, "bulk-updated event", e, `"span":{`, `"spot":{"type":"Point"`, `"note":"n"`)
			}

			must(t, gdb.Delete(&HandDoc{ID: d.ID}).Error)
			del := next(1)[0]
			contains(t, "deleted event", del, `"operation":"deleted"`, `"obj":[true]`, `"raw":[true,null]`, `"spot":{"type":"Point","coordinates":[1,2]}`)
		})
	}
}

// TestDatabaseTypesReadOnce: the catalog is read once per table, not per
// write: with the table made after Capture, one pg_attribute read at the
// first captured write (after Capture's, which found no table) and none
// at the next creates, updates and deletes; with the table there at
// Capture, the read is Capture's and the writes read none. On SQLite,
// likewise with pragma_table_info.
func TestDatabaseTypesReadOnce(t *testing.T) {
	t.Parallel()
	catalog := map[envelope.Dialect]string{envelope.Postgres: "pg_attribute", envelope.SQLite: "pragma_table_info"}
	table := map[envelope.Dialect]string{envelope.Postgres: handDocsPG, envelope.SQLite: handDocsSQLite}
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		reads := func(stmts []string) int {
			n := 0
			for _, s := range stmts {
				if strings.Contains(s, catalog[d]) {
					n++
				}
			}
			return n
		}
		for _, lazy := range []bool{false, true} {
			name := "preloaded"
			if lazy {
				name = "lazy"
			}
			t.Run(name, func(t *testing.T) {
				db, log := countingDB(t, d)
				if !lazy {
					must(t, db.Exec(table[d]).Error)
				}
				p := gormcapture.New(gormcapture.Config{})
				must(t, db.Use(p))
				atCapture := log.record(func() { must(t, p.Capture(&HandDoc{}, envelope.Options{Payload: envelope.BeforeAndAfter})) })
				if lazy {
					must(t, db.Exec(table[d]).Error)
				}
				first := log.record(func() { must(t, db.Create(&HandDoc{Obj: `{}`, Raw: []byte(`{}`), Span: "empty", Plain: "0"}).Error) })
				rest := log.record(func() {
					for range 3 {
						h := &HandDoc{Obj: `{"a":1}`, Raw: []byte(`[]`), Span: "[1,2]", Plain: "0"}
						must(t, db.Create(h).Error)
						must(t, db.Model(h).Update("obj", `[1]`).Error)
						must(t, db.Delete(h).Error)
					}
					must(t, db.Transaction(func(tx *gorm.DB) error {
						return tx.Create(&HandDoc{Obj: `1`, Raw: []byte(`2`), Span: "empty", Plain: "0"}).Error
					}))
				})
				// Capture looks for the table either way (lazy: finds none).
				wantFirst := 0
				if lazy {
					wantFirst = 1
				}
				if n := reads(atCapture); n != 1 {
					t.Errorf("Capture read the catalog %d times, want 1:\n%s", n, short(atCapture))
				}
				if n := reads(first); n != wantFirst {
					t.Errorf("the first write read the catalog %d times, want %d:\n%s", n, wantFirst, short(first))
				}
				if n := reads(rest); n != 0 {
					t.Errorf("10 more writes read the catalog %d times, want 0:\n%s", n, short(rest))
				}
				var obj string
				must(t, db.Table("herald_outbox").Select("payload").Order("sequence DESC").Limit(1).Scan(&obj).Error)
				if !strings.Contains(obj, `"obj":1`) {
					t.Errorf("the last event's obj is not the embedded JSON 1:\n %s", obj)
				}
			})
		}
	})
}

// handDocsSQLite is hand_docs on SQLite, whose only type of those with a
// form of its own is json: its declared types say json and jsonb.
const handDocsSQLite = `CREATE TABLE hand_docs (id integer PRIMARY KEY AUTOINCREMENT, obj jsonb, raw JSON, tags text,
	span text, spot text, note text, plain json)`

// TestDatabaseTypesSQLite: on SQLite a column declared json or jsonb in
// a hand-written table, held by a string or []byte field without a type:
// tag, is embedded in the events (as a `type:json` tag makes it); text that
// is not JSON stays a string, as SQLite does not check it; a text column
// holding JSON stays a string; a `type:text` tag wins.
func TestDatabaseTypesSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testkit.MattnDSN(testkit.SQLitePath(t))
	db, err := sql.Open("sqlite3", dsn)
	must(t, err)
	t.Cleanup(func() { _ = db.Close() })
	gdb, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	must(t, err)
	if sqlDB, err := gdb.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	must(t, envelope.Migrate(ctx, db, envelope.SQLite, ""))
	_, err = db.Exec(handDocsSQLite)
	must(t, err)
	p := gormcapture.New(gormcapture.Config{})
	must(t, gdb.Use(p))
	must(t, p.Capture(&HandDoc{}, envelope.Options{Payload: envelope.BeforeAndAfter}))
	next := relayed(t, db)

	d := &HandDoc{Obj: `{"a": 1, "b": [1, 2]}`, Raw: []byte(`[true, null]`), Note: `{"x": 1}`, Plain: `{"p": 1}`}
	must(t, gdb.Create(d).Error)
	contains(t, "created event", next(1)[0], `"obj":{"a":1,"b":[1,2]}`, `"raw":[true,null]`, `"note":"{\"x\": 1}"`, `"plain":"{\"p\": 1}"`)
	must(t, gdb.Create(&HandDoc{Obj: `not json`, Span: "empty"}).Error)
	contains(t, "second created event", next(1)[0], `"obj":"not json"`, `"raw":null`)
	must(t, gdb.Model(&HandDoc{}).Where("id > 0").Update("note", "n").Error) // two rows: the bulk path
	bulk := next(2)
	for _, e := range bulk {
		contains(t, "bulk-updated event", e, `"note":"n"`)
	}
	contains(t, "bulk-updated events", strings.Join(bulk, "\n"), `"after":{"id":1,"obj":{"a":1,"b":[1,2]}`)
	must(t, gdb.Delete(&HandDoc{ID: d.ID}).Error)
	contains(t, "deleted event", next(1)[0], `"before":{"id":1,"obj":{"a":1,"b":[1,2]}`)
}

// TestDatabaseTypesMySQL: on MariaDB (or MySQL) a JSON column of a
// hand-written table — on MariaDB a LONGTEXT with a json_valid check —
// and a POINT column, held by a string and a []byte field without a type:
// tag, are an embedded object and GeoJSON in the events a relay delivers.
func TestDatabaseTypesMySQL(t *testing.T) {
	t.Parallel()
	db, dsn := testkit.MySQL(t)
	gdb, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	must(t, err)
	if sqlDB, err := gdb.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	must(t, envelope.Migrate(context.Background(), db, envelope.MySQL, ""))
	_, err = db.Exec("CREATE TABLE my_docs (id bigint AUTO_INCREMENT PRIMARY KEY, doc JSON, spot POINT, note text, other longtext CHECK (length(other) < 100))")
	must(t, err)
	p := gormcapture.New(gormcapture.Config{})
	must(t, gdb.Use(p))
	must(t, p.Capture(&MyDoc{}, envelope.Options{Payload: envelope.BeforeAndAfter}))
	next := relayed(t, db)

	d := &MyDoc{Doc: `{"a": [1, 2]}`, Spot: "POINT(1 2)", Note: `{"x":1}`, Other: `{"y":1}`}
	must(t, gdb.Create(d).Error)
	contains(t, "created event", next(1)[0], `"doc":{"a":[1,2]}`, `"spot":{"type":"Point","coordinates":[1,2]}`,
		`"note":"{\"x\":1}"`, `"other":"{\"y\":1}"`)
	must(t, gdb.Model(&MyDoc{ID: d.ID}).Update("doc", `[true, null]`).Error)
	contains(t, "updated event", next(1)[0], `"before":{"id":1,"doc":{"a":[1,2]}`, `"after":{"id":1,"doc":[true,null]`)
	must(t, gdb.Delete(&MyDoc{ID: d.ID}).Error)
	contains(t, "deleted event", next(1)[0], `"doc":[true,null]`, `"spot":{"type":"Point","coordinates":[1,2]}`)
}

// MyDoc's table is made by hand (TestDatabaseTypesMySQL).
type MyDoc struct {
	ID    int64
	Doc   string
	Spot  WKT
	Note  string
	Other string
}
