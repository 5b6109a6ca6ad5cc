package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestMySQLClientFoundRows: with clientFoundRows=true (CLIENT_FOUND_ROWS),
// MySQL counts a row ON DUPLICATE KEY UPDATE left unchanged as affected;
// the inbox decides nothing by affected rows on MySQL, so a repeat is
// still a Duplicate, an older message of a key still Stale, and a batch's
// repeats still left out.
func TestMySQLClientFoundRows(t *testing.T) {
	_, dsn := testkit.MySQL(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := deadline(t)
	if err := inbox.Migrate(ctx, db, envelope.MySQL, ""); err != nil {
		t.Fatal(err)
	}
	in := newInbox(t, db, envelope.MySQL, func(c *inbox.Config) { c.Order = inbox.OrderSkip })
	nop := func(context.Context, *sql.Tx) error { return nil }
	for i, c := range []struct {
		m    inbox.Message
		want inbox.Outcome
	}{
		{inbox.Message{ID: "a", OrderingKey: "k", Sequence: 5}, inbox.Processed},
		{inbox.Message{ID: "a", OrderingKey: "k", Sequence: 5}, inbox.Duplicate},
		{inbox.Message{ID: "b", OrderingKey: "k", Sequence: 3}, inbox.Stale},
		{inbox.Message{ID: "c", OrderingKey: "k", Sequence: 5}, inbox.Processed}, // <=: the same sequence is not stale
		{inbox.Message{ID: "d", OrderingKey: "k", Sequence: 9}, inbox.Processed},
		{inbox.Message{ID: "e", OrderingKey: "k", Sequence: 8}, inbox.Stale},
	} {
		out, err := in.Handle(ctx, c.m, nop)
		if err != nil || out != c.want {
			t.Fatalf("%d: Handle(%+v) = %s, %v; want %s", i, c.m, out, err, c.want)
		}
	}
	fresh, err := in.HandleBatch(ctx, []inbox.Message{{ID: "a"}, {ID: "x"}, {ID: "d"}, {ID: "y"}, {ID: "x"}},
		func(context.Context, *sql.Tx, []inbox.Message) error { return nil })
	if err != nil || len(fresh) != 2 || fresh[0].ID != "x" || fresh[1].ID != "y" {
		t.Fatalf("HandleBatch = %+v, %v; want x and y", fresh, err)
	}
}
