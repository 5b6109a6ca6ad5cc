package gormcapture_test

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// One declaration on an embedded base struct captures every model built
// on it, each under its own name.
type Audited struct{}

func (Audited) ChangeCapture() envelope.Options {
	return envelope.Options{Payload: envelope.Keys, Namespace: "shop"}
}

type Order struct {
	Audited
	ID    int64
	Total int
}

type Invoice struct {
	Audited
	ID     int64
	Number string
}

type Plain struct {
	ID int64
}

type BadFields struct {
	ID   int64
	Name string
}

func (BadFields) ChangeCapture() envelope.Options {
	return envelope.Options{Fields: []string{"name", "nope"}}
}

type Outbox struct {
	Sequence int64 `gorm:"primaryKey"`
}

func (Outbox) TableName() string { return "herald_outbox" }

func TestEmbeddedDeclaration(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{}, &Order{}, &Invoice{}, &Plain{})
		must(t, e.db.Create(&Order{Total: 5}).Error)
		must(t, e.db.Create(&Invoice{Number: "I-1"}).Error)
		must(t, e.db.Create(&Plain{}).Error)
		evs := e.events(t)
		if len(evs) != 2 {
			t.Fatalf("events: %s", dump(evs))
		}
		if evs[0].Topic != "shop.order.inserted" || evs[0].Payload["model"] != "shop.Order" || evs[0].OrderingKey != "shop.Order:1" {
			t.Errorf("order event: %s", dump(evs[:1]))
		}
		if evs[1].Topic != "shop.invoice.inserted" || evs[1].Payload["model"] != "shop.Invoice" {
			t.Errorf("invoice event: %s", dump(evs[1:]))
		}
		if _, ok := evs[0].Payload["after"]; ok {
			t.Errorf("Keys mode has no after: %v", evs[0].Payload)
		}
	})
}

// Declarations are validated when the plugin is installed (Config.Models)
// or when Capture is called after it; errors name the model and option.
func TestRegistrationErrors(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		db, _ := openDB(t, d, nil)
		err := db.Use(gormcapture.New(gormcapture.Config{Models: []any{&BadFields{}}}))
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "BadFields") || !strings.Contains(err.Error(), "Fields") || !strings.Contains(err.Error(), "nope") {
			t.Errorf("unknown Fields column: %v", err)
		}

		// A listed model that is neither captured nor declares a
		// constraint the plugin follows does nothing: refused (issue 23).
		db, _ = openDB(t, d, nil)
		err = db.Use(gormcapture.New(gormcapture.Config{Models: []any{&Plain{}}}))
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "Config.Models") || !strings.Contains(err.Error(), "Plain") {
			t.Errorf("listed, not captured: %v", err)
		}
		// Captured before db.Use, it may be listed.
		db, _ = openDB(t, d, nil)
		p := gormcapture.New(gormcapture.Config{Models: []any{&Plain{}}})
		must(t, p.Capture(&Plain{}, envelope.Options{}))
		must(t, db.Use(p))
		// A tenant column the model lacks, named by Capture.
		err = p.Capture(&Plain{}, envelope.Options{Tenant: "org_id"})
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "Plain") || !strings.Contains(err.Error(), `"org_id"`) {
			t.Errorf("missing tenant column: %v", err)
		}

		db, _ = openDB(t, d, nil)
		p = gormcapture.New(gormcapture.Config{})
		must(t, db.Use(p))
		for _, c := range []struct {
			model any
			opts  envelope.Options
			want  []string
		}{
			{&Plain{}, envelope.Options{Exclude: []string{"nope"}}, []string{"Plain", "Exclude", "nope"}},
			{&Plain{}, envelope.Options{Topic: "{nope}.x"}, []string{"Plain", "Topic", "{nope}"}},
			{&Plain{}, envelope.Options{Fields: []string{"id"}, Exclude: []string{"id"}}, []string{"Plain", "Fields", "Exclude"}},
			{&Outbox{}, envelope.Options{}, []string{"Outbox", "outbox"}},
			{42, envelope.Options{}, []string{"int"}},
		} {
			err := p.Capture(c.model, c.opts)
			if !errors.Is(err, envelope.ErrConfiguration) {
				t.Errorf("Capture(%T, %+v) = %v, want ErrConfiguration", c.model, c.opts, err)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Capture(%T): %q does not name %q", c.model, err, w)
				}
			}
		}

		// A rejected Capture registers nothing.
		must(t, db.AutoMigrate(&Plain{}))
		must(t, db.Create(&Plain{}).Error)

		// A declaration first seen at write time fails the write.
		must(t, db.AutoMigrate(&BadFields{}))
		if err := db.Create(&BadFields{Name: "x"}).Error; !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("write of a badly declared model: %v, want ErrConfiguration", err)
		}
		var n int64
		must(t, db.Model(&BadFields{}).Count(&n).Error)
		if n != 0 {
			t.Errorf("the write went through")
		}
	})
}

// Initialize may run more than once (dbresolver re-runs it per source): it
// must not wrap twice or register callbacks twice.
func TestInitializeTwice(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{}, &Tag{})
		must(t, e.plugin.Capture(&Tag{}, envelope.Options{}))
		must(t, e.plugin.Initialize(e.db))
		if err := e.db.Use(e.plugin); !errors.Is(err, gorm.ErrRegistered) {
			t.Errorf("second Use: %v", err)
		}
		must(t, e.db.Transaction(func(tx *gorm.DB) error { return tx.Create(&Tag{Code: "a", Label: "b"}).Error }))
		if n := e.count(t); n != 1 {
			t.Errorf("%d events, want 1", n)
		}
		if got := e.wake.take(); len(got) != 1 {
			t.Errorf("fires %q, want one", got)
		}
	})
}

// Keyless has no primary key (GORM's TestCreateWithNoGORMPrimaryKey
// shape); KeylessDeclared declares its capture with ChangeCapture.
type (
	Keyless struct {
		Name string
		Code string
	}
	KeylessDeclared struct {
		Name string
	}
)

func (KeylessDeclared) ChangeCapture() envelope.Options { return envelope.Options{} }

// TestKeylessModelRefusedAtStartUp: a model without a primary key given to
// Capture (after db.Use, or before it) or listed in Config.Models with a
// ChangeCapture method is an ErrConfiguration at start-up naming the
// model and the missing key — never an accepted declaration whose every
// write then fails (issue 23, section 3).
func TestKeylessModelRefusedAtStartUp(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		named := func(what string, err error, model string) {
			t.Helper()
			if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), model) || !strings.Contains(err.Error(), "primary key") {
				t.Errorf("%s: %v; want ErrConfiguration naming %s and its missing primary key", what, err, model)
			}
		}
		db, _ := openDB(t, d, nil)
		p := gormcapture.New(gormcapture.Config{})
		must(t, db.Use(p))
		named("Capture after db.Use", p.Capture(&Keyless{}, envelope.Options{}), "Keyless")

		db, _ = openDB(t, d, nil)
		p = gormcapture.New(gormcapture.Config{})
		if err := p.Capture(&Keyless{}, envelope.Options{}); err != nil {
			named("Capture before db.Use", err, "Keyless")
		} else {
			named("db.Use after Capture", db.Use(p), "Keyless")
		}

		db, _ = openDB(t, d, nil)
		named("Config.Models", db.Use(gormcapture.New(gormcapture.Config{Models: []any{&KeylessDeclared{}}})), "KeylessDeclared")
	})
}
