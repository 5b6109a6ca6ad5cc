package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

// Customer declares its capture itself: both images, a header from
// Extend taken from the write's context (db.WithContext), and a policy
// that rejects some rows (the failing write must be undone with its
// events).
type Customer struct {
	ID    int64
	Name  string
	Email string `herald:"sensitive"`
	Tier  string
}

var errRejected = errors.New("customer rejected by policy")

func (Customer) ChangeCapture() envelope.Options {
	return envelope.Options{
		Payload: envelope.BeforeAndAfter,
		Extend: func(ctx context.Context, c envelope.Change) (*envelope.Extension, error) {
			if c.After != nil && c.After["name"] == "reject" {
				return nil, errRejected
			}
			tenant, _ := ctx.Value(tenantKey{}).(string)
			if tenant == "" {
				tenant = "none"
			}
			return &envelope.Extension{Headers: map[string]string{"tenant": tenant}}, nil
		},
	}
}

// Order is captured without touching the type (Plugin.Capture), with the
// default After payload, a topic template of its own, and soft delete.
type Order struct {
	ID         int64
	CustomerID int64
	Status     string
	Total      int64
	DeletedAt  gorm.DeletedAt `gorm:"index"`
}

var orderCapture = envelope.Options{Topic: "{namespace}.orders.{operation}"}

var errRollback = errors.New("rolled back on purpose")

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// want is one event the test expects to be delivered.
type want struct {
	Topic   string
	Key     string
	Headers map[string]string
	Payload any // normalized JSON
}

type plan struct {
	events []want
	tenant string // the tenant header Customer events carry
}

func (p *plan) add(topic, key string, headers map[string]string, payload map[string]any) {
	p.events = append(p.events, want{Topic: topic, Key: key, Headers: headers, Payload: normalize(payload)})
}

// tenantKey is a context key a service might set per request.
type tenantKey struct{}

func custRow(c Customer) map[string]any {
	return map[string]any{"id": c.ID, "name": c.Name, "tier": c.Tier} // email is sensitive: left out
}

func (p *plan) customer(op envelope.Operation, before, after *Customer, changed ...string) {
	c := after
	if c == nil {
		c = before
	}
	env := map[string]any{"model": "shop.Customer", "operation": string(op), "pk": c.ID, "changed": nil, "before": nil, "after": nil}
	if op == envelope.Updated {
		env["changed"] = changed
	}
	if before != nil {
		env["before"] = custRow(*before)
	}
	if after != nil {
		env["after"] = custRow(*after)
	}
	p.add("shop.customer."+string(op), fmt.Sprintf("shop.Customer:%d", c.ID), map[string]string{"tenant": p.tenant}, env)
}

func orderRow(o Order, deleted bool) map[string]any {
	row := map[string]any{"id": o.ID, "customer_id": o.CustomerID, "status": o.Status, "total": o.Total, "deleted_at": nil}
	if deleted {
		row["deleted_at"] = anyTime
	}
	return row
}

// order adds an Order event (After mode: "after", or "before" for a
// delete).
func (p *plan) order(op envelope.Operation, o Order, deleted bool, changed ...string) {
	env := map[string]any{"model": "shop.Order", "operation": string(op), "pk": o.ID, "changed": nil}
	if op == envelope.Updated {
		env["changed"] = changed
	}
	if op == envelope.Deleted {
		env["before"] = orderRow(o, deleted)
	} else {
		env["after"] = orderRow(o, deleted)
	}
	p.add("shop.orders."+string(op), fmt.Sprintf("shop.Order:%d", o.ID), nil, env)
}

