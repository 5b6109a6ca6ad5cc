package inbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type dbCase struct {
	name string
	d    envelope.Dialect
	open func(t testing.TB) *sql.DB
}

var dbCases = []dbCase{
	{"postgres", envelope.Postgres, func(t testing.TB) *sql.DB { db, _ := testkit.Postgres(t); return db }},
	{"mysql", envelope.MySQL, func(t testing.TB) *sql.DB { db, _ := testkit.MySQL(t); return db }},
	{"sqlite", envelope.SQLite, func(t testing.TB) *sql.DB {
		db, err := sql.Open("sqlite", testkit.ModerncDSN(testkit.SQLitePath(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}},
}

// eachDB runs f on a migrated inbox database of each dialect, with a table
// effects(id TEXT PRIMARY KEY-less, n) that handlers write their effect to.
func eachDB(t *testing.T, f func(t *testing.T, db *sql.DB, d envelope.Dialect)) {
	t.Helper()
	for _, c := range dbCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := c.open(t)
			ctx := context.Background()
			if err := inbox.Migrate(ctx, db, c.d, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `CREATE TABLE effects (id TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			f(t, db, c.d)
		})
	}
}

func newInbox(t *testing.T, db *sql.DB, d envelope.Dialect, mod func(*inbox.Config)) *inbox.Inbox {
	t.Helper()
	cfg := inbox.Config{Consumer: "projector", Dialect: d}
	if mod != nil {
		mod(&cfg)
	}
	in, err := inbox.New(context.Background(), db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func effect(ctx context.Context, tx envelope.Querier, d envelope.Dialect, id string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES (`+outbox.Placeholder(d, 1)+`)`, id)
	return err
}

// effects counts the effects of each id.
func effects(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query(`SELECT id, count(*) FROM effects GROUP BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openBench opens a migrated database with the effects table.
func openBench(b *testing.B, c dbCase) *sql.DB {
	db := c.open(b)
	ctx := context.Background()
	if err := inbox.Migrate(ctx, db, c.d, ""); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (id TEXT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	return db
}
