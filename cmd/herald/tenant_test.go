package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/heraldgo/herald/admin"
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

// TestNoTenantFlag: an empty name in --tenant ("" or an empty item) names
// the events without a tenant, in the listings, backlog and retry; an
// empty HERALD_TENANT narrows nothing.
func TestNoTenantFlag(t *testing.T) {
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
		envelope.Message{Topic: "shop.order.paid", Payload: 3},
		envelope.Message{Topic: "shop.order.refunded", Payload: 4},
	)
	kill(t, db, d, "receiver down", evs[1], evs[3])

	tenants := func(p admin.Page) string {
		var ts []string
		for _, e := range p.Events {
			ts = append(ts, fmt.Sprintf("%q", e.Tenant))
		}
		return strings.Join(ts, " ")
	}
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"events", "list", "--state", "all", "--tenant", ""}, nil, `"" ""`},
		{[]string{"events", "list", "--state", "all", "--tenant", ",globex"}, nil, `"globex" "" ""`},
		{[]string{"events", "list", "--state", "all", "--tenant", "acme", "--tenant", ""}, nil, `"acme" "" ""`},
		{[]string{"events", "list", "--state", "all"}, []string{"HERALD_TENANT="}, `"acme" "globex" "" ""`},
		{[]string{"dead", "list", "--tenant", ""}, nil, `""`},
	} {
		if got := tenants(pageJSON(t, append(slices.Clone(env), c.env...), c.args...)); got != c.want {
			t.Errorf("%v (env %v): tenants %s, want %s", c.args, c.env, got, c.want)
		}
	}
	if bl := backlogJSON(t, env, "--tenant", ""); len(bl) != 2 || bl["shop.order.paid"].Pending != 1 || bl["shop.order.refunded"].DeadLettered != 1 {
		t.Errorf("backlog --tenant '': %+v", bl)
	}
	var rows []tenantBacklogRow
	out := mustRun(t, env, "backlog", "--by-tenant", "--json", "--tenant", "")
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].Tenant != "" || rows[0].Pending != 1 || rows[0].DeadLettered != 1 {
		t.Errorf("backlog --by-tenant --tenant '': %s", out)
	}
	mustRun(t, env, "dead", "retry", "--tenant", "", "--yes")
	if p := pageJSON(t, env, "dead", "list"); tenants(p) != `"globex"` {
		t.Errorf("after dead retry --tenant '': dead letters of %s, want globex's alone", tenants(p))
	}
}