// check compares the first delivery of each event with the plan: per
// ordering key the same events in the same order; unordered events as a
// set.
func (p *plan) check(t *testing.T, first []got) {
	t.Helper()
	byKey := map[string][]got{}
	for _, g := range first {
		byKey[g.OrderingKey] = append(byKey[g.OrderingKey], g)
	}
	wantByKey := map[string][]want{}
	for _, w := range p.events {
		wantByKey[w.Key] = append(wantByKey[w.Key], w)
	}
	keys := map[string]bool{}
	for k := range byKey {
		keys[k] = true
	}
	for k := range wantByKey {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		gs, ws := byKey[k], wantByKey[k]
		if k == "" { // unordered: compare as sets
			sort.Slice(gs, func(i, j int) bool { return string(gs[i].Payload) < string(gs[j].Payload) })
			ws = slices.Clone(ws)
			sort.Slice(ws, func(i, j int) bool { return jsonText(ws[i].Payload) < jsonText(ws[j].Payload) })
		}
		if len(gs) != len(ws) {
			t.Errorf("ordering key %q: %d events delivered, want %d\n got: %s\nwant: %s", k, len(gs), len(ws), gotList(t, gs), wantList(ws))
			continue
		}
		for i := range ws {
			g, w := gs[i], ws[i]
			payload := decodePayload(t, g)
			if g.Topic != w.Topic || !sameJSON(w.Payload, payload) || !sameHeaders(w.Headers, g.Headers) {
				t.Errorf("ordering key %q, event %d of %d (seq %d):\n got topic %s headers %v payload %s\nwant topic %s headers %v payload %s",
					k, i+1, len(ws), g.Sequence, g.Topic, g.Headers, jsonText(payload), w.Topic, w.Headers, jsonText(w.Payload))
			}
		}
	}
}

func sameHeaders(w, g map[string]string) bool {
	if len(w) == 0 && len(g) == 0 {
		return true
	}
	if len(w) != len(g) {
		return false
	}
	for k, v := range w {
		if g[k] != v {
			return false
		}
	}
	return true
}

func gotList(t *testing.T, gs []got) string {
	s := ""
	for _, g := range gs {
		s += fmt.Sprintf("\n  %s %s", g.Topic, jsonText(decodePayload(t, g)))
	}
	return s
}

func wantList(ws []want) string {
	s := ""
	for _, w := range ws {
		s += fmt.Sprintf("\n  %s %s", w.Topic, jsonText(w.Payload))
	}
	return s
}

func countRows(t *testing.T, db *gorm.DB, model any, query string, args ...any) int64 {
	t.Helper()
	var n int64
	must(t, "count", db.Unscoped().Model(model).Where(query, args...).Count(&n).Error)
	return n
}

// TestRoundTrip writes through every GORM path a service uses — single
// and bulk creates, updates and deletes, soft deletes, Enqueue — in
// committed, rolled-back and partly rolled-back transactions, and checks
// that a relay delivers exactly the committed changes, each envelope as
// specified, in sequence order per ordering key.
//
// It runs with GORM's defaults and with the two settings services often
// turn on for speed: SkipDefaultTransaction (the plugin then opens the
// write's transaction itself) and PrepareStmt.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	eachGORMConfig(t, testRoundTrip)
}

