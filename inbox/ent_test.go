package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"entgo.io/ent/dialect"
	_ "github.com/mattn/go-sqlite3"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/examples/entlibrary/ent"
	_ "github.com/heraldgo/herald/examples/entlibrary/ent/runtime" // the schemas' capture hooks
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestHandleTxWithEnt: an ent *Tx is an inbox.Tx as it is; the captured
// ent write, its event and the id commit together, once.
func TestHandleTxWithEnt(t *testing.T) {
	ctx := deadline(t)
	db, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := envelope.Migrate(ctx, db, envelope.SQLite, ""); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, db, envelope.SQLite, ""); err != nil {
		t.Fatal(err)
	}
	client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.SQLite, db), entcapture.Config{Namespace: "library"})))
	if err := client.Schema.Create(ctx); err != nil {
		t.Fatal(err)
	}
	in := newInbox(t, db, envelope.SQLite, nil)
	boom := errors.New("boom")
	for i, c := range []struct {
		fail error
		want inbox.Outcome
	}{{boom, inbox.Processed}, {nil, inbox.Processed}, {nil, inbox.Duplicate}} {
		out, err := inbox.HandleTx(ctx, in, inbox.Message{ID: "reader-signed-up"}, client.Tx, func(ctx context.Context, tx *ent.Tx) error {
			if _, err := tx.Reader.Create().SetName("Ann").SetEmail("ann@example.org").Save(ctx); err != nil {
				return err
			}
			return c.fail
		})
		if !errors.Is(err, c.fail) || out != c.want {
			t.Fatalf("round %d: %s, %v; want %s, %v", i, out, err, c.want, c.fail)
		}
	}
	if n := client.Reader.Query().CountX(ctx); n != 1 {
		t.Fatalf("%d readers; want 1", n)
	}
	var events int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM herald_outbox`).Scan(&events); err != nil || events != 1 {
		t.Fatalf("%d events (%v); want the one reader's", events, err)
	}
}
