package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

// TestTenants: the admin shows each event's tenant, Query.Tenants selects
// a tenant's events (List, Retry), and BacklogByTenant counts pending and
// dead events per tenant, on every dialect (issue 23).
func TestTenants(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.adm.Pause(ctx, "held", ""); err != nil {
			t.Fatal(err)
		}
		dead := e.enqueue(t,
			envelope.Message{Topic: "dead", Tenant: "acme", Payload: map[string]any{"fail": 1}},
			envelope.Message{Topic: "dead", Tenant: "globex", Payload: map[string]any{"fail": 2}},
			envelope.Message{Topic: "dead", Payload: map[string]any{"fail": 3}},
		)
		e.waitDead(t, dead...)
		e.enqueue(t,
			envelope.Message{Topic: "held", Tenant: "acme", Payload: 1},
			envelope.Message{Topic: "held", Tenant: "acme", Payload: 2},
		)
		b, err := e.adm.BacklogByTenant(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []admin.TenantBacklog{{Tenant: "", DeadLettered: 1}, {Tenant: "acme", Pending: 2, DeadLettered: 1}, {Tenant: "globex", DeadLettered: 1}}
		if len(b) != len(want) {
			t.Fatalf("BacklogByTenant %+v, want %+v", b, want)
		}
		for i, w := range want {
			if g := b[i]; g.Tenant != w.Tenant || g.Pending != w.Pending || g.DeadLettered != w.DeadLettered || (g.Pending > 0) != (g.OldestPendingAge > 0) {
				t.Fatalf("BacklogByTenant[%d] = %+v, want %+v", i, g, w)
			}
		}

		p, err := e.adm.List(ctx, admin.Query{State: admin.StateAll, Tenants: []string{"acme"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) != 3 {
			t.Fatalf("List of acme: %d events, want 3", len(p.Events))
		}
		for _, ev := range p.Events {
			if ev.Tenant != "acme" {
				t.Fatalf("List of acme gave %+v", ev)
			}
		}
		p, err = e.adm.List(ctx, admin.Query{Tenants: []string{""}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) != 1 || p.Events[0].ID != dead[2].ID || p.Events[0].Tenant != "" {
			t.Fatalf("List of the dead letters without a tenant: %+v", p.Events)
		}
		if d := e.state(t, dead[1].ID); d.Tenant != "globex" {
			t.Fatalf("Get: tenant %q, want globex", d.Tenant)
		}

		e.recv.heal()
		n, err := e.adm.Retry(ctx, admin.Query{Tenants: []string{"globex"}})
		if err != nil || n != 1 {
			t.Fatalf("Retry of globex: %d, %v; want 1", n, err)
		}
		waitFor(t, "globex's dead letter delivered", func() bool { return e.recv.delivered(dead[1].ID) })
		if e.recv.delivered(dead[0].ID) || e.recv.delivered(dead[2].ID) {
			t.Fatal("Retry of globex retried another tenant's dead letter")
		}
	})
}

// TestHandlerTenants: the JSON API filters events by tenant and reports
// the backlog by tenant (api/backlog?by=tenant); the page shows each dead
// letter's tenant, a backlog per tenant and a tenant filter.
func TestHandlerTenants(t *testing.T) {
	e := newEnv(t, envelope.SQLite)
	srv := e.server(t, &authLog{})
	base := srv.URL + "/herald/"
	evs := e.enqueue(t,
		envelope.Message{Topic: "dead", Tenant: "acme", Payload: map[string]any{"fail": 1}},
		envelope.Message{Topic: "dead", Tenant: "globex", Payload: map[string]any{"fail": 2}},
	)
	e.waitDead(t, evs...)
	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		return do(t, req)
	}
	code, body := get("api/events?tenant=globex")
	var p admin.Page
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil || len(p.Events) != 1 || p.Events[0].Tenant != "globex" || !strings.Contains(body, `"tenant":"globex"`) {
		t.Fatalf("GET api/events?tenant=globex: %d %s", code, body)
	}
	code, body = get("api/backlog?by=tenant")
	var tb []admin.TenantBacklog
	if code != 200 || json.Unmarshal([]byte(body), &tb) != nil || len(tb) != 2 || tb[0].Tenant != "acme" || tb[1].DeadLettered != 1 {
		t.Fatalf("GET api/backlog?by=tenant: %d %s", code, body)
	}
	if code, body = get("api/backlog?by=colour"); code != 400 || !strings.Contains(body, "by") {
		t.Fatalf("GET api/backlog?by=colour: %d %s; want 400", code, body)
	}
	code, body = get("?tenant=acme")
	if code != 200 || !strings.Contains(body, `id="tenants"`) || !strings.Contains(body, "tenant <code>acme</code>") ||
		strings.Contains(body, "tenant <code>globex</code>") || !strings.Contains(body, `name="tenant" value="acme"`) {
		t.Fatalf("page filtered to acme: %d\n%s", code, body)
	}
}

// TestBacklogFollowsRelayFilters: with a Config.Relay that delivers some
// topics and tenants only, Backlog and BacklogByTenant count those events
// alone (a paused topic outside them is not listed); without a Relay, or
// with one without filters, they count the whole table.
func TestBacklogFollowsRelayFilters(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, topic := range []string{"shop.held", "other.held"} {
			if err := e.adm.Pause(ctx, topic, ""); err != nil {
				t.Fatal(err)
			}
		}
		dead := e.enqueue(t,
			envelope.Message{Topic: "shop.dead", Tenant: "globex", Payload: map[string]any{"fail": 1}},
			envelope.Message{Topic: "other.dead", Payload: map[string]any{"fail": 2}},
		)
		e.waitDead(t, dead...)
		e.enqueue(t,
			envelope.Message{Topic: "shop.held", Tenant: "acme", Payload: 1},
			envelope.Message{Topic: "shop.held", Tenant: "acme", Payload: 2},
			envelope.Message{Topic: "other.held", Tenant: "acme", Payload: 3},
			envelope.Message{Topic: "other.held", Tenant: "globex", Payload: 4},
		)
		narrow := func(cfg relay.Config) *admin.Admin {
			t.Helper()
			cfg.Logger = slog.New(slog.DiscardHandler)
			r, err := relay.New(e.db, e.recv, cfg) // never started
			if err != nil {
				t.Fatal(err)
			}
			a, err := admin.New(admin.Config{DB: e.db, Relay: r, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		own, err := admin.New(admin.Config{DB: e.db, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		topics := func(a *admin.Admin) string {
			t.Helper()
			b, err := a.Backlog(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, x := range b {
				s = append(s, fmt.Sprintf("%s:%d/%d/%t", x.Topic, x.Pending, x.DeadLettered, x.Paused))
			}
			return strings.Join(s, " ")
		}
		tenants := func(a *admin.Admin) string {
			t.Helper()
			b, err := a.BacklogByTenant(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, x := range b {
				if (x.Pending > 0) != (x.OldestPendingAge > 0) {
					t.Errorf("tenant %q: %d pending, oldest %v", x.Tenant, x.Pending, x.OldestPendingAge)
				}
				s = append(s, fmt.Sprintf("%q:%d/%d", x.Tenant, x.Pending, x.DeadLettered))
			}
			return strings.Join(s, " ")
		}
		for _, c := range []struct {
			what            string
			a               *admin.Admin
			topics, tenants string
		}{
			{"the env's relay (no filters)", e.adm,
				"other.dead:0/1/false other.held:2/0/true shop.dead:0/1/false shop.held:2/0/true", `"":0/1 "acme":3/0 "globex":1/1`},
			{"no Relay", own,
				"other.dead:0/1/false other.held:2/0/true shop.dead:0/1/false shop.held:2/0/true", `"":0/1 "acme":3/0 "globex":1/1`},
			{"Topics shop.*", narrow(relay.Config{Topics: []string{"shop.*"}}),
				"shop.dead:0/1/false shop.held:2/0/true", `"acme":2/0 "globex":0/1`},
			{"ExcludeTopics shop.*", narrow(relay.Config{ExcludeTopics: []string{"shop.*"}}),
				"other.dead:0/1/false other.held:2/0/true", `"":0/1 "acme":1/0 "globex":1/0`},
			{"Tenants acme", narrow(relay.Config{Tenants: []string{"acme"}}),
				"other.held:1/0/true shop.held:2/0/true", `"acme":3/0`},
		} {
			if got := topics(c.a); got != c.topics {
				t.Errorf("%s: Backlog %s, want %s", c.what, got, c.topics)
			}
			if got := tenants(c.a); got != c.tenants {
				t.Errorf("%s: BacklogByTenant %s, want %s", c.what, got, c.tenants)
			}
		}
	})
}

// TestHandlerNoTenant: in the JSON API an empty tenant value (tenant=)
// selects the events without a tenant, alone or beside named tenants; no
// tenant parameter selects every tenant; the page's form, whose tenant
// field is empty when it does not filter, still retries every tenant's
// dead letters.
func TestHandlerNoTenant(t *testing.T) {
	e := newEnv(t, envelope.SQLite)
	srv := e.server(t, &authLog{})
	base := srv.URL + "/herald/"
	evs := e.enqueue(t,
		envelope.Message{Topic: "dead", Tenant: "acme", Payload: map[string]any{"fail": 1}},
		envelope.Message{Topic: "dead", Tenant: "globex", Payload: map[string]any{"fail": 2}},
		envelope.Message{Topic: "dead", Payload: map[string]any{"fail": 3}},
	)
	e.waitDead(t, evs...)
	list := func(query string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"api/events"+query, nil)
		code, body := do(t, req)
		var p admin.Page
		if code != 200 || json.Unmarshal([]byte(body), &p) != nil {
			t.Fatalf("GET api/events%s: %d %s", query, code, body)
		}
		var ts []string
		for _, ev := range p.Events {
			ts = append(ts, fmt.Sprintf("%q", ev.Tenant))
		}
		return strings.Join(ts, " ")
	}
	for _, c := range []struct{ query, want string }{
		{"", `"acme" "globex" ""`},
		{"?tenant=", `""`},
		{"?tenant=%20", `""`},
		{"?tenant=&tenant=globex", `"globex" ""`},
		{"?tenant=acme", `"acme"`},
	} {
		if got := list(c.query); got != c.want {
			t.Errorf("GET api/events%s: tenants %s, want %s", c.query, got, c.want)
		}
	}

	// The page's retry form with every filter field empty.
	req, _ := http.NewRequest(http.MethodGet, base, nil)
	_, page := do(t, req)
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if token == nil {
		t.Fatal("no form token on the page")
	}
	e.recv.heal()
	v := url.Values{"csrf": {token[1]}, "topic": {""}, "key": {""}, "tenant": {""}, "error": {""}}
	req, _ = http.NewRequest(http.MethodPost, base+"retry", strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if code, body := do(t, req); code != http.StatusSeeOther {
		t.Fatalf("retry form: %d %s", code, body)
	}
	for _, ev := range evs {
		waitFor(t, "every tenant's dead letter delivered", func() bool { return e.recv.delivered(ev.ID) })
	}
}