func testRoundTrip(t *testing.T, d envelope.Dialect, gcfg func(*gorm.Config)) {
	s := newStack(t, d, stackOptions{
		namespace: "shop",
		models:    []any{&Customer{}, &Order{}},
		capture:   map[any]envelope.Options{&Order{}: orderCapture},
		gormCfg:   gcfg,
	})
	// Writes run on the request's context, as a service's do; its values
	// reach Extend.
	db := s.db.WithContext(context.WithValue(context.Background(), tenantKey{}, "acme"))
	sk := newSink()
	r := startRelay(t, s.gormSQL, sk.delivery("relay", nil), relay.Config{Wakeup: s.wake})
	p := plan{tenant: "acme"}

	// A single create in GORM's own transaction.
	ann := Customer{Name: "Ann", Email: "ann@example.org", Tier: "basic"}
	must(t, "create Ann", db.Create(&ann).Error)
	p.customer(envelope.Inserted, nil, &ann)

	// A batch create in the caller's transaction.
	batch := []Customer{{Name: "Bob", Email: "bob@example.org", Tier: "basic"}, {Name: "Cid", Email: "cid@example.org", Tier: "basic"}}
	must(t, "batch create", db.Transaction(func(tx *gorm.DB) error { return tx.Create(&batch).Error }))
	bob, cid := batch[0], batch[1]
	p.customer(envelope.Inserted, nil, &bob)
	p.customer(envelope.Inserted, nil, &cid)

	// An update and an enqueued event, committed together.
	must(t, "update and enqueue", db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Customer{ID: ann.ID}).Update("tier", "gold").Error; err != nil {
			return err
		}
		_, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "shop.audit", OrderingKey: "audit:customers",
			Payload: map[string]any{"action": "upgrade", "customer": ann.ID}, Headers: map[string]string{"by": "test"}})
		return err
	}))
	before := ann
	ann.Tier = "gold"
	p.customer(envelope.Updated, &before, &ann, "tier")
	p.add("shop.audit", "audit:customers", map[string]string{"by": "test"}, map[string]any{"action": "upgrade", "customer": ann.ID})

	// A bulk update with Where: one event per matching row (on a db
	// without the request's context).
	res := s.db.Model(&Customer{}).Where("tier = ?", "basic").Update("tier", "silver")
	must(t, "bulk update", res.Error)
	if res.RowsAffected != 2 {
		t.Errorf("bulk update RowsAffected = %d, want 2", res.RowsAffected)
	}
	p.tenant = "none"
	for _, c := range []*Customer{&bob, &cid} {
		b := *c
		c.Tier = "silver"
		p.customer(envelope.Updated, &b, c, "tier")
	}
	p.tenant = "acme"

	// A transaction that returns an error: nothing of it is delivered.
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Customer{Name: "Dan", Email: "dan@example.org", Tier: "basic"}).Error; err != nil {
			return err
		}
		if err := tx.Model(&Customer{ID: ann.ID}).Update("name", "Annie").Error; err != nil {
			return err
		}
		if err := tx.Model(&Order{}).Where("1 = 1").Update("status", "void").Error; err != nil {
			return err
		}
		if _, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "shop.audit", OrderingKey: "audit:customers", Payload: map[string]any{"action": "rolled back"}}); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("rolled-back transaction returned %v, want %v", err, errRollback)
	}

	// A committed transaction with a rolled-back nested savepoint: the
	// outer writes are delivered, the inner ones never.
	eve := Customer{Name: "Eve", Email: "eve@example.org", Tier: "basic"}
	must(t, "transaction with a rolled-back savepoint", db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&eve).Error; err != nil {
			return err
		}
		inner := tx.Transaction(func(tx2 *gorm.DB) error {
			if err := tx2.Model(&Customer{ID: bob.ID}).Update("name", "Robert").Error; err != nil {
				return err
			}
			if err := tx2.Create(&Order{CustomerID: bob.ID, Status: "ghost", Total: 1}).Error; err != nil {
				return err
			}
			if _, err := gormcapture.Enqueue(tx2, envelope.Message{Topic: "shop.audit", OrderingKey: "audit:customers", Payload: map[string]any{"action": "inner"}}); err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(inner, errRollback) {
			return fmt.Errorf("nested transaction returned %w, want errRollback", inner)
		}
		return tx.Model(&Customer{ID: cid.ID}).Updates(map[string]any{"tier": "platinum", "name": "Cid II"}).Error
	}))
	p.customer(envelope.Inserted, nil, &eve)
	b := cid
	cid.Tier, cid.Name = "platinum", "Cid II"
	p.customer(envelope.Updated, &b, &cid, "name", "tier")

	// A write whose capture fails (Extend rejects it) inside the
	// caller's transaction: the caller goes on and commits; the
	// rejected row and its event are gone, the rest commits.
	must(t, "transaction that survives a rejected write", db.Transaction(func(tx *gorm.DB) error {
		err := tx.Create(&Customer{Name: "reject", Email: "x@example.org", Tier: "basic"}).Error
		if err == nil {
			return errors.New("a write whose Extend failed returned no error")
		}
		if !errors.Is(err, errRejected) || !errors.Is(err, envelope.ErrValidation) {
			t.Errorf("rejected write: error %v does not wrap both the Extend error and envelope.ErrValidation", err)
		}
		return tx.Model(&Customer{ID: eve.ID}).Update("tier", "gold").Error
	}))
	b = eve
	eve.Tier = "gold"
	p.customer(envelope.Updated, &b, &eve, "tier")
	if n := countRows(t, db, &Customer{}, "name = ?", "reject"); n != 0 {
		t.Errorf("the rejected row was committed (%d rows): its write must be undone with its event", n)
	}

	// Save of a new row inserts it; an upsert updates the row that
	// conflicts and inserts the other.
	fay := Customer{Name: "Fay", Email: "fay@example.org", Tier: "basic"}
	must(t, "save new", db.Save(&fay).Error)
	p.customer(envelope.Inserted, nil, &fay)
	up := []Customer{{ID: fay.ID, Name: "Fay", Email: "fay@example.org", Tier: "vip"}, {ID: 1000, Name: "Gus", Email: "gus@example.org", Tier: "vip"}}
	must(t, "upsert", db.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "id"}}, DoUpdates: clause.AssignmentColumns([]string{"tier"})}).Create(&up).Error)
	b = fay
	fay.Tier = "vip"
	p.customer(envelope.Updated, &b, &fay, "tier")
	gus := up[1]
	p.customer(envelope.Inserted, nil, &gus)

	// Orders: batch create, soft delete by value, bulk soft delete with
	// Where, then a hard (Unscoped) delete.
	orders := []Order{{CustomerID: ann.ID, Status: "new", Total: 1250}, {CustomerID: bob.ID, Status: "paid", Total: 990}, {CustomerID: cid.ID, Status: "paid", Total: 5}}
	must(t, "create orders", db.Create(&orders).Error)
	for _, o := range orders {
		p.order(envelope.Inserted, o, false)
	}
	must(t, "soft delete", db.Delete(&orders[0]).Error)
	p.order(envelope.Updated, orders[0], true, "deleted_at")
	res = db.Where("status = ?", "paid").Delete(&Order{})
	must(t, "bulk soft delete", res.Error)
	if res.RowsAffected != 2 {
		t.Errorf("bulk soft delete RowsAffected = %d, want 2", res.RowsAffected)
	}
	p.order(envelope.Updated, orders[1], true, "deleted_at")
	p.order(envelope.Updated, orders[2], true, "deleted_at")
	must(t, "hard delete", db.Unscoped().Delete(&Order{}, orders[0].ID).Error)
	p.order(envelope.Deleted, orders[0], true)

	// Hard deletes of customers: by key, and in bulk with Where.
	must(t, "delete by key", db.Delete(&Customer{}, cid.ID).Error)
	p.customer(envelope.Deleted, &cid, nil)
	res = db.Where("tier = ?", "silver").Delete(&Customer{})
	must(t, "bulk delete", res.Error)
	if res.RowsAffected != 1 {
		t.Errorf("bulk delete RowsAffected = %d, want 1 (Bob)", res.RowsAffected)
	}
	p.customer(envelope.Deleted, &bob, nil)

	// Enqueue outside a transaction: unordered, and an idempotency key
	// that yields one event however often it is enqueued.
	_, err = gormcapture.Enqueue(db, envelope.Message{Topic: "shop.newsletter", Payload: map[string]any{"issue": 1}})
	must(t, "enqueue", err)
	p.add("shop.newsletter", "", nil, map[string]any{"issue": 1})
	first, err := gormcapture.Enqueue(db, envelope.Message{Topic: "shop.welcome", IdempotencyKey: "welcome:ann", Payload: map[string]any{"to": ann.ID}})
	must(t, "enqueue idempotent", err)
	again, err := gormcapture.Enqueue(db, envelope.Message{Topic: "shop.welcome", IdempotencyKey: "welcome:ann", Payload: map[string]any{"to": ann.ID}})
	must(t, "enqueue idempotent again", err)
	if first.ID != again.ID {
		t.Errorf("the same idempotency key enqueued twice gave two events: %s and %s", first.ID, again.ID)
	}
	p.add("shop.welcome", "", nil, map[string]any{"to": ann.ID})

	waitDrained(t, r, 30*time.Second)
	uniq, dups := sk.unique()
	if dups != 0 {
		t.Logf("%d duplicate deliveries (allowed: at least once)", dups)
	}
	checkAllDelivered(t, s.gormSQL, uniq)
	checkKeyOrder(t, uniq)
	checkNoRegression(t, sk.deliveries())
	p.check(t, uniq)
}

