package relay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestLeasedEventsCarryTheirTenant: a leased event's Tenant is its outbox
// row's tenant column ("" for none), on every dialect, and BacklogByTenant
// counts pending and dead events per tenant, within the relay's Tenants
// (issue 23).
func TestLeasedEventsCarryTheirTenant(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		written := e.enqueue(t,
			envelope.Message{Topic: "t.a", Tenant: "acme", Payload: 1},
			envelope.Message{Topic: "t.a", Tenant: "acme", OrderingKey: "k", Payload: 2},
			envelope.Message{Topic: "t.g", Tenant: "globex", Payload: 3},
			envelope.Message{Topic: "t.none", Payload: 4},
			envelope.Message{Topic: "t.dead", Tenant: "globex", Payload: 5},
		)
		want := map[string]string{}
		for _, w := range written {
			want[w.ID.String()] = w.Tenant
		}

		all := e.newRelay(t, &recorder{}, Config{Name: "all"})
		type count struct{ pending, dead int64 }
		backlog := func(r *Relay) map[string]count {
			t.Helper()
			bs, err := r.BacklogByTenant(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]count{}
			for i, b := range bs {
				if i > 0 && bs[i-1].Tenant >= b.Tenant {
					t.Fatalf("BacklogByTenant not in tenant order: %+v", bs)
				}
				if b.Pending > 0 && b.OldestPendingAge < 0 {
					t.Fatalf("tenant %q: negative age %v", b.Tenant, b.OldestPendingAge)
				}
				m[b.Tenant] = count{b.Pending, b.DeadLettered}
			}
			return m
		}
		if got := backlog(all); len(got) != 3 || got[""] != (count{1, 0}) || got["acme"] != (count{2, 0}) || got["globex"] != (count{2, 0}) {
			t.Fatalf("BacklogByTenant before delivery: %v", got)
		}
		acme := e.newRelay(t, &recorder{}, Config{Name: "acme", Tenants: []string{"acme"}})
		if got := backlog(acme); len(got) != 1 || got["acme"] != (count{2, 0}) {
			t.Fatalf("BacklogByTenant of a relay limited to acme: %v", got)
		}

		rec := &recorder{fail: func(ev *envelope.Event) error {
			if ev.Topic == "t.dead" {
				return delivery.Permanent(errors.New("refused"))
			}
			return nil
		}}
		r := e.newRelay(t, rec, Config{Name: "tenant-relay"})
		start(t, r)
		testkit.Eventually(t, 20*time.Second, func() bool {
			b, err := r.Backlog(ctx)
			return err == nil && b.Pending == 0 && b.DeadLettered == 1
		}, "every event delivered or dead")
		got := rec.events()
		if len(got) != 4 {
			t.Fatalf("%d events delivered, want 4", len(got))
		}
		for _, ev := range got {
			if w, ok := want[ev.ID.String()]; !ok || ev.Tenant != w {
				t.Errorf("event %s (%s): Tenant %q, want %q", ev.ID, ev.Topic, ev.Tenant, w)
			}
			h := delivery.Headers(ev)
			if v, ok := h[delivery.HeaderTenant]; ok != (ev.Tenant != "") || v != ev.Tenant {
				t.Errorf("event %s: header %s = %q (present %v), want %q", ev.ID, delivery.HeaderTenant, v, ok, ev.Tenant)
			}
		}
		if got := backlog(all); len(got) != 1 || got["globex"] != (count{0, 1}) {
			t.Fatalf("BacklogByTenant after delivery: %v", got)
		}
	})
}

// TestNewWantsTheTenantColumn: the lease reads the tenant column (schema
// version 6; MySQL 2), so a table of the version before is an
// ErrConfiguration at New naming the column and Migrate — not a lease
// that fails at every poll.
func TestNewWantsTheTenantColumn(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		withTenant := 6 // the version that added the tenant column
		if e.d == envelope.MySQL {
			withTenant = 2
		}
		if err := envelope.MigrateTo(ctx, e.db, e.d, "", withTenant-1); err != nil {
			t.Fatal(err)
		}
		_, err := New(e.db, &recorder{}, Config{})
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "tenant") || !strings.Contains(err.Error(), "envelope.Migrate") {
			t.Fatalf("New on a version-%d table: %v; want ErrConfiguration naming the tenant column and Migrate", withTenant-1, err)
		}
		if err := envelope.Migrate(ctx, e.db, e.d, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := New(e.db, &recorder{}, Config{}); err != nil {
			t.Fatalf("New after Migrate: %v", err)
		}
	})
}
