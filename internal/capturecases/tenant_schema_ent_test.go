package capturecases_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/reader"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// tenantSchemaKey carries a request's tenant schema in its context.
type tenantSchemaKey struct{}

// schemaDriver is how a service with a schema per tenant switches ent's
// search_path per request: every transaction it begins first runs SET
// LOCAL search_path to the schema the request's context names.
type schemaDriver struct{ dialect.Driver }

func (d schemaDriver) Tx(ctx context.Context) (dialect.Tx, error) {
	tx, err := d.Driver.Tx(ctx)
	if err != nil {
		return nil, err
	}
	if s, ok := ctx.Value(tenantSchemaKey{}).(string); ok {
		if err := tx.Exec(ctx, "SET LOCAL search_path TO "+s, []any{}, nil); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	return tx, nil
}

func (d schemaDriver) Unwrap() dialect.Driver { return d.Driver }

// TestSchemaPerTenantEnt is TestSchemaPerTenant through entcapture: with
// the search_path switched per request (each transaction's SET LOCAL),
// each tenant's captured creates, updates and deletes — in client.Tx and
// in the transaction entcapture.Driver opens for a write outside one —
// put their events in the outbox of the tenant's own schema, and a relay
// per schema delivers that tenant's events and no other's (issue 23).
func TestSchemaPerTenantEnt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testkit.Postgres(t)
	var own string
	must(t, db.QueryRow(`SELECT current_schema()`).Scan(&own))
	own = own[:min(len(own), 50)]
	tenants := []string{own + "_ea", own + "_eb"}
	client := ent.NewClient(ent.Driver(entcapture.Driver(schemaDriver{entsql.OpenDB(dialect.Postgres, db)})))
	for _, s := range tenants {
		_, err := db.Exec(`CREATE SCHEMA ` + s)
		must(t, err)
		t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA ` + s + ` CASCADE`) })
		must(t, envelope.Migrate(ctx, db, envelope.Postgres, s+".herald_outbox"))
		must(t, createEntSchema(func() error { return client.Schema.Create(context.WithValue(ctx, tenantSchemaKey{}, s)) }))
	}
	in := func(s string) context.Context { return context.WithValue(ctx, tenantSchemaKey{}, s) }

	// A request in a transaction of its own (client.Tx).
	request := func(schema string, f func(tx *ent.Tx) error) {
		t.Helper()
		tx, err := client.Tx(in(schema))
		must(t, err)
		if err := f(tx); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		must(t, tx.Commit())
	}
	request(tenants[0], func(tx *ent.Tx) error {
		return tx.Reader.Create().SetName("a1").SetEmail("x").Exec(in(tenants[0]))
	})
	request(tenants[1], func(tx *ent.Tx) error {
		return tx.Reader.CreateBulk(tx.Reader.Create().SetName("b1").SetEmail("x"), tx.Reader.Create().SetName("b2").SetEmail("x")).Exec(in(tenants[1]))
	})
	request(tenants[0], func(tx *ent.Tx) error {
		return tx.Reader.Update().Where(reader.Name("a1")).SetEmail("y").Exec(in(tenants[0]))
	})
	// A write outside client.Tx: entcapture.Driver's own transaction,
	// begun through the same driver, so in the same schema.
	_, err := client.Reader.Delete().Where(reader.Name("b2")).Exec(in(tenants[1]))
	must(t, err)

	want := map[string][]string{
		tenants[0]: {`"name":"a1"`, `"name":"a1"`},
		tenants[1]: {`"name":"b1"`, `"name":"b2"`, `"name":"b2"`},
	}
	for _, s := range tenants {
		var (
			mu  sync.Mutex
			got []string
		)
		r, err := relay.New(db, delivery.Func(func(_ context.Context, e *envelope.Event) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(e.Payload))
			return nil
		}), relay.Config{Name: s, Table: s + ".herald_outbox", MinPollInterval: time.Millisecond, MaxPollInterval: 10 * time.Millisecond})
		must(t, err)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		testkit.Eventually(t, 10*time.Second, func() bool {
			b, err := r.Backlog(ctx)
			return err == nil && b.Pending == 0
		}, "%s's events delivered", s)
		stop()
		must(t, <-done)
		mu.Lock()
		got = inKeyOrder(got)
		if len(got) != len(want[s]) {
			t.Fatalf("%s: delivered %d events, want %d: %v", s, len(got), len(want[s]), got)
		}
		for i, w := range want[s] {
			if !strings.Contains(got[i], w) {
				t.Fatalf("%s: event %d is %s, want it to hold %s", s, i, got[i], w)
			}
		}
		mu.Unlock()
	}
	var stray bool
	must(t, db.QueryRow(`SELECT to_regclass('herald_outbox') IS NOT NULL OR to_regclass('readers') IS NOT NULL`).Scan(&stray))
	if stray {
		t.Fatal("an outbox or readers table outside the tenants' schemas")
	}
}