// TestWakeupDeliversAtOnce runs a relay that polls once a minute: an
// event of a committed write is delivered well within the test's
// deadline only because the plugin's signal after the commit woke the
// relay. A rollback signals nothing and delivers nothing.
func TestWakeupDeliversAtOnce(t *testing.T) {
	t.Parallel()
	for _, gc := range []struct {
		name string
		cfg  func(*gorm.Config)
	}{
		{"gorm-defaults", nil},
		{"skip-default-tx", func(c *gorm.Config) { c.SkipDefaultTransaction = true }},
	} {
		t.Run(gc.name, func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, d envelope.Dialect) { testWakeup(t, d, gc.cfg) })
		})
	}
}

func testWakeup(t *testing.T, d envelope.Dialect, gcfg func(*gorm.Config)) {
	s := newStack(t, d, stackOptions{namespace: "shop", models: []any{&Customer{}}, gormCfg: gcfg})
	db := s.db
	sk := newSink()
	probe := &listenProbe{Wakeup: s.wake}
	r := startRelay(t, s.openPool(t), sk.delivery("relay", nil), relay.Config{
		Wakeup: probe, MinPollInterval: time.Minute, MaxPollInterval: time.Minute,
	})
	probe.waitListening(t)
	const within = 10 * time.Second // polling alone would take a minute
	waitFor := func(n int, what string) {
		t.Helper()
		testkit.Eventually(t, within, func() bool { return sk.count() >= n },
			"%s: %d events delivered, want %d; the wakeup did not reach the relay", what, sk.count(), n)
	}
	wantSignals := func(what string, want ...string) {
		t.Helper()
		if got := s.signals.take(); !slices.Equal(got, want) {
			t.Errorf("%s: the plugin signalled %q, want %q", what, got, want)
		}
	}
	s.signals.take()

	ann := Customer{Name: "Ann", Email: "ann@example.org", Tier: "basic"}
	must(t, "create", db.Create(&ann).Error)
	wantSignals("create", "shop.customer.inserted")
	waitFor(1, "create")

	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Customer{Name: "Dan", Tier: "basic"}).Error; err != nil {
			return err
		}
		if _, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "shop.audit", Payload: map[string]any{"x": 1}}); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("rolled-back transaction returned %v", err)
	}
	wantSignals("rollback") // nothing

	must(t, "update with a rolled-back savepoint", db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Customer{ID: ann.ID}).Update("tier", "gold").Error; err != nil {
			return err
		}
		inner := tx.Transaction(func(tx2 *gorm.DB) error {
			if _, err := gormcapture.Enqueue(tx2, envelope.Message{Topic: "shop.inner", Payload: map[string]any{"x": 2}}); err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(inner, errRollback) {
			return fmt.Errorf("nested transaction returned %w", inner)
		}
		return nil
	}))
	wantSignals("transaction with a rolled-back savepoint", "shop.customer.updated")
	waitFor(2, "update")

	_, err = gormcapture.Enqueue(db, envelope.Message{Topic: "shop.ping", Payload: map[string]any{"x": 3}})
	must(t, "enqueue", err)
	wantSignals("enqueue", "shop.ping")
	waitFor(3, "enqueue")

	waitDrained(t, r, within)
	var topics []string
	for _, g := range sk.deliveries() {
		topics = append(topics, g.Topic)
	}
	if want := []string{"shop.customer.inserted", "shop.customer.updated", "shop.ping"}; !slices.Equal(topics, want) {
		t.Errorf("delivered %q, want %q (nothing of the rollbacks)", topics, want)
	}
	if rows := outbox(t, s.gormSQL); len(rows) != 3 {
		t.Errorf("outbox holds %d events, want 3 (a rollback must leave none)", len(rows))
	}
}

