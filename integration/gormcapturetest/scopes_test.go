package gormcapture_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
)

// Scopes and errors: savepoint bookkeeping, the plugin's own transaction,
// errors as the caller sees them, and the pool a write goes through.

var errBad = errors.New("bad row")

// failOn captures Tag with an Extend that fails for the label "bad".
func failOn(t *testing.T, e *env) {
	t.Helper()
	must(t, e.plugin.Capture(&Tag{}, envelope.Options{Extend: func(_ context.Context, c envelope.Change) (*envelope.Extension, error) {
		if c.After != nil && c.After["label"] == "bad" {
			return nil, errBad
		}
		return nil, nil
	}, Payload: envelope.After}))
}

// After CreateInBatches in the caller's transaction (whose savepoint GORM
// never releases), a later captured write still takes its own savepoint:
// its failed capture undoes its row while the caller goes on.
func TestSavepointAfterCreateInBatches(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{}, &Tag{})
		failOn(t, e)
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			must(t, tx.CreateInBatches(&[]Tag{{Code: "a", Label: "x"}, {Code: "b", Label: "x"}, {Code: "c", Label: "x"}}, 2).Error)
			if err := tx.Create(&Tag{Code: "d", Label: "bad"}).Error; !errors.Is(err, errBad) {
				t.Errorf("create bad: %v, want errBad", err)
			}
			return tx.Create(&Tag{Code: "e", Label: "x"}).Error
		}))
		var codes []string
		must(t, e.db.Model(&Tag{}).Order("code").Pluck("code", &codes).Error)
		if !slices.Equal(codes, []string{"a", "b", "c", "e"}) {
			t.Errorf("rows %q, want a b c e (d undone with its failed event)", codes)
		}
		if n := e.count(t); n != 4 {
			t.Errorf("%d events, want 4", n)
		}
	})
}

// Savepoint names are matched as the database matches them: without case
// on SQLite and, unquoted, on PostgreSQL; a rolled-back savepoint's topics
// are never signalled.
func TestSavepointNamesIgnoreCase(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{}, &Tag{}, &Loan{})
		must(t, e.plugin.Capture(&Tag{}, envelope.Options{}))
		must(t, e.plugin.Capture(&Loan{}, envelope.Options{}))
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			must(t, tx.Create(&Tag{Code: "keep", Label: "x"}).Error)
			must(t, tx.SavePoint("Sp2").Error)
			must(t, tx.Create(&Loan{Status: "gone"}).Error)
			must(t, tx.RollbackTo("sp2").Error)
			// The other spellings of the statements the databases accept.
			must(t, tx.Exec("SAVEPOINT Sp3").Error)
			must(t, tx.Create(&Loan{Status: "gone too"}).Error)
			return tx.Exec("ROLLBACK TRANSACTION TO SAVEPOINT SP3").Error
		}))
		var loans int64
		must(t, e.db.Model(&Loan{}).Count(&loans).Error)
		if loans != 0 || e.count(t) != 1 {
			t.Errorf("%d loans, %d events; want 0 loans, 1 event", loans, e.count(t))
		}
		if got := e.wake.take(); !slices.Equal(got, []string{"tag.inserted"}) {
			t.Errorf("fires %q, want only tag.inserted (loan.inserted was rolled back)", got)
		}
	})
}

// Shelf and ShelfItem: a delete of a shelf with items violates the
// foreign key (no cascade).
type (
	Shelf struct {
		ID   int64
		Name string
	}
	ShelfItem struct {
		ID      int64
		ShelfID int64
		Shelf   Shelf
	}
)

// A write the database rejects returns the database's error once, as
// plain GORM does, on every captured path.
func TestDatabaseErrorOnce(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{}, &Tag{}, &Shelf{}, &ShelfItem{})
		for _, mode := range []envelope.PayloadMode{envelope.After, envelope.BeforeAndAfter} {
			must(t, e.plugin.Capture(&Tag{}, envelope.Options{Payload: mode}))
			must(t, e.plugin.Capture(&Shelf{}, envelope.Options{Payload: mode}))
			must(t, e.db.Exec(`DELETE FROM shelf_items`).Error)
			must(t, e.db.Exec(`DELETE FROM shelves`).Error)
			must(t, e.db.Exec(`DELETE FROM tags`).Error)
			must(t, e.db.Create(&[]Tag{{Code: "a", Label: "x"}, {Code: "b", Label: "x"}}).Error)
			must(t, e.db.Create(&ShelfItem{Shelf: Shelf{Name: "s"}}).Error)
			unique, fk := "SQLSTATE 23505", "SQLSTATE 23503"
			if d == envelope.SQLite {
				unique, fk = "UNIQUE constraint failed", "FOREIGN KEY constraint failed"
			}
			cases := []struct {
				name, want string
				run        func(db *gorm.DB) error
			}{
				{"Update", unique, func(db *gorm.DB) error {
					return db.Model(&Tag{}).Where("code = ?", "b").Update("code", "a").Error
				}},
				{"Updates", unique, func(db *gorm.DB) error {
					return db.Model(&Tag{}).Where("code = ?", "b").Updates(map[string]any{"code": "a"}).Error
				}},
				{"Update RETURNING", unique, func(db *gorm.DB) error {
					var out []Tag
					return db.Model(&out).Clauses(clause.Returning{}).Where("code = ?", "b").Update("code", "a").Error
				}},
				{"Delete RETURNING", fk, func(db *gorm.DB) error {
					var out []Shelf
					return db.Clauses(clause.Returning{}).Where("name = ?", "s").Delete(&out).Error
				}},
				{"Create", unique, func(db *gorm.DB) error { return db.Create(&Tag{Code: "a", Label: "y"}).Error }},
				{"CreateSlice", unique, func(db *gorm.DB) error {
					return db.Create(&[]Tag{{Code: "a", Label: "y"}, {Code: "z", Label: "y"}}).Error
				}},
				{"Delete", fk, func(db *gorm.DB) error { return db.Where("name = ?", "s").Delete(&Shelf{}).Error }},
			}
			for _, c := range cases {
				for _, inTx := range []bool{false, true} {
					var err error
					if inTx {
						_ = e.db.Transaction(func(tx *gorm.DB) error { err = c.run(tx); return err })
					} else {
						err = c.run(e.db)
					}
					if err == nil || strings.Count(err.Error(), c.want) != 1 {
						t.Errorf("%s %s (in transaction %v): error %q, want %q once", mode, c.name, inTx, err, c.want)
					}
				}
			}
		}
	})
}

