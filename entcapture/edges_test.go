package entcapture_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	lib "github.com/heraldgo/herald/examples/entlibrary/ent"
	"github.com/heraldgo/herald/examples/entlibrary/ent/reader"
	_ "github.com/heraldgo/herald/examples/entlibrary/ent/runtime"
	"github.com/heraldgo/herald/internal/testkit"
)

// libEnv opens the entlibrary example's schemas (an edge with ON DELETE
// CASCADE, a nullable foreign key ent makes SET NULL, an edge schema).
func libEnv(t *testing.T, d envelope.Dialect, mode envelope.PayloadMode) (*env, *lib.Client) {
	t.Helper()
	db := openDB(t, d)
	opts := map[string]envelope.Options{}
	for _, s := range []string{"Reader", "Loan", "Club", "Membership"} {
		opts[s] = envelope.Options{Payload: mode}
	}
	drv := entcapture.Driver(entsql.OpenDB(entDialect(d), db), entcapture.Config{Options: opts})
	c := lib.NewClient(lib.Driver(drv))
	createSchema(t, func(ctx context.Context) error { return c.Schema.Create(ctx) })
	return &env{dialect: d, db: db}, c
}

// summary lists events as "topic pk" lines, sorted, and clears the outbox.
func summary(t *testing.T, e *env) string {
	t.Helper()
	var out []string
	for _, ev := range e.events(t) {
		var p struct {
			PK     any
			After  map[string]any
			Before map[string]any
		}
		must(t, json.Unmarshal(ev.Payload, &p))
		s := fmt.Sprintf("%s %v", ev.Topic, p.PK)
		if strings.HasPrefix(ev.Topic, "club.updated") && p.After != nil {
			s += fmt.Sprintf(" president=%v", p.After["reader_presides"])
		}
		out = append(out, s)
	}
	_, err := e.db.Exec(`DELETE FROM herald_outbox`)
	must(t, err)
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// TestEdgeSchemaSetters: join rows that AddX/RemoveX/ClearX write past
// every hook are captured as inserted and deleted rows of the edge schema.
func TestEdgeSchemaSetters(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e, c := libEnv(t, d, envelope.After)
		ctx := context.Background()
		a := c.Club.Create().SetName("a").SaveX(ctx)
		b := c.Club.Create().SetName("b").SaveX(ctx)
		ann := c.Reader.Create().SetName("Ann").SetEmail("x").AddClubs(a).SaveX(ctx)
		if got, want := summary(t, e), "club.inserted 1, club.inserted 2, membership.inserted 1, reader.inserted 1"; got != want {
			t.Fatalf("create with AddClubs:\n got %s\nwant %s", got, want)
		}
		c.Reader.UpdateOne(ann).AddClubs(b).RemoveClubs(a).ExecX(ctx)
		if got, want := summary(t, e), "membership.deleted 1, membership.inserted 2"; got != want {
			t.Fatalf("AddClubs+RemoveClubs:\n got %s\nwant %s", got, want)
		}
		tx, err := c.Tx(ctx)
		must(t, err)
		tx.Reader.Update().Where(reader.Name("Ann")).ClearClubs().ExecX(ctx)
		must(t, tx.Commit())
		if got, want := summary(t, e), "membership.deleted 2"; got != want {
			t.Fatalf("ClearClubs:\n got %s\nwant %s", got, want)
		}
		if n := e.count(t, "memberships"); n != 0 {
			t.Fatalf("%d memberships left", n)
		}
	})
}

// TestCascades: a delete captures the rows the database deletes (ON
// DELETE CASCADE, recursively through the edge schema) and nulls (SET
// NULL) along with it, read before the delete.
func TestCascades(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, mode := range []envelope.PayloadMode{envelope.Keys, envelope.After, envelope.BeforeAndAfter} {
			e, c := libEnv(t, d, mode)
			ctx := context.Background()
			ann := c.Reader.Create().SetName("Ann").SetEmail("x").SaveX(ctx)
			bob := c.Reader.Create().SetName("Bob").SetEmail("y").SaveX(ctx)
			club := c.Club.Create().SetName("sf").SetPresident(ann).AddReaders(ann).SaveX(ctx)
			c.Club.UpdateOne(club).AddReaders(bob).ExecX(ctx) // memberships 1 (Ann) and 2 (Bob)
			c.Loan.Create().SetBook("Dune").SetReader(ann).SaveX(ctx)
			c.Loan.Create().SetBook("Emma").SetReader(ann).SaveX(ctx)
			c.Loan.Create().SetBook("Ulysses").SetReader(bob).SaveX(ctx)
			summary(t, e)

			c.Reader.DeleteOne(ann).ExecX(ctx)
			want := "club.updated 1, loan.deleted 1, loan.deleted 2, membership.deleted 1, reader.deleted 1"
			if mode != envelope.Keys {
				want = "club.updated 1 president=<nil>, loan.deleted 1, loan.deleted 2, membership.deleted 1, reader.deleted 1"
			}
			if got := summary(t, e); got != want {
				t.Fatalf("%s: delete Ann:\n got %s\nwant %s", mode, got, want)
			}
			if c.Club.GetX(ctx, club.ID).QueryPresident().ExistX(ctx) {
				t.Fatal("the club still has a president")
			}
			c.Reader.Delete().Where(reader.Name("Bob")).ExecX(ctx)
			if got, want := summary(t, e), "loan.deleted 3, membership.deleted 2, reader.deleted 2"; got != want {
				t.Fatalf("%s: delete Bob:\n got %s\nwant %s", mode, got, want)
			}
		}
	})
}

