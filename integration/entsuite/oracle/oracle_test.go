package oracle

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mattn/go-sqlite3"

	"github.com/heraldgo/herald/envelope"
)

// open returns a SQLite database watched by an oracle that captures
// "User" in table users, and the findings it reports.
func open(t *testing.T, mode Mode) (*sql.DB, *Oracle, func() []Finding) {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "o.db") + "?_fk=1&_busy_timeout=5000"
	var (
		mu sync.Mutex
		fs []Finding
	)
	o := New(SQLite, Tables{Models: map[string]string{"User": "users"}, Mode: mode}, func(f Finding) {
		mu.Lock()
		fs = append(fs, f)
		mu.Unlock()
	})
	db := o.OpenDB(&sqlite3.SQLiteDriver{}, dsn)
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.SQLite, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, active BOOLEAN NOT NULL DEFAULT 0, born DATETIME, region TEXT DEFAULT 'eu')`); err != nil {
		t.Fatal(err)
	}
	return db, o, func() []Finding {
		mu.Lock()
		defer mu.Unlock()
		out := fs
		fs = nil
		return out
	}
}

var emitted atomic.Int64

func emit(t *testing.T, tx *sql.Tx, payload string) {
	t.Helper()
	if _, err := tx.Exec(`INSERT INTO herald_outbox (id, topic, payload, created_at) VALUES (?, 'users', ?, '2026-01-01T00:00:00Z')`,
		fmt.Sprintf("0190d2a0-0000-7000-8000-%012d", emitted.Add(1)), payload); err != nil {
		t.Fatal(err)
	}
}

func inTx(t *testing.T, db *sql.DB, f func(tx *sql.Tx)) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	f(tx)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func exec(t *testing.T, tx *sql.Tx, q string, args ...any) {
	t.Helper()
	if _, err := tx.Exec(q, args...); err != nil {
		t.Fatal(err)
	}
}

func kinds(fs []Finding) string {
	var s []string
	for _, f := range fs {
		s = append(s, f.Kind+" "+f.Table+"["+f.Key+"]")
	}
	return strings.Join(s, ", ")
}

// TestOracle: each disagreement between the stored rows and the events
// is found, and agreement finds nothing.
func TestOracle(t *testing.T) {
	db, o, findings := open(t, BeforeAndAfter)
	cases := []struct {
		name string
		tx   func(tx *sql.Tx)
		want string
	}{
		{"insert with its event", func(tx *sql.Tx) {
			exec(t, tx, `INSERT INTO users (id, name, active) VALUES (1, 'a', 1)`)
			emit(t, tx, `{"model":"User","operation":"inserted","pk":1,"before":null,"after":{"id":1,"name":"a","active":true,"born":null,"region":"eu"}}`)
		}, ""},
		{"insert without an event", func(tx *sql.Tx) {
			exec(t, tx, `INSERT INTO users (id, name) VALUES (2, 'b')`)
		}, "missed users[2]"},
		{"a database default missing from the image", func(tx *sql.Tx) {
			exec(t, tx, `INSERT INTO users (id, name) VALUES (3, 'c')`)
			emit(t, tx, `{"model":"User","operation":"inserted","pk":3,"before":null,"after":{"id":3,"name":"c","active":false,"born":null,"region":null}}`)
		}, "image users[3]"},
		{"a time with more precision than stored", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET born = '2026-01-02 03:04:05.123+00:00' WHERE id = 1`)
			emit(t, tx, `{"model":"User","operation":"updated","pk":1,"changed":["born"],"before":{"id":1,"name":"a","active":true,"born":null,"region":"eu"},"after":{"id":1,"name":"a","active":true,"born":"2026-01-02T03:04:05.123456Z","region":"eu"}}`)
		}, "image users[1]"},
		{"an update that wrote the values the row held, with its event", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET name = name WHERE id = 1`)
			emit(t, tx, `{"model":"User","operation":"updated","pk":1,"changed":[],"before":{"id":1,"name":"a","active":true,"born":"2026-01-02T03:04:05.123Z","region":"eu"},"after":{"id":1,"name":"a","active":true,"born":"2026-01-02T03:04:05.123Z","region":"eu"}}`)
		}, ""},
		{"an update that wrote the values the row held, without an event", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET active = ? WHERE name = ? AND id IN (?, ?)`, true, "a", 1, 2)
		}, "missed users[1]"},
		{"an update event for a row no statement wrote", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET name = 'x' WHERE id = 99`)
			emit(t, tx, `{"model":"User","operation":"updated","pk":1,"changed":[],"before":{"id":1,"name":"a","active":true,"born":"2026-01-02T03:04:05.123Z","region":"eu"},"after":{"id":1,"name":"a","active":true,"born":"2026-01-02T03:04:05.123Z","region":"eu"}}`)
		}, "spurious users[1]"},
		{"an upsert that wrote the values the row held, with its event", func(tx *sql.Tx) {
			exec(t, tx, "INSERT INTO `users` (`id`, `name`) VALUES (?, ?), (?, ?) ON CONFLICT (`id`) DO UPDATE SET `name` = `excluded`.`name` RETURNING `id`", 9, "z", 1, "a")
			emit(t, tx, `{"model":"User","operation":"inserted","pk":9,"before":null,"after":{"id":9,"name":"z","active":false,"born":null,"region":"eu"}}`)
			emit(t, tx, `{"model":"User","operation":"updated","pk":1,"changed":["name"],"before":{"id":1,"name":"a","active":true,"born":"2026-01-02T03:04:05.123Z","region":"eu"},"after":{"id":1,"name":"a","active":true,"born":"2026-01-02T03:04:05.123Z","region":"eu"}}`)
		}, ""},
		{"an upsert that did nothing", func(tx *sql.Tx) {
			exec(t, tx, "INSERT INTO `users` (`id`, `name`) VALUES (?, ?) ON CONFLICT (`id`) DO NOTHING", 1, "a")
		}, ""},
		{"changed lacks a column", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET name = 'a2', active = 0 WHERE id = 1`)
			emit(t, tx, `{"model":"User","operation":"updated","pk":1,"changed":["name"],"before":{"id":1,"name":"a","active":true,"born":"2026-01-02T03:04:05.123Z","region":"eu"},"after":{"id":1,"name":"a2","active":false,"born":"2026-01-02T03:04:05.123Z","region":"eu"}}`)
		}, "changed users[1]"},
		{"a delete twice", func(tx *sql.Tx) {
			exec(t, tx, `DELETE FROM users WHERE id = 2`)
			e := `{"model":"User","operation":"deleted","pk":2,"before":{"id":2,"name":"b","active":false,"born":null,"region":"eu"},"after":null}`
			emit(t, tx, e)
			emit(t, tx, e+" ")
		}, "duplicate users[2]"},
		{"the wrong operation", func(tx *sql.Tx) {
			exec(t, tx, `INSERT INTO users (id, name) VALUES (4, 'd') ON CONFLICT (id) DO NOTHING`)
			emit(t, tx, `{"model":"User","operation":"updated","pk":4,"changed":["name"],"before":{"id":4,"name":"x","active":false,"born":null,"region":"eu"},"after":{"id":4,"name":"d","active":false,"born":null,"region":"eu"}}`)
		}, "operation users[4]"},
		{"an insert then an update, chained", func(tx *sql.Tx) {
			exec(t, tx, `INSERT INTO users (id, name) VALUES (5, 'e')`)
			emit(t, tx, `{"model":"User","operation":"inserted","pk":5,"before":null,"after":{"id":5,"name":"e","active":false,"born":null,"region":"eu"}}`)
			exec(t, tx, `UPDATE users SET name = 'e2' WHERE id = 5`)
			emit(t, tx, `{"model":"User","operation":"updated","pk":5,"changed":["name"],"before":{"id":5,"name":"e","active":false,"born":null,"region":"eu"},"after":{"id":5,"name":"e2","active":false,"born":null,"region":"eu"}}`)
		}, ""},
		{"an event for an untouched row", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET name = 'e3' WHERE id = 5`)
			emit(t, tx, `{"model":"User","operation":"updated","pk":5,"changed":["name"],"before":{"id":5,"name":"e2","active":false,"born":null,"region":"eu"},"after":{"id":5,"name":"e3","active":false,"born":null,"region":"eu"}}`)
			emit(t, tx, `{"model":"User","operation":"deleted","pk":3,"before":{"id":3,"name":"c","active":false,"born":null,"region":"eu"},"after":null}`)
		}, "spurious users[3]"},
	}
	for _, c := range cases {
		inTx(t, db, c.tx)
		if got := kinds(findings()); got != c.want {
			t.Errorf("%s: findings %q, want %q", c.name, got, c.want)
		}
	}
	// A write outside a transaction is judged on its own.
	if _, err := db.Exec(`DELETE FROM users WHERE id = 5`); err != nil {
		t.Fatal(err)
	}
	if got := kinds(findings()); got != "missed users[5]" {
		t.Errorf("autocommit delete: findings %q, want missed users[5]", got)
	}
	// A rolled-back transaction is not judged.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	exec(t, tx, `DELETE FROM users`)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := kinds(findings()); got != "" {
		t.Errorf("rollback: findings %q", got)
	}
	// …and an autocommit UPDATE that writes a row with its values, too.
	if _, err := db.Exec(`UPDATE users SET name = name WHERE id = ?`, 1); err != nil {
		t.Fatal(err)
	}
	if got := kinds(findings()); got != "missed users[1]" {
		t.Errorf("autocommit update with the same values: findings %q, want missed users[1]", got)
	}
	if s := o.Stats(); s.Checks != int64(len(cases))+2 || s.Events != 15 {
		t.Errorf("stats %+v, want %d checks and 15 events", s, len(cases)+2)
	}
}

// TestMatchSelects: the rows an UPDATE or upsert writes, read with its
// own arguments (SQLite).
func TestMatchSelects(t *testing.T) {
	o := New(SQLite, Tables{Models: map[string]string{"User": "users"}}, nil)
	args := func(vs ...any) []driver.NamedValue {
		out := make([]driver.NamedValue, len(vs))
		for i, v := range vs {
			out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
		}
		return out
	}
	for _, c := range []struct {
		q    string
		args []driver.NamedValue
		want string
	}{
		{"UPDATE `users` SET `name` = ?, `age` = COALESCE(`users`.`age`, 0) + ? WHERE `id` = ? RETURNING `id`, `name`", args("a", 1, 7),
			"users: SELECT * FROM `users` WHERE `id` = ?  [7]"},
		{"UPDATE `users` SET `parent` = NULL WHERE `parent` IN (?, ?) AND `name` = 'x?'", args(1, 2), "users: SELECT * FROM `users` WHERE `parent` IN (?, ?) AND `name` = 'x?' [1 2]"},
		{"UPDATE `users` SET `a` = ?", args(1), "users: SELECT * FROM `users` []"},
		{"UPDATE `pets` SET `a` = ? WHERE `id` = ?", args(1, 2), ""}, // not captured
		{"INSERT INTO `users` (`id`, `name`) VALUES (?, ?), (?, ?) ON CONFLICT (`id`) DO UPDATE SET `name` = `excluded`.`name` RETURNING `id`", args(1, "a", 2, "b"),
			"users: SELECT * FROM `users` WHERE \"id\" = ? [1]; users: SELECT * FROM `users` WHERE \"id\" = ? [2]"},
		{"INSERT INTO `users` (`id`, `name`) VALUES (?, ?) ON CONFLICT (`id`) DO NOTHING", args(1, "a"), ""},
		// no conflict target: completed from the table's unique indexes when it runs (anyUniqueSelect)
		{"INSERT INTO `users` (`id`, `name`) VALUES (?, ?) ON CONFLICT DO UPDATE SET `id` = `users`.`id`", args(1, "a"), "users: SELECT * FROM `users` []"},
		{"INSERT INTO `users` (`id`, `name`) VALUES (?, ?) ON CONFLICT (`id`) DO UPDATE SET `name` = ? WHERE `users`.`name` <> ?", args(1, "a", "b", "c"), ""},
		{"INSERT INTO `users` (`id`, `name`) VALUES (?, ?)", args(1, "a"), ""},
	} {
		var got []string
		for _, m := range o.matchSelects(c.q, c.args) {
			var vs []string
			for _, a := range m.args {
				vs = append(vs, fmt.Sprint(a.Value))
			}
			got = append(got, fmt.Sprintf("%s: %s [%s]", m.table, m.query, strings.Join(vs, " ")))
		}
		if g := strings.Join(got, "; "); g != c.want {
			t.Errorf("%s:\n got  %s\n want %s", c.q, g, c.want)
		}
	}
}

// TestValueEqual: a stored value and its image's spellings.
func TestValueEqual(t *testing.T) {
	for _, c := range []struct {
		db, ev string
		want   bool
	}{
		{`1`, `true`, true},
		{`0`, `true`, false},
		{`"2026-01-02 03:04:05.5+01:00"`, `"2026-01-02T02:04:05.5Z"`, true},
		{`"2026-01-02T03:04:05.123+00:00"`, `"2026-01-02T03:04:05.123456789Z"`, false},
		{`"\\x0102ff"`, `"AQL/"`, true},
		{`"{\"a\": [1, 2]}"`, `{"a":[1,2]}`, true},
		{`{"a":[1,2]}`, `{"a":[1,3]}`, false},
		{`12.5`, `"12.50"`, true},
		{`1.100000023841858`, `1.1`, true}, // a float32 in a double column
		{`null`, `"00000000-0000-0000-0000-000000000000"`, false},
		{`"eu"`, `null`, false},
		{`"null"`, `null`, true},           // a JSON column holding the JSON null
		{`"\"string\""`, `"string"`, true}, // a JSON column holding a JSON string
		{`"\"string\""`, `"other"`, false},
	} {
		var db, ev any
		if err := decode(c.db, &db); err != nil {
			t.Fatal(err)
		}
		if err := decode(c.ev, &ev); err != nil {
			t.Fatal(err)
		}
		if got := valueEqual(db, ev); got != c.want {
			t.Errorf("valueEqual(%s, %s) = %v, want %v", c.db, c.ev, got, c.want)
		}
	}
}
