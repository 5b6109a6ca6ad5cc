package envelope_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// TestTenantIdempotencyKeys: a key is unique per tenant (schema version 6),
// on every path of the writer: one message, a multi-row VALUES, the
// unnest INSERT (PostgreSQL), and a stored key found again.
func TestTenantIdempotencyKeys(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		first, err := w.Write(ctx, db, []envelope.Message{{Topic: "a", Payload: 1, IdempotencyKey: "k", Tenant: "acme"}})
		if err != nil {
			t.Fatal(err)
		}
		if first.Events[0].Tenant != "acme" {
			t.Fatalf("event tenant %q", first.Events[0].Tenant)
		}
		res, err := w.Write(ctx, db, []envelope.Message{
			{Topic: "b", Payload: 2, IdempotencyKey: "k", Tenant: "acme"},   // stored: acme's event
			{Topic: "c", Payload: 3, IdempotencyKey: "k", Tenant: "globex"}, // another tenant: a new event
			{Topic: "d", Payload: 4, IdempotencyKey: "k"},                   // no tenant: new as well
			{Topic: "e", Payload: 5, IdempotencyKey: "k", Tenant: "globex"}, // repeats globex's within the call
		})
		if err != nil {
			t.Fatal(err)
		}
		ev := res.Events
		if ev[0].ID != first.Events[0].ID || ev[0].Tenant != "acme" {
			t.Fatalf("acme's stored event not returned: %+v", ev[0])
		}
		if ev[1].ID == ev[0].ID || ev[1].Tenant != "globex" || ev[2].ID == ev[1].ID || ev[2].Tenant != "" || ev[3].ID != ev[1].ID {
			t.Fatalf("per-tenant keys: %+v %+v %+v %+v", ev[1], ev[2], ev[3], ev[0])
		}
		if n := count(t, db, ""); n != 3 {
			t.Fatalf("%d events, want 3", n)
		}
		if n := count(t, db, "WHERE tenant = 'globex'"); n != 1 {
			t.Fatalf("%d events of globex, want 1", n)
		}
		// Several events with tenants, without keys: the multi-row paths.
		many := make([]envelope.Message, 5)
		for i := range many {
			many[i] = envelope.Message{Topic: "m", Payload: i, Tenant: []string{"acme", "globex", ""}[i%3]}
		}
		if _, err := w.Write(ctx, db, many); err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.WriteArrays(w)(ctx, db, many); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "WHERE topic = 'm' AND tenant = 'acme'"); n != 4 {
			t.Fatalf("%d acme events of topic m, want 4", n)
		}
		if n := count(t, db, "WHERE topic = 'm' AND tenant = ''"); n != 2 {
			t.Fatalf("%d events of topic m without a tenant, want 2", n)
		}
		if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "a", Payload: 1, Tenant: string(make([]byte, 256))}}); !errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("a NUL tenant: %v", err)
		}
	})
}

// TestTenantMigration: version 6 (2 on MySQL) adds the column to a table
// with events, down takes it away again.
func TestTenantMigration(t *testing.T) {
	t.Parallel()
	for _, c := range dbCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := c.open(t)
			ctx := context.Background()
			// The version before the tenant column: 5 (MySQL: 1).
			before := 5
			if c.dialect == envelope.MySQL {
				before = 1
			}
			if err := envelope.MigrateTo(ctx, db, c.dialect, "", before); err != nil {
				t.Fatal(err)
			}
			w, err := envelope.NewWriter(c.dialect, "")
			if err != nil {
				t.Fatal(err)
			}
			// A table before the version takes events without tenants.
			if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "old", Payload: 1}, {Topic: "old", Payload: 2}}); err != nil {
				t.Fatal(err)
			}
			// A tenant or (but on MySQL) an idempotency key needs it.
			for _, m := range []envelope.Message{{Topic: "t", Payload: 1, Tenant: "a"}, {Topic: "t", Payload: 1, IdempotencyKey: "k"}} {
				if m.IdempotencyKey != "" && c.dialect == envelope.MySQL {
					continue // ON DUPLICATE KEY names no index
				}
				if _, err := w.Write(ctx, db, []envelope.Message{m}); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "envelope.Migrate") {
					t.Fatalf("%+v on a table before version 6: %v", m, err)
				}
			}
			if err := envelope.Migrate(ctx, db, c.dialect, ""); err != nil {
				t.Fatal(err)
			}
			if n := count(t, db, "WHERE tenant = ''"); n != 2 {
				t.Fatalf("%d events without a tenant after the migration, want 2", n)
			}
			if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "new", Payload: 1, Tenant: "t", IdempotencyKey: "k"}}); err != nil {
				t.Fatal(err)
			}
			if err := envelope.MigrateTo(ctx, db, c.dialect, "", before); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "old", Payload: 3}}); err != nil {
				t.Fatal(err)
			}
			if err := envelope.Migrate(ctx, db, c.dialect, ""); err != nil {
				t.Fatal(err)
			}
		})
	}
}
