package capturecases_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// TestSchemaPerTenant: with a schema per tenant and the search_path
// switched per request (as gorm-multitenancy does), each tenant's
// captured writes put their events in the outbox of the tenant's own
// schema — the plugin's unqualified outbox table resolves through the
// same search_path as the write — and a relay per schema
// (relay.Config.Table "tenant_a.herald_outbox") delivers that tenant's
// events and no other's (issue 23).
func TestSchemaPerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testkit.Postgres(t)
	gdb, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	must(t, err)
	var own string // the test's schema: the tenants' are named after it
	must(t, db.QueryRow(`SELECT current_schema()`).Scan(&own))
	own = own[:min(len(own), 50)]
	tenants := []string{own + "_ta", own + "_tb"}
	for _, s := range tenants {
		_, err := db.Exec(`CREATE SCHEMA ` + s)
		must(t, err)
		t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA ` + s + ` CASCADE`) })
		must(t, envelope.Migrate(ctx, db, envelope.Postgres, s+".herald_outbox"))
		must(t, gdb.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(`SET LOCAL search_path TO ` + s).Error; err != nil {
				return err
			}
			return tx.AutoMigrate(&Reader{})
		}))
	}
	p := gormcapture.New(gormcapture.Config{})
	must(t, gdb.Use(p))
	must(t, p.Capture(&Reader{}, envelope.Options{}))

	// One request per tenant: its transaction's search_path is its schema.
	request := func(schema string, f func(tx *gorm.DB) error) {
		t.Helper()
		must(t, gdb.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(`SET LOCAL search_path TO ` + schema).Error; err != nil {
				return err
			}
			return f(tx)
		}))
	}
	request(tenants[0], func(tx *gorm.DB) error { return tx.Create(&Reader{Name: "a1", Email: "x"}).Error })
	request(tenants[1], func(tx *gorm.DB) error {
		return tx.Create(&[]Reader{{Name: "b1", Email: "x"}, {Name: "b2", Email: "x"}}).Error
	})
	request(tenants[0], func(tx *gorm.DB) error {
		return tx.Model(&Reader{}).Where("name = ?", "a1").Update("email", "y").Error
	})
	request(tenants[1], func(tx *gorm.DB) error { return tx.Where("name = ?", "b2").Delete(&Reader{}).Error })

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
	// No event went to an outbox outside the tenants' schemas.
	var stray bool
	must(t, db.QueryRow(`SELECT to_regclass('herald_outbox') IS NOT NULL`).Scan(&stray))
	if stray {
		t.Fatal("an outbox table outside the tenants' schemas")
	}
}

// inKeyOrder returns the payloads of delivered events ordered by their
// row's key ("pk"), each key's events in delivery order: the order the
// relay promises is per key, and events of two rows (two keys) may be
// delivered in either order.
func inKeyOrder(payloads []string) []string {
	pk := regexp.MustCompile(`"pk":("[^"]*"|[^,}]*)`)
	key := func(p string) string {
		if m := pk.FindStringSubmatch(p); m != nil {
			return m[1]
		}
		return ""
	}
	out := slices.Clone(payloads)
	slices.SortStableFunc(out, func(a, b string) int { return strings.Compare(key(a), key(b)) })
	return out
}
