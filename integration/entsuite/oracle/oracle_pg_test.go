package oracle

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/lib/pq"

	"github.com/heraldgo/herald/envelope"
)

// TestOraclePostgresXmin: on PostgreSQL a row a statement wrote with the
// values it held is told from an untouched one by its version (xmin): the
// write needs its event, an event of the untouched row is spurious, and
// a row locked FOR UPDATE is not written.
func TestOraclePostgresXmin(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	dsn := os.Getenv("HERALD_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	admin, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() }) // after the schema is dropped (cleanups run last first)
	schema := fmt.Sprintf("herald_oracle_%d", os.Getpid())
	if _, err := admin.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE; CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("PostgreSQL at %s (HERALD_POSTGRES_DSN): %v", dsn, err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	var (
		mu sync.Mutex
		fs []Finding
	)
	o := New(Postgres, Tables{Models: map[string]string{"User": "users"}, Mode: BeforeAndAfter}, func(f Finding) {
		mu.Lock()
		fs = append(fs, f)
		mu.Unlock()
	})
	db := o.OpenDB(&pq.Driver{}, dsn+sep+"search_path="+schema)
	defer db.Close()
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO herald_outbox (id, topic, payload, created_at) VALUES ('0190d2a0-0000-7000-8000-000000000000', 'users', '{"model":"User","operation":"inserted","pk":1,"before":null,"after":{"id":1,"name":"a"}}', now());
		INSERT INTO users VALUES (1, 'a'), (2, 'b')`); err != nil {
		t.Fatal(err)
	}
	findings := func() string {
		mu.Lock()
		defer mu.Unlock()
		out := kinds(fs)
		fs = nil
		return out
	}
	findings() // the setup's own
	n := 0
	emit := func(tx *sql.Tx, payload string) {
		n++
		if _, err := tx.Exec(`INSERT INTO herald_outbox (id, topic, payload, created_at) VALUES ($1, 'users', $2, now())`,
			fmt.Sprintf("0190d2a0-0000-7000-8001-%012d", n), payload); err != nil {
			t.Fatal(err)
		}
	}
	same := `{"model":"User","operation":"updated","pk":1,"changed":[],"before":{"id":1,"name":"a"},"after":{"id":1,"name":"a"}}`
	for _, c := range []struct {
		name string
		tx   func(tx *sql.Tx)
		want string
	}{
		{"written with the values it held, with its event", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET name = name WHERE id = 1`)
			emit(tx, same)
		}, ""},
		{"written with the values it held, without an event", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET name = $1 WHERE id = 1`, "a")
		}, "missed users[1]"},
		{"an event for a row no statement wrote", func(tx *sql.Tx) {
			exec(t, tx, `UPDATE users SET name = 'b2' WHERE id = 2`)
			emit(tx, `{"model":"User","operation":"updated","pk":2,"changed":["name"],"before":{"id":2,"name":"b"},"after":{"id":2,"name":"b2"}}`)
			emit(tx, same)
		}, "spurious users[1]"},
		{"a row locked, not written", func(tx *sql.Tx) {
			exec(t, tx, `SELECT * FROM users WHERE id = 1 FOR UPDATE`)
			exec(t, tx, `UPDATE users SET name = 'b3' WHERE id = 2`)
			emit(tx, `{"model":"User","operation":"updated","pk":2,"changed":["name"],"before":{"id":2,"name":"b2"},"after":{"id":2,"name":"b3"}}`)
			emit(tx, same)
		}, "spurious users[1]"},
	} {
		inTx(t, db, c.tx)
		if got := findings(); got != c.want {
			t.Errorf("%s: findings %q, want %q", c.name, got, c.want)
		}
	}
}
