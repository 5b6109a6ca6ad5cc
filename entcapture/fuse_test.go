package entcapture_test

import (
	"context"
	"fmt"
	"regexp"
	"sync/atomic"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
)

// fusedPair opens two PostgreSQL databases whose clients capture the
// conformance schemas in mode: fused as configured, and the other with a
// TopicFunc giving the same topic, which no fused statement can call: the
// write and its event go the way they went before fused creates.
func fusedPair(t *testing.T, mode envelope.PayloadMode) (fused, other *ent.Client, fusedDB, otherDB *env, cnt *atomic.Int64) {
	t.Helper()
	open := func(topic bool) (*ent.Client, *env, *atomic.Int64) {
		var n atomic.Int64
		db := openDB(t, envelope.Postgres)
		opts := map[string]envelope.Options{}
		for _, s := range []string{"Loan", "Reader", "Tag"} {
			o := envelope.Options{Payload: mode}
			if topic {
				label := map[string]string{"Loan": "Loan", "Reader": "Reader", "Tag": "Tag"}[s]
				o.TopicFunc = func(envelope.Change) string { return label }
				o.Topic = ""
			} else {
				o.Topic = map[string]string{"Loan": "Loan", "Reader": "Reader", "Tag": "Tag"}[s]
			}
			opts[s] = o
		}
		drv := entcapture.Driver(counting{entsql.OpenDB(entDialect(envelope.Postgres), db), &n}, entcapture.Config{Options: opts})
		c := ent.NewClient(ent.Driver(drv))
		createSchema(t, func(ctx context.Context) error { return c.Schema.Create(ctx) })
		return c, &env{dialect: envelope.Postgres, db: db}, &n
	}
	fused, fusedDB, cnt = open(false)
	other, otherDB, _ = open(true)
	return fused, other, fusedDB, otherDB, cnt
}

var occurredAt = regexp.MustCompile(`"occurred_at":"[^"]*"`)

// TestFusedCreate: on PostgreSQL a single-row Create through
// entcapture.Driver is written with its event by one statement, in a
// caller's transaction (no savepoint) and without one (no transaction),
// for a generated id (RETURNING) and a given one (Exec); its events are
// byte for byte those of the unfused path (occurred_at aside), with the
// same topic and ordering key, and ent returns the same entities.
func TestFusedCreate(t *testing.T) {
	t.Parallel()
	for _, mode := range []envelope.PayloadMode{envelope.Keys, envelope.After, envelope.BeforeAndAfter} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			t.Parallel()
			fused, other, fe, oe, cnt := fusedPair(t, mode)
			ctx := context.Background()
			note := "quote \" back\\slash \u2028 sep \u2029 é 😀 <&>"
			type write struct {
				name string
				f    func(c *ent.Client) (any, error)
			}
			writes := []write{
				{"loan", func(c *ent.Client) (any, error) {
					return c.Loan.Create().SetStatus("lent").SetDays(3).SetReturned(false).Save(ctx)
				}},
				{"loan with optional fields", func(c *ent.Client) (any, error) {
					return c.Loan.Create().SetStatus(note).SetDays(-7).SetReturned(true).SetNote(note).SetReaderID(42).Save(ctx)
				}},
				{"loan with its id", func(c *ent.Client) (any, error) {
					return c.Loan.Create().SetID(1000).SetStatus("lent").SetDays(1).SetReturned(false).Save(ctx)
				}},
				{"reader (sensitive field)", func(c *ent.Client) (any, error) {
					return c.Reader.Create().SetName("Ann").SetEmail("ann@example.com").Save(ctx)
				}},
				{"tag (string id)", func(c *ent.Client) (any, error) {
					return c.Tag.Create().SetID("k\u2028").SetLabel(note).Save(ctx)
				}},
			}
			for _, inTx := range []bool{false, true} {
				for _, w := range writes {
					run := func(c *ent.Client) any {
						if !inTx {
							v, err := w.f(c)
							must(t, err)
							return v
						}
						tx, err := c.Tx(ctx)
						must(t, err)
						v, err := w.f(tx.Client())
						must(t, err)
						must(t, tx.Commit())
						return v
					}
					if inTx && w.name == "loan with its id" {
						continue // the id is taken
					}
					if inTx && w.name == "tag (string id)" {
						continue
					}
					cnt.Store(0)
					fv := run(fused)
					if n := cnt.Load(); n != 1 {
						t.Errorf("%s (in tx %v): %d statements, want 1", w.name, inTx, n)
					}
					ov := run(other)
					if fmtEntity(fv) != fmtEntity(ov) {
						t.Errorf("%s: ent returned %s, unfused %s", w.name, fmtEntity(fv), fmtEntity(ov))
					}
				}
			}
			fev, oev := fe.events(t), oe.events(t)
			if len(fev) != len(oev) || len(fev) != 8 {
				t.Fatalf("%d fused events, %d unfused, want 8", len(fev), len(oev))
			}
			for i := range fev {
				fp := occurredAt.ReplaceAllString(string(fev[i].Payload), "")
				op := occurredAt.ReplaceAllString(string(oev[i].Payload), "")
				if fp != op || fev[i].Topic != oev[i].Topic || fev[i].OrderingKey != oev[i].OrderingKey {
					t.Errorf("event %d:\nfused   %s %q %s\nunfused %s %q %s", i, fev[i].Topic, fev[i].OrderingKey, fev[i].Payload, oev[i].Topic, oev[i].OrderingKey, oev[i].Payload)
				}
			}
		})
	}
}