// gatedListen holds a relay's subscription back until open is closed, to
// make the window between a relay's first poll and its subscription (a
// LISTEN round trip, a reconnect) as wide as the test needs.
type gatedListen struct {
	wakeup.Wakeup
	open chan struct{}
}

func (g *gatedListen) Listen(ctx context.Context, fn func([]string)) error {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil
	}
	return g.Wakeup.Listen(ctx, fn)
}

// TestWakeupSubscriptionGap: an event committed after a relay's first poll
// but before its wakeup subscription is in place has its signal lost (no
// one listened yet). The relay should poll once its subscription is up,
// so the event is not left to the next poll, a minute away by default
// with a wakeup.
func TestWakeupSubscriptionGap(t *testing.T) {
	t.Parallel()
	s := newStack(t, envelope.SQLite, stackOptions{namespace: "shop"})
	sk := newSink()
	_, err := gormcapture.Enqueue(s.db, envelope.Message{Topic: "shop.warmup", Payload: map[string]any{"n": 1}})
	must(t, "enqueue warmup", err)
	gate := &gatedListen{Wakeup: s.wake, open: make(chan struct{})}
	startRelay(t, s.openPool(t), sk.delivery("relay", nil), relay.Config{Wakeup: gate, MinPollInterval: time.Minute, MaxPollInterval: time.Minute})
	testkit.Eventually(t, 10*time.Second, func() bool { return sk.count() == 1 }, "the relay's first poll did not deliver the warmup event")
	_, err = gormcapture.Enqueue(s.db, envelope.Message{Topic: "shop.late", Payload: map[string]any{"n": 2}})
	must(t, "enqueue", err) // its signal reaches no one: the relay is not subscribed yet
	close(gate.open)
	testkit.Eventually(t, 10*time.Second, func() bool { return sk.count() == 2 },
		"an event committed while the relay subscribed was not delivered within 10s of the subscription (left to the next poll, a minute later)")
}

