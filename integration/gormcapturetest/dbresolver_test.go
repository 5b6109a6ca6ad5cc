package gormcapture_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
)

// The dbresolver columns of notes/gorm-aftercommit.md: with dbresolver
// registered after the plugin (A, the documented order) its sources are
// wrapped too, through the plugin's Initialize re-run, and every case
// signals after the commit; registered before it (C), GORM's default
// transaction is rescued by the rewrap callback, but a transaction begun
// with Clauses(dbresolver.Write) is on a pool the plugin does not own:
// its events are written, its commit is not seen, nothing is signalled.
func TestAfterCommitDBResolver(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"plugin first", "dbresolver first"} {
		for _, prepare := range []bool{false, true} {
			name := order
			if prepare {
				name += ", PrepareStmt"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				eachDialect(t, func(t *testing.T, d envelope.Dialect) {
					var dial func() gorm.Dialector
					var other interface{ Close() error }
					var db *gorm.DB
					var err error
					cfg := &gorm.Config{Logger: logger.Default.LogMode(logger.Silent), PrepareStmt: prepare}
					if d == envelope.Postgres {
						o, dsn := testkit.Postgres(t)
						other = o
						dial = func() gorm.Dialector { return postgres.Open(dsn) }
					} else {
						dsn := testkit.MattnDSN(testkit.SQLitePath(t))
						dial = func() gorm.Dialector { return sqlite.Open(dsn) }
					}
					db, err = gorm.Open(dial(), cfg)
					must(t, err)
					sqlDB, _ := db.DB()
					t.Cleanup(func() { _ = sqlDB.Close() })
					must(t, envelope.Migrate(context.Background(), sqlDB, d, ""))
					must(t, db.AutoMigrate(&Tag{}))
					_ = other

					rec := &recorder{}
					var logs bytes.Buffer
					p := gormcapture.New(gormcapture.Config{Wakeup: rec, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
					resolver := dbresolver.Register(dbresolver.Config{Sources: []gorm.Dialector{dial()}})
					if order == "plugin first" {
						must(t, db.Use(p))
						must(t, db.Use(resolver))
					} else {
						must(t, db.Use(resolver))
						must(t, db.Use(p))
					}
					must(t, p.Capture(&Tag{}, envelope.Options{}))
					t.Cleanup(func() {
						if d, err := db.Clauses(dbresolver.Write).DB(); err == nil && d != sqlDB {
							_ = d.Close()
						}
					})
					e := &env{db: db, sql: sqlDB, dialect: d, wake: rec}

					check := func(name string, want []string) {
						t.Helper()
						if got := rec.take(); !slices.Equal(got, want) {
							t.Errorf("%s: fires %q, want %q", name, got, want)
						}
					}
					// Rows 1, 2: Transaction commits / rolls back.
					must(t, db.Transaction(func(tx *gorm.DB) error { enq(t, tx, "a"); return nil }))
					check("Transaction", []string{"a"})
					_ = db.Transaction(func(tx *gorm.DB) error { enq(t, tx, "b"); return errors.New("no") })
					check("Transaction rolled back", nil)
					// Row 10: Begin/Commit.
					tx := db.Begin()
					enq(t, tx, "c")
					must(t, tx.Commit().Error)
					check("Begin/Commit", []string{"c"})
					// Row 13: a captured Create in GORM's default transaction.
					must(t, db.Create(&Tag{Code: "x", Label: "y"}).Error)
					check("default transaction", []string{"tag.inserted"})
					// Row 30: Clauses(dbresolver.Write).Transaction.
					must(t, db.Clauses(dbresolver.Write).Transaction(func(tx *gorm.DB) error {
						return tx.Create(&Tag{Code: "w", Label: "y"}).Error
					}))
					want30 := []string{"tag.inserted"}
					if order == "dbresolver first" {
						want30 = nil // foreign: not seen, not signalled early
					}
					check("Clauses(Write).Transaction", want30)
					// Row 31: Clauses(dbresolver.Write).Begin … Rollback.
					tx = db.Clauses(dbresolver.Write).Begin()
					must(t, tx.Create(&Tag{Code: "r", Label: "y"}).Error)
					must(t, tx.Rollback().Error)
					check("Clauses(Write).Begin/Rollback", nil)

					if n := e.count(t); n != 4 { // a, c, x, w
						t.Errorf("%d events, want 4", n)
					}
					var tags int64
					must(t, db.Model(&Tag{}).Count(&tags).Error)
					if tags != 2 {
						t.Errorf("%d tags, want 2", tags)
					}
				})
			})
		}
	}
}
