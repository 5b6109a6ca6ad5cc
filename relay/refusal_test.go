package relay

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestConnectionRefusalsAreConfiguration: a DSN that does not parse, a
// database that does not exist (3D000), a role that does not exist
// (28000), a wrong password (28P01, on a private cluster that requires
// SCRAM) and a SQLite file that cannot be opened are ErrConfiguration
// from New — not "the database is down" forever — and a refusal first
// seen after New (the server was down then) stops Run with it (issue 23).
func TestConnectionRefusalsAreConfiguration(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	pg := testkit.NewPrivatePostgres(t)
	if err := pg.RequirePassword("right"); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, driver, dsn string }{
		{"unparsable DSN", "pgx", "host=127.0.0.1 port=notaport"},
		{"no such database", "pgx", pg.PasswordDSN("nosuchdb", "right")},
		{"no such role", "pgx", "postgres://nosuchrole:x@" + pg.Addr() + "/postgres?sslmode=disable"},
		{"wrong password", "pgx", pg.PasswordDSN("postgres", "wrong")},
		{"no password", "pgx", pg.DSN("", "postgres")},
		{"SQLite file in a missing directory", "sqlite3", testkit.MattnDSN(filepath.Join(t.TempDir(), "missing", "x.db"))},
	}
	for _, c := range cases {
		db, err := sql.Open(c.driver, c.dsn)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		defer db.Close()
		d := envelope.Postgres
		if c.driver == "sqlite3" {
			d = envelope.SQLite
		}
		_, err = New(db, &recorder{}, Config{Name: "r", Dialect: d, Logger: quiet})
		if !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("%s: New returned %v, want ErrConfiguration", c.name, err)
		}
	}

	// The right password works: the refusals above were the server's answers.
	ok, err := sql.Open("pgx", pg.PasswordDSN("postgres", "right"))
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if err := ok.PingContext(ctx); err != nil {
		t.Fatalf("right password: %v", err)
	}

	// Down at New (a warning, a relay), refusing once up: Run returns the
	// refusal.
	if err := pg.Crash(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", pg.PasswordDSN("postgres", "wrong"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := New(db, &recorder{}, Config{Name: "r", Logger: quiet, MinPollInterval: 10 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("New while the server is down: %v, want a relay (the database does not answer)", err)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.Run(rctx); !errors.Is(err, envelope.ErrConfiguration) {
		t.Errorf("Run against a server refusing the password: %v, want ErrConfiguration", err)
	}
}
