package capturecases_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestWriteBeforeMigrate: a captured write or an Enqueue before
// envelope.Migrate made the outbox table fails with ErrConfiguration
// naming envelope.Migrate, not the database's bare "relation does not
// exist" — through GORM's and ent's fused statements (single creates, a
// bulk update), their Go paths (a bulk create, ent's update) and both
// Enqueues, on PostgreSQL and SQLite (issue 23).
func TestWriteBeforeMigrate(t *testing.T) {
	t.Parallel()
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			gcfg := &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
			var (
				db  *sql.DB
				gdb *gorm.DB
				err error
			)
			name := dialect.SQLite
			if d == envelope.Postgres {
				var dsn string
				db, dsn = testkit.Postgres(t)
				gdb, err = gorm.Open(postgres.Open(dsn), gcfg)
				name = dialect.Postgres
			} else {
				dsn := testkit.MattnDSN(testkit.SQLitePath(t))
				db, err = sql.Open("sqlite3", dsn)
				must(t, err)
				gdb, err = gorm.Open(sqlite.Open(dsn), gcfg)
			}
			must(t, err)
			client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(name, db), entcapture.Config{})))
			must(t, createEntSchema(func() error { return client.Schema.Create(ctx) })) // the models' tables, no outbox
			_, err = db.Exec(`INSERT INTO loans (id, status, days, returned) VALUES (1, 'new', 3, false)`)
			must(t, err)
			p := gormcapture.New(gormcapture.Config{})
			must(t, gdb.Use(p))
			must(t, p.Capture(&Tag{}, envelope.Options{}))
			must(t, p.Capture(&Loan{}, envelope.Options{}))

			msg := envelope.Message{Topic: "t", Payload: 1}
			for name, write := range map[string]func() error{
				"gorm create":      func() error { return gdb.Create(&Tag{Code: "a", Label: "x"}).Error },
				"gorm bulk create": func() error { return gdb.Create(&[]Tag{{Code: "b", Label: "x"}, {Code: "c", Label: "y"}}).Error },
				"gorm update":      func() error { return gdb.Model(&Loan{}).Where("days > ?", 0).Update("status", "late").Error },
				"gorm delete":      func() error { return gdb.Delete(&Loan{ID: 1}).Error },
				"gorm enqueue": func() error {
					_, err := gormcapture.Enqueue(gdb, msg)
					return err
				},
				"ent create": func() error { return client.Tag.Create().SetID("d").SetLabel("x").Exec(ctx) },
				"ent update": func() error { return client.Loan.Update().SetStatus("late").Exec(ctx) },
				"ent enqueue": func() error {
					_, err := entcapture.Enqueue(ctx, client, msg)
					return err
				},
			} {
				err := write()
				if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(fmtErr(err), "envelope.Migrate") {
					t.Errorf("%s before envelope.Migrate: %v, want ErrConfiguration naming envelope.Migrate", name, err)
				}
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
