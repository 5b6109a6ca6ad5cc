package capturecases_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// TestTenants: a model naming its tenant column (Options.Tenant; here the
// readers' name) through gormcapture and through entcapture writes
// events whose envelope says the tenant and whose outbox row holds it
// (the leased Event.Tenant and its herald-tenant header carry it);
// relays limited to a tenant (relay.Config.Tenants) each deliver that
// tenant's events and no other's; a tenant column the table lacks fails
// at start-up, naming the model and the column (issue 23).
func TestTenants(t *testing.T) {
	t.Parallel()
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			gcfg := &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
			var (
				db  *sql.DB
				gdb *gorm.DB
				err error
			)
			name := dialect.SQLite
			if d == envelope.Postgres {
				var dsn string
				db, dsn = testkit.Postgres(t)
				gdb, err = gorm.Open(postgres.Open(dsn), gcfg)
				name = dialect.Postgres
			} else {
				dsn := testkit.MattnDSN(testkit.SQLitePath(t))
				db, err = sql.Open("sqlite3", dsn)
				must(t, err)
				gdb, err = gorm.Open(sqlite.Open(dsn), gcfg)
			}
			must(t, err)
			must(t, envelope.Migrate(ctx, db, d, ""))
			opts := envelope.Options{Tenant: "name", Payload: envelope.BeforeAndAfter}

			// A column the table lacks: refused by Driver and by Capture.
			bad := entcapture.Driver(entsql.OpenDB(name, db), entcapture.Config{Options: map[string]envelope.Options{"Reader": {Tenant: "org"}}})
			if err := bad.Err(); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "Reader") || !strings.Contains(err.Error(), `"org"`) {
				t.Fatalf("entcapture.Driver with a missing tenant column: %v", err)
			}

			client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(name, db),
				entcapture.Config{Options: map[string]envelope.Options{"Reader": opts}})))
			must(t, createEntSchema(func() error { return client.Schema.Create(ctx) }))
			p := gormcapture.New(gormcapture.Config{})
			must(t, gdb.Use(p))
			if err := p.Capture(&Reader{}, envelope.Options{Tenant: "org"}); !errors.Is(err, envelope.ErrConfiguration) ||
				!strings.Contains(err.Error(), "Reader") || !strings.Contains(err.Error(), `"org"`) {
				t.Fatalf("Capture with a missing tenant column: %v", err)
			}
			must(t, p.Capture(&Reader{}, opts))

			// Two tenants' writes, through both ORMs.
			must(t, gdb.Create(&[]Reader{{Name: "acme", Email: "a@x"}, {Name: "globex", Email: "g@x"}}).Error)
			r := client.Reader.Create().SetName("acme").SetEmail("b@x").SaveX(ctx)
			client.Reader.UpdateOne(r).SetEmail("c@x").ExecX(ctx)
			must(t, gdb.Where("name = ?", "globex").Delete(&Reader{}).Error)
			client.Reader.Create().SetName("globex").SetEmail("h@x").ExecX(ctx)

			perTenant := map[string]int{}
			for _, tn := range []string{"", "acme", "globex"} {
				var n int
				must(t, db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE tenant = `+map[bool]string{true: "$1", false: "?"}[d == envelope.Postgres], tn).Scan(&n))
				if n > 0 {
					perTenant[tn] = n
				}
			}
			if perTenant["acme"] != 3 || perTenant["globex"] != 3 || len(perTenant) != 2 {
				t.Fatalf("outbox tenants %v, want acme 3, globex 3", perTenant)
			}

			for _, tenant := range []string{"acme", "globex"} {
				var (
					mu  sync.Mutex
					got []*envelope.Event
				)
				rl, err := relay.New(db, delivery.Func(func(_ context.Context, e *envelope.Event) error {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, e)
					return nil
				}), relay.Config{Name: "tenant-" + tenant, Tenants: []string{tenant}, MinPollInterval: time.Millisecond, MaxPollInterval: 10 * time.Millisecond})
				must(t, err)
				b, err := rl.Backlog(ctx)
				must(t, err)
				if b.Pending != 3 {
					t.Fatalf("%s: backlog %d pending, want 3", tenant, b.Pending)
				}
				rctx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- rl.Run(rctx) }()
				testkit.Eventually(t, 10*time.Second, func() bool {
					b, err := rl.Backlog(ctx)
					return err == nil && b.Pending == 0
				}, "%s's events delivered", tenant)
				stop()
				must(t, <-done)
				mu.Lock()
				if len(got) != 3 {
					t.Fatalf("%s: %d events delivered, want 3", tenant, len(got))
				}
				for _, e := range got {
					if !strings.Contains(string(e.Payload), `"tenant":"`+tenant+`"`) || e.Tenant != tenant || delivery.Headers(e)[delivery.HeaderTenant] != tenant {
						t.Fatalf("%s's relay delivered %s (Tenant %q)", tenant, e.Payload, e.Tenant)
					}
				}
				mu.Unlock()
			}
		})
	}
}