func fmtEntity(v any) string {
	switch e := v.(type) {
	case *ent.Loan:
		e2 := *e
		return e2.String()
	case *ent.Reader:
		return e.String()
	case *ent.Tag:
		return e.String()
	}
	return "?"
}

// TestFusedCreateFails: a fused create that the database refuses returns
// ent's own error (a *ent.ConstraintError) and writes neither the row nor
// an event; rolled back in a caller's transaction, it leaves nothing.
func TestFusedCreateFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres, entcapture.Config{})
	ctx := context.Background()
	e.client.Tag.Create().SetID("a").SetLabel("x").SaveX(ctx)
	_, err := e.client.Tag.Create().SetID("a").SetLabel("y").Save(ctx)
	if !ent.IsConstraintError(err) {
		t.Fatalf("duplicate id: err = %v, want ent's ConstraintError", err)
	}
	if n := e.count(t, "tags"); n != 1 {
		t.Fatalf("%d tags", n)
	}
	if n := len(e.events(t)); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	tx, err := e.client.Tx(ctx)
	must(t, err)
	tx.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx)
	if _, err := tx.Tag.Create().SetID("a").SetLabel("z").Save(ctx); !ent.IsConstraintError(err) {
		t.Fatalf("duplicate id in tx: err = %v, want ent's ConstraintError", err)
	}
	must(t, tx.Rollback())
	if n := e.count(t, "loans"); n != 0 {
		t.Fatalf("%d loans after the rollback", n)
	}
	if n := len(e.events(t)); n != 1 {
		t.Fatalf("%d events after the rollback, want 1", n)
	}
}

// TestFusedCreateFallback: where the create cannot be fused — an upsert
// (whose conflict the capture hook learns only right before the INSERT),
// an Extend, a client without entcapture.Driver in client.Tx — it is
// captured as before: a savepoint around it in the caller's transaction.
func TestFusedCreateFallback(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	db := openDB(t, envelope.Postgres)
	raw := counting{entsql.OpenDB(entDialect(envelope.Postgres), db), &n}
	cfg := failing(envelope.After)
	c := ent.NewClient(ent.Driver(entcapture.Driver(raw, cfg)))
	plain := ent.NewClient(ent.Driver(raw))
	createSchema(t, func(ctx context.Context) error { return c.Schema.Create(ctx) })
	e := &env{dialect: envelope.Postgres, db: db}
	ctx := context.Background()
	count := func(name string, want int64, f func()) {
		t.Helper()
		n.Store(0)
		f()
		if got := n.Load(); got != want {
			t.Errorf("%s: %d statements, want %d", name, got, want)
		}
	}
	count("Extend, no tx", 2, func() { c.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx) })
	count("Extend, caller tx", 4, func() {
		tx, err := c.Tx(ctx)
		must(t, err)
		tx.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx)
		must(t, tx.Commit())
	})
	// The upsert's INSERT, classified by its own RETURNING, and the event INSERT.
	count("upsert, no tx", 2, func() {
		c.Tag.Create().SetID("a").SetLabel("x").OnConflictColumns("code").UpdateNewValues().ExecX(ctx)
	})
	count("upsert, caller tx", 4, func() {
		tx, err := c.Tx(ctx)
		must(t, err)
		tx.Tag.Create().SetID("a").SetLabel("y").OnConflictColumns("code").UpdateNewValues().ExecX(ctx)
		must(t, tx.Commit())
	})
	count("no wrapper, caller tx", 4, func() {
		tx, err := plain.Tx(ctx)
		must(t, err)
		tx.Tag.Create().SetID("b").SetLabel("x").SaveX(ctx)
		must(t, tx.Commit())
	})
	evs := e.events(t)
	if len(evs) != 5 {
		t.Fatalf("%d events, want 5", len(evs))
	}
	for i, want := range []string{`"operation":"inserted"`, `"operation":"inserted"`, `"operation":"inserted"`, `"operation":"updated"`, `"operation":"inserted"`} {
		if !regexp.MustCompile(want).Match(evs[i].Payload) {
			t.Errorf("event %d: %s, want %s", i, evs[i].Payload, want)
		}
	}
}