// Item is a row whose every update bumps Version, so the order of its
// events can be checked against the row's history.
type Item struct {
	ID      int64 `gorm:"primaryKey;autoIncrement:false"`
	Version int64
}

// TestRelayRestart stops a relay while it holds a batch, with writes going
// on, and hands over to a new relay: nothing is lost, nothing stays
// leased, and per-key order holds across the handover. "graceful": Stop
// waits for the batch in hand, which is marked by the stopping relay.
// "forced": Stop's context ends first, the deliveries are cancelled and
// their events released (not failed) for the next relay.
func TestRelayRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"graceful", "forced"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, d envelope.Dialect) { testRelayRestart(t, d, mode == "forced") })
		})
	}
}

func testRelayRestart(t *testing.T, d envelope.Dialect, forced bool) {
	const items, seeded, hold = 5, 60, 30
	s := newStack(t, d, stackOptions{namespace: "svc", models: []any{&Item{}},
		capture: map[any]envelope.Options{&Item{}: {}}})
	db := s.db
	for i := range int64(items) {
		must(t, "create item", db.Create(&Item{ID: i + 1, Version: 1}).Error)
	}
	bump := func(n int) error {
		return db.Transaction(func(tx *gorm.DB) error {
			id := int64(n%items + 1)
			if err := tx.Model(&Item{ID: id}).Update("version", gorm.Expr("version + 1")).Error; err != nil {
				return err
			}
			_, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "svc.tick", Payload: map[string]any{"n": n}})
			return err
		})
	}
	for n := range seeded {
		must(t, "seed", bump(n))
	}

	// Writes go on during the handover, until the new relay delivers.
	stopWriting := make(chan struct{})
	var writes sync.WaitGroup
	var written atomic.Int64
	written.Store(seeded)
	writes.Go(func() {
		for n := seeded; ; n++ {
			select {
			case <-stopWriting:
				return
			default:
			}
			if err := bump(n); err != nil {
				t.Errorf("write %d during the handover: %v", n, err)
				return
			}
			written.Add(1)
		}
	})
	defer func() {
		select {
		case <-stopWriting:
		default:
			close(stopWriting)
		}
		writes.Wait()
	}()

	sk := newSink()
	holding := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int64
	var once sync.Once
	d1 := sk.delivery("r1", func(ctx context.Context, e *envelope.Event) error {
		if calls.Add(1) <= hold {
			return nil
		}
		once.Do(func() { close(holding) })
		if forced {
			<-ctx.Done() // only the forced stop ends this delivery
			return ctx.Err()
		}
		<-release
		return nil
	})
	cfg := relay.Config{BatchSize: 5, Concurrency: 5, Wakeup: s.wake, MinPollInterval: 10 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond}
	cfg.Name = "r1"
	pool := s.openPool(t)
	r1 := startRelay(t, pool, d1, cfg)
	<-holding // r1 holds a batch mid-stream

	if forced {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := r1.Stop(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop with an ended context while a batch is out = %v, want context.Canceled", err)
		}
	} else {
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stopped <- r1.Stop(ctx)
		}()
		close(release)
		if err := <-stopped; err != nil {
			t.Fatalf("graceful Stop: %v", err)
		}
	}
	<-r1.Stopped()
	byR1 := sk.count()

	// What r1 left: no live lease, no failure counted.
	for _, row := range outbox(t, pool) {
		if row.LeasedBy == "r1" && !row.Published && row.LeaseLive {
			t.Errorf("after r1 stopped, event seq %d is still leased by it (a new relay would wait for the lease to expire)", row.Sequence)
		}
		if row.Attempts != 0 {
			t.Errorf("event seq %d has %d failed attempts; a stop must not count as a failure", row.Sequence, row.Attempts)
		}
	}
	if published := countPublished(t, pool); published != byR1 {
		t.Errorf("r1 delivered %d events but %d are marked published", byR1, published)
	}

	cfg.Name = "r2"
	r2 := startRelay(t, s.openPool(t), sk.delivery("r2", nil), cfg)
	testkit.Eventually(t, 10*time.Second, func() bool { return sk.count() > byR1 },
		"the new relay delivered nothing within 10s (events left leased by the stopped relay?)")
	close(stopWriting)
	writes.Wait()
	waitDrained(t, r2, 30*time.Second)

	uniq, dups := sk.unique()
	if forced && dups != 0 {
		t.Logf("%d duplicate deliveries", dups)
	}
	if !forced && dups != 0 {
		t.Errorf("%d events delivered twice after a graceful stop; the batch in hand must be marked by the stopping relay", dups)
	}
	checkAllDelivered(t, pool, uniq)
	checkKeyOrder(t, uniq)
	checkNoRegression(t, sk.deliveries())
	if want := items + 2*int(written.Load()); len(uniq) != want {
		t.Errorf("%d distinct events delivered, want %d (%d creates, %d committed transactions of 2 events)", len(uniq), want, items, written.Load())
	}
	// Per item, the versions in delivery order are 1, 2, 3, … without a gap.
	next := map[string]int64{}
	for _, g := range uniq {
		if g.OrderingKey == "" {
			continue
		}
		v := versionOf(t, g)
		if next[g.OrderingKey] == 0 {
			next[g.OrderingKey] = 1
		}
		if v != next[g.OrderingKey] {
			t.Errorf("%s: version %d delivered when %d was due", g.OrderingKey, v, next[g.OrderingKey])
		}
		next[g.OrderingKey] = v + 1
	}
}

func versionOf(t *testing.T, g got) int64 {
	p := decodePayload(t, g)
	after, _ := p["after"].(map[string]any)
	v, ok := after["version"].(float64)
	if !ok {
		t.Fatalf("event %s (%s) has no after.version: %s", g.ID, g.Topic, g.Payload)
	}
	return int64(v)
}

func countPublished(t *testing.T, db *sql.DB) int {
	t.Helper()
	n := 0
	for _, r := range outbox(t, db) {
		if r.Published {
			n++
		}
	}
	return n
}