// With dbresolver, Enqueue outside a transaction writes through the
// resolver's source, as a captured Create does, not through the pool
// given to gorm.Open.
func TestEnqueueDBResolverSource(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		dial := func() (func() gorm.Dialector, func() gorm.Dialector) {
			if d == envelope.Postgres {
				_, a := testkit.Postgres(t)
				_, b := testkit.Postgres(t)
				return func() gorm.Dialector { return postgres.Open(a) }, func() gorm.Dialector { return postgres.Open(b) }
			}
			a, b := testkit.MattnDSN(testkit.SQLitePath(t)), testkit.MattnDSN(testkit.SQLitePath(t))
			return func() gorm.Dialector { return sqlite.Open(a) }, func() gorm.Dialector { return sqlite.Open(b) }
		}
		dialOpen, dialSource := dial()
		open := func(dl gorm.Dialector) *gorm.DB {
			g, err := gorm.Open(dl, &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
			must(t, err)
			s, _ := g.DB()
			t.Cleanup(func() { _ = s.Close() })
			return g
		}
		// Plain handles on each database, to read their outboxes.
		atOpen, atSource := open(dialOpen()), open(dialSource())
		for _, g := range []*gorm.DB{atOpen, atSource} {
			s, _ := g.DB()
			must(t, envelope.Migrate(context.Background(), s, d, ""))
			must(t, g.AutoMigrate(&Tag{}))
		}
		db := open(dialOpen())
		p := gormcapture.New(gormcapture.Config{})
		must(t, db.Use(p))
		must(t, db.Use(dbresolver.Register(dbresolver.Config{Sources: []gorm.Dialector{dialSource()}})))
		must(t, p.Capture(&Tag{}, envelope.Options{}))
		t.Cleanup(func() {
			if s, err := db.Clauses(dbresolver.Write).DB(); err == nil {
				_ = s.Close()
			}
		})

		must(t, db.Create(&Tag{Code: "a", Label: "x"}).Error)
		_, err := gormcapture.Enqueue(db, msg("plain"))
		must(t, err)
		_, err = gormcapture.EnqueueMany(db.Clauses(dbresolver.Write), []envelope.Message{msg("write")})
		must(t, err)
		// A transaction begun without Clauses(dbresolver.Write) is on the
		// pool given to gorm.Open (dbresolver's rule): its captured writes
		// and its enqueued events both go there.
		must(t, db.Transaction(func(tx *gorm.DB) error {
			must(t, tx.Create(&Tag{Code: "b", Label: "x"}).Error)
			_, err := gormcapture.Enqueue(tx, msg("tx"))
			return err
		}))
		topics := func(g *gorm.DB) string {
			var ts []string
			must(t, g.Raw(`SELECT topic FROM herald_outbox ORDER BY sequence`).Scan(&ts).Error)
			return fmt.Sprint(ts)
		}
		if got := topics(atSource); got != "[tag.inserted plain write]" {
			t.Errorf("source's outbox: %s, want [tag.inserted plain write]", got)
		}
		if got := topics(atOpen); got != "[tag.inserted tx]" {
			t.Errorf("outbox of the pool given to gorm.Open: %s, want [tag.inserted tx]", got)
		}
	})
}

// Hooked panics in the hook its Trap names.
type Hooked struct {
	ID   int64
	Name string
	Trap string `gorm:"-"`
}

func (h *Hooked) trap(at string) {
	if h.Trap == at {
		panic("trap " + at)
	}
}

