package integration_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	lib "github.com/heraldgo/herald/examples/entlibrary/ent"
	_ "github.com/heraldgo/herald/examples/entlibrary/ent/runtime"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

var entSchemaMu sync.Mutex

// TestEntThroughRelay: ent writes — an edge setter on an edge schema, a
// delete the database cascades (CASCADE through loans and memberships,
// SET NULL on the club's president), a rolled-back transaction — reach a
// delivery through the relay: exactly the committed changes, each once,
// in order per key.
func TestEntThroughRelay(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		ctx := context.Background()
		var db *sql.DB
		entDialect := dialect.SQLite
		if d == envelope.Postgres {
			db, _ = testkit.Postgres(t)
			entDialect = dialect.Postgres
		} else {
			var err error
			db, err = sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(t)))
			must(t, "open", err)
			t.Cleanup(func() { _ = db.Close() })
		}
		must(t, "migrate", envelope.Migrate(ctx, db, d, ""))
		w := wakeup.NewInProcess()
		t.Cleanup(func() { _ = w.Close() })
		c := lib.NewClient(lib.Driver(entcapture.Driver(entsql.OpenDB(entDialect, db), entcapture.Config{Namespace: "lib", Wakeup: w})))
		entSchemaMu.Lock() // ent's Schema.Create writes the package's table descriptions: one at a time
		serr := c.Schema.Create(ctx)
		entSchemaMu.Unlock()
		must(t, "schema", serr)

		var (
			mu  sync.Mutex
			got []string
		)
		startRelay(t, db, delivery.Func(func(_ context.Context, e *envelope.Event) error {
			var p struct{ PK any }
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				return err
			}
			mu.Lock()
			got = append(got, fmt.Sprintf("%s %v", e.Topic, p.PK))
			mu.Unlock()
			return nil
		}), relay.Config{Wakeup: w})

		ann := c.Reader.Create().SetName("Ann").SetEmail("a").SaveX(ctx)
		club := c.Club.Create().SetName("sf").SetPresident(ann).SaveX(ctx)
		c.Reader.UpdateOne(ann).AddClubs(club).ExecX(ctx) // a join row of the edge schema
		c.Loan.Create().SetBook("Dune").SetReader(ann).SaveX(ctx)
		tx, err := c.Tx(ctx)
		must(t, "tx", err)
		tx.Loan.Create().SetBook("never").SetReader(ann).SaveX(ctx)
		must(t, "rollback", tx.Rollback())
		c.Reader.DeleteOne(ann).ExecX(ctx) // loan and membership deleted, club president nulled

		want := []string{
			"lib.club.inserted 1", "lib.club.updated 1", "lib.loan.deleted 1", "lib.loan.inserted 1",
			"lib.membership.deleted 1", "lib.membership.inserted 1", "lib.reader.deleted 1", "lib.reader.inserted 1",
		}
		testkit.Eventually(t, 20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= len(want)
		}, "not all events delivered")
		mu.Lock()
		defer mu.Unlock()
		sort.Strings(got)
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Fatalf("delivered:\n %s\nwant\n %s", strings.Join(got, ", "), strings.Join(want, ", "))
		}
	})
}
