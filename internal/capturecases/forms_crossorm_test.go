package capturecases_test

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/lib/pq"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	cc "github.com/heraldgo/herald/internal/capturecases"
	formsent "github.com/heraldgo/herald/internal/capturecases/entforms/ent"
	_ "github.com/heraldgo/herald/internal/capturecases/entforms/ent/runtime"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// Doc is entforms' docs table as GORM declares it: the `type:` tags
// are what give its columns their forms.
type Doc struct {
	ID     int
	Body   string         `gorm:"type:jsonb"`
	Tags   pq.StringArray `gorm:"type:text[]"`
	Grid   pq.Int64Array  `gorm:"type:bigint[]"`
	Matrix *string        `gorm:"type:int[][]"`
	Span   *string        `gorm:"type:int4range"`
	Spot   *string        `gorm:"type:point"`
	Area   *string        `gorm:"type:polygon"`
}

// TestGormAndEntForms: columns declared as arrays (one and two
// dimensions, a NULL element), a range, jsonb held in a string field, a
// point and a polygon carry their types' JSON forms in the events a relay
// delivers, the same bytes from gormcapture and from entcapture (create,
// update, delete), on PostgreSQL; on SQLite the json column (the one of
// those types SQLite has) is embedded by both (issue 23).
func TestGormAndEntForms(t *testing.T) {
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
			opts := envelope.Options{Payload: envelope.BeforeAndAfter}
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
				// SQLite has no arrays, ranges or geometry: its columns are
				// text, and only json has a form of its type's.
				opts.Fields = []string{"id", "body"}
			}
			must(t, err)
			must(t, envelope.Migrate(ctx, db, d, ""))
			client := formsent.NewClient(formsent.Driver(entcapture.Driver(entsql.OpenDB(name, db),
				entcapture.Config{Options: map[string]envelope.Options{"Doc": opts}})))
			must(t, createEntSchema(func() error { return client.Schema.Create(ctx) }))
			p := gormcapture.New(gormcapture.Config{})
			must(t, gdb.Use(p))
			must(t, p.Capture(&Doc{}, opts))

			var (
				mu  sync.Mutex
				got [][]byte
			)
			r, err := relay.New(db, delivery.Func(func(_ context.Context, e *envelope.Event) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, cc.ReplaceOccurredAt(e.Payload, "2000-01-01T00:00:00Z"))
				return nil
			}), relay.Config{Name: "forms", MinPollInterval: time.Millisecond, MaxPollInterval: 10 * time.Millisecond})
			must(t, err)
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			delivered := func(n int) [][]byte {
				t.Helper()
				testkit.Eventually(t, 10*time.Second, func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(got) >= n
				}, "%d events delivered", n)
				mu.Lock()
				defer mu.Unlock()
				out := got
				got = nil
				return out
			}
			reset := func() {
				t.Helper()
				_, err := db.Exec(`DELETE FROM docs`)
				must(t, err)
				if d == envelope.Postgres {
					_, err = db.Exec(`ALTER SEQUENCE docs_id_seq RESTART`)
				} else {
					_, err = db.Exec(`DELETE FROM sqlite_sequence`)
				}
				must(t, err)
			}
			const body = `{"a": 1, "b": [1, 2]}` // jsonb's own spelling: reads back as written
			str := func(s string) *string { return &s }

			reset()
			doc := client.Doc.Create().SetBody(body).SetTags(pq.StringArray{"a", "b,c"}).SetGrid(pq.Int64Array{1, 2}).
				SetMatrix("{{1,2},{3,NULL}}").SetSpan("[1,3)").SetSpot("(1,2)").SetArea("((0,0),(1,1),(1,0))").SaveX(ctx)
			client.Doc.UpdateOneID(doc.ID).SetTags(pq.StringArray{`x"y`, ""}).SetBody(`[true, null]`).ExecX(ctx)
			client.Doc.DeleteOneID(doc.ID).ExecX(ctx)
			ents := delivered(3)

			reset()
			g := &Doc{Body: body, Tags: pq.StringArray{"a", "b,c"}, Grid: pq.Int64Array{1, 2},
				Matrix: str("{{1,2},{3,NULL}}"), Span: str("[1,3)"), Spot: str("(1,2)"), Area: str("((0,0),(1,1),(1,0))")}
			must(t, gdb.Create(g).Error)
			must(t, gdb.Model(&Doc{ID: g.ID}).Updates(map[string]any{"tags": pq.StringArray{`x"y`, ""}, "body": `[true, null]`}).Error)
			must(t, gdb.Delete(&Doc{ID: g.ID}).Error)
			gorms := delivered(3)

			if len(ents) != 3 || len(gorms) != 3 {
				t.Fatalf("%d ent events, %d gorm events, want 3 each:\nent  %s\ngorm %s", len(ents), len(gorms), ents, gorms)
			}
			for i := range ents {
				if !bytes.Equal(ents[i], gorms[i]) {
					t.Errorf("event %d differs:\n ent  %s\n gorm %s", i, ents[i], gorms[i])
				}
			}
			want := []string{`"body":{"a":1,"b":[1,2]}`}
			if d == envelope.Postgres {
				want = append(want, `"tags":["a","b,c"]`, `"grid":[1,2]`, `"matrix":[[1,2],[3,null]]`,
					`"span":{"lower":1,"upper":3,"lower_inc":true,"upper_inc":false,"is_empty":false}`,
					`"spot":{"type":"Point","coordinates":[1,2]}`,
					`"area":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,0]]]}`)
			}
			for _, w := range want {
				if !strings.Contains(string(gorms[0]), w) {
					t.Errorf("created event lacks %s:\n %s", w, gorms[0])
				}
			}
			if w := `"body":[true,null]`; !strings.Contains(string(gorms[1]), w) {
				t.Errorf("updated event lacks %s:\n %s", w, gorms[1])
			}
		})
	}
}