func (h *Hooked) BeforeCreate(*gorm.DB) error { h.trap("BeforeCreate"); return nil }
func (h *Hooked) AfterCreate(*gorm.DB) error  { h.trap("AfterCreate"); return nil }
func (h *Hooked) BeforeUpdate(*gorm.DB) error { h.trap("BeforeUpdate"); return nil }
func (h *Hooked) AfterUpdate(*gorm.DB) error  { h.trap("AfterUpdate"); return nil }
func (h *Hooked) BeforeDelete(*gorm.DB) error { h.trap("BeforeDelete"); return nil }
func (h *Hooked) AfterDelete(*gorm.DB) error  { h.trap("AfterDelete"); return nil }

// With SkipDefaultTransaction, a model hook that panics leaves no
// transaction of the plugin's open: the connection goes back to the pool,
// no lock is held, and the write is where plain GORM leaves it (done when
// the panic came after it, with its event; not done before it).
func TestHookPanicSkipDefaultTransaction(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, &gorm.Config{SkipDefaultTransaction: true}, gormcapture.Config{}, &Hooked{})
		must(t, e.plugin.Capture(&Hooked{}, envelope.Options{Payload: envelope.BeforeAndAfter}))
		sqlDB, err := e.db.DB()
		must(t, err)
		must(t, e.db.Create(&Hooked{ID: 1, Name: "a"}).Error)
		panics := func(f func()) (p any) {
			defer func() { p = recover() }()
			f()
			return nil
		}
		cases := []struct {
			trap  string
			write func(h *Hooked)
			done  bool // the write happened (the panic came after it)
		}{
			{"BeforeCreate", func(h *Hooked) { e.db.Create(h) }, false},
			{"AfterCreate", func(h *Hooked) { e.db.Create(h) }, true},
			{"BeforeUpdate", func(h *Hooked) { e.db.Model(h).Update("name", "u") }, false},
			{"AfterUpdate", func(h *Hooked) { e.db.Model(h).Update("name", "u") }, true},
			{"BeforeDelete", func(h *Hooked) { e.db.Delete(h) }, false},
			{"AfterDelete", func(h *Hooked) { e.db.Delete(h) }, true},
		}
		for i, c := range cases {
			id := int64(100 + i)
			if !strings.Contains(c.trap, "Create") {
				must(t, e.db.Create(&Hooked{ID: id, Name: "a"}).Error)
			}
			before := e.count(t)
			if p := panics(func() { c.write(&Hooked{ID: id, Name: "a", Trap: c.trap}) }); p == nil {
				t.Errorf("%s: no panic", c.trap)
			}
			if n := sqlDB.Stats().InUse; n != 0 {
				t.Errorf("%s: %d connections still in use after the panic", c.trap, n)
			}
			// Nothing is locked: another write goes through at once.
			must(t, e.db.Model(&Hooked{ID: 1}).Update("name", c.trap).Error)
			events := e.count(t) - before - 1
			var row Hooked
			found := e.db.Limit(1).Find(&row, id).RowsAffected == 1
			var done bool
			switch {
			case strings.Contains(c.trap, "Create"):
				done = found
			case strings.Contains(c.trap, "Update"):
				done = row.Name == "u"
			default:
				done = !found
			}
			if done != c.done || events != map[bool]int{false: 0, true: 1}[done] {
				t.Errorf("%s: write done %v with %d events; want done %v, with its event", c.trap, done, events, c.done)
			}
		}
	})
}

// A panic in the capture itself (a user's Extend) leaves no transaction
// open either: the plugin's own, or GORM's default one.
func TestCapturePanicReleasesTransaction(t *testing.T) {
	t.Parallel()
	for _, sdt := range []bool{false, true} {
		t.Run(fmt.Sprintf("SkipDefaultTransaction=%v", sdt), func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, d envelope.Dialect) {
				e := newEnv(t, d, &gorm.Config{SkipDefaultTransaction: sdt}, gormcapture.Config{}, &Tag{})
				must(t, e.plugin.Capture(&Tag{}, envelope.Options{Payload: envelope.BeforeAndAfter, Extend: func(_ context.Context, c envelope.Change) (*envelope.Extension, error) {
					if c.After != nil && c.After["label"] == "panic" {
						panic("extend")
					}
					return nil, nil
				}}))
				sqlDB, err := e.db.DB()
				must(t, err)
				must(t, e.db.Create(&Tag{Code: "a", Label: "x"}).Error)
				writes := []func(){
					func() { e.db.Create(&Tag{Code: "b", Label: "panic"}) },
					func() { e.db.Create(&[]Tag{{Code: "c", Label: "panic"}, {Code: "d", Label: "x"}}) },
					func() { e.db.Model(&Tag{}).Where("code = ?", "a").Update("label", "panic") },
				}
				for i, w := range writes {
					func() {
						defer func() {
							if recover() == nil {
								t.Errorf("write %d: no panic", i)
							}
						}()
						w()
					}()
					if n := sqlDB.Stats().InUse; n != 0 {
						t.Errorf("write %d: %d connections still in use after the panic", i, n)
					}
				}
				var tags []Tag
				must(t, e.db.Order("code").Find(&tags).Error)
				if fmt.Sprint(tags) != "[{a x}]" || e.count(t) != 1 {
					t.Errorf("tags %v, %d events; want only a, unchanged, with its event", tags, e.count(t))
				}
			})
		})
	}
}
