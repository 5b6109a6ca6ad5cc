package capturecases_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"testing"

	entgo "entgo.io/ent"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	cc "github.com/heraldgo/herald/internal/capturecases"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/predicate"
	_ "github.com/heraldgo/herald/internal/capturecases/entcc/ent/runtime"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The conformance models as GORM declares them (as in gormcapture's
// conformance test); ent's are internal/capturecases/entcc/schema.
type (
	Reader struct {
		ID    int64
		Name  string `gorm:"not null"`
		Email string `gorm:"not null" herald:"sensitive"`
	}
	Loan struct {
		ID       int64
		Status   string `gorm:"not null"`
		Days     int    `gorm:"not null"`
		Returned bool   `gorm:"not null"`
		ReaderID *int64
		Note     *string
	}
	Tag struct {
		Code  string `gorm:"primaryKey"`
		Label string `gorm:"not null"`
	}
)

// TestGormAndEntSameEvents: the same change made through gormcapture
// and through entcapture, on the same tables of the same database, in
// each payload mode, on PostgreSQL and SQLite, commits the same events:
// payload bytes equal (occurred_at aside; the PostgreSQL payload column
// is json, which keeps the bytes written), same topics, same ordering
// keys, in the same order. The changes are every case of the
// conformance suite that ent can express (EntUnsupported aside), each
// through one representative path per ORM; ent's runs without a caller
// transaction (through entcapture.Driver) and within client.Tx.
func TestGormAndEntSameEvents(t *testing.T) {
	t.Parallel()
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite} {
		for _, mode := range []envelope.PayloadMode{envelope.After, envelope.Keys, envelope.BeforeAndAfter} {
			t.Run(string(d)+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				x := newCross(t, d, mode)
				compared := 0
				for _, c := range cc.Cases {
					if _, ok := cc.EntUnsupported[c.Name]; ok {
						continue
					}
					t.Run(c.Name, func(t *testing.T) {
						g := x.run(t, c, func(ctx context.Context) error { return gormWrite(t, x.gorm, c) })
						if len(g) != len(c.Want) {
							t.Fatalf("gorm: %d events, want %d", len(g), len(c.Want))
						}
						for _, inTx := range []bool{false, true} {
							e := x.run(t, c, func(ctx context.Context) error {
								if !inTx {
									return entWrite(ctx, x.ent, c)
								}
								tx, err := x.ent.Tx(ctx)
								if err != nil {
									return err
								}
								if err := entWrite(ctx, tx.Client(), c); err != nil {
									_ = tx.Rollback()
									return err
								}
								return tx.Commit()
							})
							if len(e) != len(g) {
								t.Fatalf("ent (in Tx: %v): %d events, gorm %d:\nent\n%sgorm\n%s", inTx, len(e), len(g), dump(e), dump(g))
							}
							for i := range g {
								if !bytes.Equal(e[i].payload, g[i].payload) || e[i].topic != g[i].topic || e[i].key != g[i].key {
									t.Errorf("event %d (ent in Tx: %v) differs:\n ent  %s %s %s\n gorm %s %s %s", i, inTx,
										e[i].topic, e[i].key, e[i].payload, g[i].topic, g[i].key, g[i].payload)
								}
								compared++
							}
						}
					})
				}
				if compared == 0 {
					t.Fatal("no event compared")
				}
				t.Logf("%d ent events compared byte for byte with gorm's", compared)
			})
		}
	}
}

// cross is one database with both ORMs capturing on it.
type cross struct {
	d    envelope.Dialect
	db   *sql.DB // an independent pool, for resets and reading events
	gorm *gorm.DB
	ent  *ent.Client
}

