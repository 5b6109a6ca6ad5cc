package waljudge_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/internal/waljudge"
)

// On a real cluster: Setup's trigger makes tables REPLICA IDENTITY FULL
// and logs their keys, so the judge keys row changes by them, compares a
// before image with a whole old row, and finds a missing event and a
// wrong image.
func TestSetupAndDrain(t *testing.T) {
	pg := testkit.NewPrivatePostgres(t, waljudge.Settings...)
	db, err := sql.Open("pgx", pg.DSN("", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := waljudge.Setup(ctx, db, "s"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = waljudge.Drop(ctx, db, "s") }()
	conn, err := db.Conn(ctx) // one session: BEGIN and COMMIT below are statements on it
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		`CREATE TABLE herald_outbox (id bigserial PRIMARY KEY, payload json)`,
		`CREATE TABLE items (code text, n int, PRIMARY KEY (code))`,
		`SELECT pg_logical_emit_message(false, 'herald_judge_test', 'TestX')`,
		`BEGIN`,
		`INSERT INTO items VALUES ('a', 1), ('b', 2)`,
		`INSERT INTO herald_outbox (payload) VALUES ('{"model":"Item","operation":"inserted","pk":"a","after":{"code":"a","n":1}}')`,
		`COMMIT`,
		`BEGIN`,
		`UPDATE items SET n = 5 WHERE code = 'a'`,
		`INSERT INTO herald_outbox (payload) VALUES ('{"model":"Item","operation":"updated","pk":"a","before":{"code":"a","n":1},"after":{"code":"a","n":6}}')`,
		`COMMIT`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	j := waljudge.New(waljudge.Config{Outbox: "herald_outbox", Images: true})
	if err := waljudge.Drain(ctx, db, "s", j); err != nil {
		t.Fatal(err)
	}
	r := j.Report()
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Kind+" "+f.Test+" "+f.Table+" "+f.Op+" "+f.Key)
	}
	want := "missing TestX items INSERT b\nimage TestX items UPDATE a"
	if strings.Join(got, "\n") != want || r.Compared != 6 || r.Matched != 2 {
		t.Fatalf("findings:\n%s\nwant:\n%s\nreport %+v", strings.Join(got, "\n"), want, *r)
	}
}