// TestChildEdgeSetters: an edge setter on the side without the foreign
// key updates rows of another captured table past every hook; each row
// whose foreign key changed is captured as an update of that column. A
// setter on the side with the foreign key is a change of its own row.
func TestChildEdgeSetters(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e, c := libEnv(t, d, envelope.BeforeAndAfter)
		ctx := context.Background()
		ann := c.Reader.Create().SetName("Ann").SetEmail("x").SaveX(ctx)
		bob := c.Reader.Create().SetName("Bob").SetEmail("y").SaveX(ctx)
		club := c.Club.Create().SetName("sf").SaveX(ctx)
		other := c.Club.Create().SetName("go").SetPresident(ann).SaveX(ctx)
		summary(t, e)

		c.Reader.UpdateOne(bob).AddPresides(club).ExecX(ctx)
		if got, want := summary(t, e), "club.updated 1 president=2"; got != want {
			t.Fatalf("AddPresides:\n got %s\nwant %s", got, want)
		}
		c.Reader.Update().Where(reader.Name("Ann")).ClearPresides().ExecX(ctx)
		if got, want := summary(t, e), fmt.Sprintf("club.updated %d president=<nil>", other.ID); got != want {
			t.Fatalf("ClearPresides:\n got %s\nwant %s", got, want)
		}
		c.Club.UpdateOne(club).SetPresident(ann).ExecX(ctx) // the club's own foreign key
		evs := e.events(t)
		var p struct{ Changed []string }
		if len(evs) == 1 {
			must(t, json.Unmarshal(evs[0].Payload, &p))
		}
		if len(evs) != 1 || fmt.Sprint(p.Changed) != "[reader_presides]" {
			t.Fatalf("SetPresident: %s", dump(evs))
		}
	})
}

// TestSQLiteDeferredConcurrentEdgeWrites: captured writes that read rows
// before they write (the join rows and children an edge setter changes)
// run in deferred SQLite transactions (mattn's default: no _txlock,
// rollback journal), several at once, and all succeed. A deferred
// transaction that has read cannot wait for the write lock — SQLite
// answers "database is locked" at once, busy timeout or not — so the
// capture takes the lock before its first read.
func TestSQLiteDeferredConcurrentEdgeWrites(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite3", "file:"+testkit.SQLitePath(t)+"?_foreign_keys=1&_busy_timeout=10000")
	must(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	must(t, envelope.Migrate(ctx, db, envelope.SQLite, ""))
	opts := map[string]envelope.Options{}
	for _, s := range []string{"Reader", "Loan", "Club", "Membership"} {
		opts[s] = envelope.Options{Payload: envelope.After}
	}
	c := lib.NewClient(lib.Driver(entcapture.Driver(entsql.OpenDB(entDialect(envelope.SQLite), db), entcapture.Config{Options: opts})))
	createSchema(t, func(ctx context.Context) error { return c.Schema.Create(ctx) })
	const writers = 4
	for round := range 10 {
		club := c.Club.Create().SetName(fmt.Sprint("club", round)).SaveX(ctx)
		readers := make([]*lib.Reader, writers)
		for i := range readers {
			readers[i] = c.Reader.Create().SetName(fmt.Sprint("r", round, i)).SetEmail("x").SaveX(ctx)
		}
		errs := make([]error, 2*writers)
		var wg sync.WaitGroup
		for i, r := range readers {
			wg.Go(func() { errs[i] = c.Reader.UpdateOne(r).AddClubs(club).Exec(ctx) })
			presided := c.Club.Create().SetName(fmt.Sprint("p", round, i)).SaveX(ctx)
			wg.Go(func() {
				errs[writers+i] = c.Reader.Create().SetName(fmt.Sprint("n", round, i)).SetEmail("y").AddPresides(presided).Exec(ctx)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, writer %d: %v", round, i, err)
			}
		}
	}
}