func newCross(t *testing.T, d envelope.Dialect, mode envelope.PayloadMode) *cross {
	t.Helper()
	x := &cross{d: d}
	var (
		gdb *gorm.DB
		err error
		ed  *sql.DB
	)
	gcfg := &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
	switch d {
	case envelope.Postgres:
		var dsn string
		x.db, dsn = testkit.Postgres(t)
		gdb, err = gorm.Open(postgres.Open(dsn), gcfg)
		must(t, err)
		ed, err = sql.Open("pgx", dsn)
	default:
		dsn := testkit.MattnDSN(testkit.SQLitePath(t))
		x.db, err = sql.Open("sqlite3", dsn)
		must(t, err)
		gdb, err = gorm.Open(sqlite.Open(dsn), gcfg)
		must(t, err)
		ed, err = sql.Open("sqlite3", dsn)
	}
	must(t, err)
	gsql, err := gdb.DB()
	must(t, err)
	t.Cleanup(func() { _ = gsql.Close(); _ = ed.Close(); _ = x.db.Close() })
	must(t, envelope.Migrate(context.Background(), x.db, d, ""))
	// The tables, as GORM migrates them; ent writes to the same ones.
	must(t, gdb.AutoMigrate(&Reader{}, &Loan{}, &Tag{}))

	p := gormcapture.New(gormcapture.Config{Namespace: cc.Namespace, Models: []any{&Reader{}, &Loan{}, &Tag{}}})
	opts := map[string]envelope.Options{}
	for _, m := range []any{&Reader{}, &Loan{}, &Tag{}} { // listed: captured before db.Use
		must(t, p.Capture(m, envelope.Options{Payload: mode}))
	}
	must(t, gdb.Use(p))
	for _, m := range cc.Models {
		if m.Name == "Membership" { // no ent schema (see capturecases.go); entcapture refuses Options for a schema it does not capture
			continue
		}
		opts[m.Name] = envelope.Options{Payload: mode}
	}
	x.gorm = gdb
	name := dialect.SQLite
	if d == envelope.Postgres {
		name = dialect.Postgres
	}
	x.ent = ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(name, ed),
		entcapture.Config{Namespace: cc.Namespace, Options: opts})))
	return x
}

type ev struct {
	topic, key string
	payload    []byte
}

func dump(evs []ev) string {
	var b bytes.Buffer
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s %s %s\n", e.topic, e.key, e.payload)
	}
	return b.String()
}

