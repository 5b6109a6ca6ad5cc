package capturecases_test

import (
	"bytes"
	"context"
	"database/sql"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	cc "github.com/heraldgo/herald/internal/capturecases"
	imgent "github.com/heraldgo/herald/internal/capturecases/entimages/ent"
	_ "github.com/heraldgo/herald/internal/capturecases/entimages/ent/runtime"
	"github.com/heraldgo/herald/internal/testkit"
)

// Member is entimages' members table as GORM declares it.
type Member struct {
	ID         int
	CreateTime time.Time
	UpdateTime time.Time
	Tenant     string
	Email      string
	Name       *string
	Region     *string `gorm:"default:eu"`
	AccountID  *uuid.UUID
	Seen       *time.Time
	Tags       *string // excluded from the events (ent holds a []string)
	Stamp      *string
}

// Visit is entimages' visits table as GORM declares it.
type Visit struct {
	ID         int
	CreateTime time.Time
	UpdateTime time.Time
	Kind       *string `gorm:"default:walk"`
	At         time.Time
	Took       time.Duration // bigint: nanoseconds
	Gone       sql.NullTime  // a time under a Valuer, finer than the column
}

// TestGormAndEntSameImages: a row whose stored values differ from the Go
// values that wrote it — a database default left unset, times finer than
// their columns (timestamptz, timestamptz(3)), a NULL UUID that ent's Go
// field holds as the nil UUID, a time.Duration in a bigint column (its
// nanoseconds), a sql.NullTime finer than its column — gives the same
// event bytes through entcapture and gormcapture: creates (on PostgreSQL, Member's are not
// fused — a schema hook — and Visit's are: the statement renders the
// stored values), and the update that clears the UUID (issue 18, 8, 9, 10).
func TestGormAndEntSameImages(t *testing.T) {
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
			must(t, envelope.Migrate(ctx, db, d, ""))
			opts := envelope.Options{Payload: envelope.BeforeAndAfter, Exclude: []string{"tags"}}
			client := imgent.NewClient(imgent.Driver(entcapture.Driver(entsql.OpenDB(name, db),
				entcapture.Config{Options: map[string]envelope.Options{"Member": opts, "Visit": {}}})))
			must(t, createEntSchema(func() error { return client.Schema.Create(ctx) }))
			p := gormcapture.New(gormcapture.Config{})
			must(t, gdb.Use(p))
			must(t, p.Capture(&Member{}, opts))
			must(t, p.Capture(&Visit{}, envelope.Options{}))

			acct := uuid.New()
			reset := func() {
				t.Helper()
				for _, q := range []string{`DELETE FROM members`, `DELETE FROM visits`, `DELETE FROM herald_outbox`, `DELETE FROM accounts`} {
					_, err := db.Exec(q)
					must(t, err)
				}
				if d == envelope.Postgres {
					_, err = db.Exec(`ALTER SEQUENCE members_id_seq RESTART; ALTER SEQUENCE visits_id_seq RESTART`)
				} else {
					_, err = db.Exec(`DELETE FROM sqlite_sequence`)
				}
				must(t, err)
				// Not captured: raw SQL.
				_, err = db.Exec(`INSERT INTO accounts (id, name) VALUES (`+map[bool]string{true: "$1", false: "?"}[d == envelope.Postgres]+`, 'acme')`, acct)
				must(t, err)
			}
			events := func() [][]byte {
				t.Helper()
				rows, err := db.Query(`SELECT payload FROM herald_outbox ORDER BY sequence`)
				must(t, err)
				defer rows.Close()
				var out [][]byte
				for rows.Next() {
					var b []byte
					must(t, rows.Scan(&b))
					out = append(out, cc.ReplaceOccurredAt(b, "2000-01-01T00:00:00Z"))
				}
				must(t, rows.Err())
				return out
			}
			created := time.Date(2026, 5, 1, 10, 20, 5, 123456789, time.UTC)
			seen := created.Add(time.Hour)
			updated := created.Add(2 * time.Hour)

			reset()
			// With the edge field set (not fused on PostgreSQL: an edge),
			// and without (fused: the statement renders the stored times
			// and the default).
			m := client.Member.Create().SetTenant("t").SetEmail("e").SetCreateTime(created).SetUpdateTime(created).
				SetSeen(seen).SetAccountID(acct).SaveX(ctx)
			client.Member.UpdateOneID(m.ID).ClearAccount().SetUpdateTime(updated).ExecX(ctx)
			client.Member.Create().SetTenant("t").SetEmail("f").SetCreateTime(created).SetUpdateTime(created).SetSeen(seen).ExecX(ctx)
			client.Visit.Create().SetCreateTime(created).SetUpdateTime(created).SetAt(seen).
				SetTook(1500 * time.Millisecond).SetGone(&sql.NullTime{Time: seen, Valid: true}).ExecX(ctx)
			ents := events()

			reset()
			g := &Member{CreateTime: created, UpdateTime: created, Tenant: "t", Email: "e", Seen: &seen, AccountID: &acct}
			must(t, gdb.Create(g).Error)
			must(t, gdb.Model(&Member{ID: g.ID}).Updates(map[string]any{"update_time": updated, "account_id": nil}).Error)
			must(t, gdb.Create(&Member{CreateTime: created, UpdateTime: created, Tenant: "t", Email: "f", Seen: &seen}).Error)
			must(t, gdb.Create(&Visit{CreateTime: created, UpdateTime: created, At: seen,
				Took: 1500 * time.Millisecond, Gone: sql.NullTime{Time: seen, Valid: true}}).Error)
			gorms := events()

			if len(ents) != 4 || len(gorms) != 4 {
				t.Fatalf("%d ent events, %d gorm events, want 4 each:\nent  %s\ngorm %s", len(ents), len(gorms), ents, gorms)
			}
			if !bytes.Contains(ents[3], []byte(`"took":1500000000`)) {
				t.Errorf("visit event: took is not the nanoseconds its column holds: %s", ents[3])
			}
			for i := range ents {
				if !bytes.Equal(ents[i], gorms[i]) {
					t.Errorf("event %d differs:\n ent  %s\n gorm %s", i, ents[i], gorms[i])
				}
			}
		})
	}
}
