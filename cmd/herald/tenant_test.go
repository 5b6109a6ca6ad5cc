package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestTenantFlags: --tenant narrows dead list, events list and backlog to
// tenants; backlog --by-tenant counts per tenant; the tables and show
// name each event's tenant (issue 23).
func TestTenantFlags(t *testing.T) {
	dsn := testkit.ModerncDSN(testkit.SQLitePath(t))
	env := []string{"HERALD_DSN=" + dsn}
	mustRun(t, env, "migrate", "up")
	d := dialectOf(dsn)
	db, err := migrate.Open(d, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs := writeEvents(t, db, d,
		envelope.Message{Topic: "shop.order.placed", Tenant: "acme", Payload: 1},
		envelope.Message{Topic: "shop.order.placed", Tenant: "globex", Payload: 2},
		envelope.Message{Topic: "shop.order.paid", Tenant: "acme", Payload: 3},
		envelope.Message{Topic: "shop.order.paid", Payload: 4},
	)
	kill(t, db, d, "receiver down", evs[0], evs[1])

	if got := topicsOf(pageJSON(t, env, "dead", "list", "--tenant", "globex")); got != "shop.order.placed" {
		t.Errorf("dead list --tenant globex: %q", got)
	}
	if p := pageJSON(t, env, "events", "list", "--state", "all", "--tenant", "acme"); len(p.Events) != 2 || p.Events[0].Tenant != "acme" || p.Events[1].Tenant != "acme" {
		t.Errorf("events list --tenant acme: %+v", p.Events)
	}
	if table := mustRun(t, env, "events", "list", "--state", "all"); !regexp.MustCompile(`(?m)^SEQUENCE\s+ID\s+STATE\s+TOPIC\s+KEY\s+TENANT\s`).MatchString(table) ||
		!strings.Contains(table, "globex") {
		t.Errorf("events list table without a TENANT column:\n%s", table)
	}
	if show := mustRun(t, env, "dead", "show", evs[1].ID.String()); !regexp.MustCompile(`(?m)^tenant:\s+globex$`).MatchString(show) {
		t.Errorf("dead show without the tenant:\n%s", show)
	}

	var rows []tenantBacklogRow
	out := mustRun(t, env, "backlog", "--by-tenant", "--json")
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("backlog --by-tenant --json: %v\n%s", err, out)
	}
	if len(rows) != 3 || rows[0].Tenant != "" || rows[0].Pending != 1 || rows[1].Tenant != "acme" || rows[1].Pending != 1 || rows[1].DeadLettered != 1 ||
		rows[2].Tenant != "globex" || rows[2].DeadLettered != 1 {
		t.Fatalf("backlog --by-tenant --json: %+v", rows)
	}
	if table := mustRun(t, env, "backlog", "--by-tenant"); !regexp.MustCompile(`(?m)^acme\s+1\s+\S+\s+1$`).MatchString(table) || !regexp.MustCompile(`(?m)^-\s+1\s`).MatchString(table) {
		t.Fatalf("backlog --by-tenant table:\n%s", table)
	}
	if bl := backlogJSON(t, env, "--tenant", "acme"); len(bl) != 2 || bl["shop.order.placed"].DeadLettered != 1 || bl["shop.order.paid"].Pending != 1 {
		t.Fatalf("backlog --tenant acme: %+v", bl)
	}
}