// run empties the tables, seeds the case's rows (through GORM: the seed
// is not compared), runs write and returns its events, occurred_at
// replaced.
func (x *cross) run(t *testing.T, c cc.Case, write func(context.Context) error) []ev {
	t.Helper()
	if x.d == envelope.Postgres {
		_, err := x.db.Exec(`TRUNCATE readers, loans, tags, herald_outbox RESTART IDENTITY`)
		must(t, err)
	} else {
		for _, tb := range []string{"readers", "loans", "tags", "herald_outbox"} {
			_, err := x.db.Exec(`DELETE FROM ` + tb)
			must(t, err)
		}
		_, _ = x.db.Exec(`DELETE FROM sqlite_sequence`)
	}
	for _, r := range c.Seed {
		model := c.Model
		if _, isReader := r["email"]; isReader {
			model = "Reader"
		}
		must(t, x.gorm.Create(gormRow(model, r)).Error)
	}
	_, err := x.db.Exec(`DELETE FROM herald_outbox`)
	must(t, err)
	must(t, write(context.Background()))
	rows, err := x.db.Query(`SELECT topic, COALESCE(ordering_key, ''), payload FROM herald_outbox ORDER BY sequence`)
	must(t, err)
	defer rows.Close()
	var out []ev
	for rows.Next() {
		var e ev
		must(t, rows.Scan(&e.topic, &e.key, &e.payload))
		e.payload = cc.ReplaceOccurredAt(e.payload, "2000-01-01T00:00:00Z")
		out = append(out, e)
	}
	must(t, rows.Err())
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// gormRow returns a *Reader, *Loan or *Tag filled from a neutral row.
func gormRow(model string, r cc.Row) any {
	switch model {
	case "Reader":
		v := &Reader{}
		v.Name, _ = r["name"].(string)
		v.Email, _ = r["email"].(string)
		if id, ok := r["id"].(int64); ok {
			v.ID = id
		}
		return v
	case "Loan":
		v := &Loan{}
		if id, ok := r["id"].(int64); ok {
			v.ID = id
		}
		if s, ok := r["status"].(string); ok {
			v.Status = s
		}
		if n, ok := r["days"].(int64); ok {
			v.Days = int(n)
		}
		if b, ok := r["returned"].(bool); ok {
			v.Returned = b
		}
		if id, ok := r["reader_id"].(int64); ok {
			v.ReaderID = &id
		}
		if s, ok := r["note"].(string); ok {
			v.Note = &s
		}
		return v
	case "Tag":
		v := &Tag{}
		v.Code, _ = r["code"].(string)
		v.Label, _ = r["label"].(string)
		return v
	}
	panic("no model " + model)
}

func gormRows(model string, rs []cc.Row) any {
	switch model {
	case "Reader":
		out := make([]Reader, len(rs))
		for i, r := range rs {
			out[i] = *gormRow(model, r).(*Reader)
		}
		return &out
	case "Loan":
		out := make([]Loan, len(rs))
		for i, r := range rs {
			out[i] = *gormRow(model, r).(*Loan)
		}
		return &out
	case "Tag":
		out := make([]Tag, len(rs))
		for i, r := range rs {
			out[i] = *gormRow(model, r).(*Tag)
		}
		return &out
	}
	panic("no model " + model)
}

func keyRow(c cc.Case) cc.Row { return cc.Row{cc.ModelByName(c.Model).PK[0]: c.Write.PK} }

// gormWrite makes the case's write through GORM.
func gormWrite(t *testing.T, db *gorm.DB, c cc.Case) error {
	w := c.Write
	switch w.Kind {
	case cc.Insert:
		return db.Create(gormRow(c.Model, w.Rows[0])).Error
	case cc.InsertMany:
		return db.Create(gormRows(c.Model, w.Rows)).Error
	case cc.UpdateByPK:
		return db.Model(gormRow(c.Model, keyRow(c))).Updates(map[string]any(w.Set)).Error
	case cc.UpdateWhere:
		return db.Model(gormRow(c.Model, cc.Row{})).Where(map[string]any(w.Where)).Updates(map[string]any(w.Set)).Error
	case cc.DeleteByPK:
		return db.Delete(gormRow(c.Model, keyRow(c))).Error
	case cc.DeleteWhere:
		return db.Where(map[string]any(w.Where)).Delete(gormRow(c.Model, cc.Row{})).Error
	case cc.Upsert, cc.UpsertIgnore:
		oc := clause.OnConflict{}
		for _, col := range w.Conflict {
			oc.Columns = append(oc.Columns, clause.Column{Name: col})
		}
		if w.Kind == cc.UpsertIgnore {
			oc.DoNothing = true
		} else {
			oc.DoUpdates = clause.AssignmentColumns(w.Update)
		}
		return db.Clauses(oc).Create(gormRows(c.Model, w.Rows)).Error
	}
	t.Fatalf("no gorm path for %s", w.Kind)
	return nil
}

// entWrite makes the case's write through ent.
func entWrite(ctx context.Context, c *ent.Client, cs cc.Case) error {
	w := cs.Write
	switch w.Kind {
	case cc.Insert, cc.InsertMany:
		return entCreate(ctx, c, cs.Model, w.Rows, nil)
	case cc.Upsert:
		return entCreate(ctx, c, cs.Model, w.Rows, func(b *ent.TagCreateBulk) error {
			return b.OnConflictColumns(w.Conflict...).UpdateNewValues().Exec(ctx)
		})
	case cc.UpsertIgnore:
		return entCreate(ctx, c, cs.Model, w.Rows, func(b *ent.TagCreateBulk) error {
			return b.OnConflictColumns(w.Conflict...).DoNothing().Exec(ctx)
		})
	case cc.UpdateByPK:
		switch cs.Model {
		case "Loan":
			b := c.Loan.UpdateOneID(w.PK.(int64))
			if err := setFields(b.Mutation(), w.Set); err != nil {
				return err
			}
			return b.Exec(ctx)
		case "Reader":
			b := c.Reader.UpdateOneID(w.PK.(int64))
			if err := setFields(b.Mutation(), w.Set); err != nil {
				return err
			}
			return b.Exec(ctx)
		case "Tag":
			b := c.Tag.UpdateOneID(w.PK.(string))
			if err := setFields(b.Mutation(), w.Set); err != nil {
				return err
			}
			return b.Exec(ctx)
		}
	case cc.UpdateWhere:
		switch cs.Model {
		case "Loan":
			b := c.Loan.Update().Where(preds[predicate.Loan](w.Where)...)
			if err := setFields(b.Mutation(), w.Set); err != nil {
				return err
			}
			return b.Exec(ctx)
		case "Reader":
			b := c.Reader.Update().Where(preds[predicate.Reader](w.Where)...)
			if err := setFields(b.Mutation(), w.Set); err != nil {
				return err
			}
			return b.Exec(ctx)
		case "Tag":
			b := c.Tag.Update().Where(preds[predicate.Tag](w.Where)...)
			if err := setFields(b.Mutation(), w.Set); err != nil {
				return err
			}
			return b.Exec(ctx)
		}
	case cc.DeleteByPK:
		switch cs.Model {
		case "Loan":
			return c.Loan.DeleteOneID(w.PK.(int64)).Exec(ctx)
		case "Reader":
			return c.Reader.DeleteOneID(w.PK.(int64)).Exec(ctx)
		case "Tag":
			return c.Tag.DeleteOneID(w.PK.(string)).Exec(ctx)
		}
	case cc.DeleteWhere:
		var err error
		switch cs.Model {
		case "Loan":
			_, err = c.Loan.Delete().Where(preds[predicate.Loan](w.Where)...).Exec(ctx)
		case "Reader":
			_, err = c.Reader.Delete().Where(preds[predicate.Reader](w.Where)...).Exec(ctx)
		case "Tag":
			_, err = c.Tag.Delete().Where(preds[predicate.Tag](w.Where)...).Exec(ctx)
		}
		return err
	}
	return fmt.Errorf("no ent path for %s of %s", w.Kind, cs.Model)
}

// entCreate inserts rows with CreateBulk (one Create for one row), or,
// for tags, runs upsert on the bulk.
func entCreate(ctx context.Context, c *ent.Client, model string, rows []cc.Row, upsert func(*ent.TagCreateBulk) error) error {
	switch model {
	case "Loan":
		bs := make([]*ent.LoanCreate, len(rows))
		for i, r := range rows {
			bs[i] = c.Loan.Create()
			if err := setFields(bs[i].Mutation(), r); err != nil {
				return err
			}
		}
		if len(bs) == 1 {
			return bs[0].Exec(ctx)
		}
		return c.Loan.CreateBulk(bs...).Exec(ctx)
	case "Reader":
		bs := make([]*ent.ReaderCreate, len(rows))
		for i, r := range rows {
			bs[i] = c.Reader.Create()
			if err := setFields(bs[i].Mutation(), r); err != nil {
				return err
			}
		}
		if len(bs) == 1 {
			return bs[0].Exec(ctx)
		}
		return c.Reader.CreateBulk(bs...).Exec(ctx)
	case "Tag":
		bs := make([]*ent.TagCreate, len(rows))
		for i, r := range rows {
			bs[i] = c.Tag.Create().SetID(r["code"].(string))
			if err := setFields(bs[i].Mutation(), r); err != nil {
				return err
			}
		}
		if upsert != nil {
			return upsert(c.Tag.CreateBulk(bs...))
		}
		return c.Tag.CreateBulk(bs...).Exec(ctx)
	}
	return fmt.Errorf("no ent model %s", model)
}

// setFields sets a mutation's fields from a neutral row (the key and
// NULLs aside), converting to the fields' Go types.
func setFields(m interface {
	SetField(string, entgo.Value) error
}, r cc.Row) error {
	for _, k := range slices.Sorted(maps.Keys(r)) {
		v := r[k]
		if v == nil || k == "id" || k == "code" {
			continue
		}
		if k == "days" {
			v = int(v.(int64))
		}
		if err := m.SetField(k, v); err != nil {
			return err
		}
	}
	return nil
}

func preds[P ~func(*entsql.Selector)](where cc.Row) []P {
	var out []P
	for _, k := range slices.Sorted(maps.Keys(where)) {
		out = append(out, P(entsql.FieldEQ(k, where[k])))
	}
	return out
}
