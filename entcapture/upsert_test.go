package entcapture_test

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	cc "github.com/heraldgo/herald/internal/capturecases"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/reader"
)

// TestBulkUpsertDoNothingAutoIncrement: a CreateBulk with ON CONFLICT DO
// NOTHING on a table whose ids the database generates, where some rows
// conflict, captures exactly the inserted rows, each with the id the
// database gave it. ent maps the ids its INSERT … RETURNING id returns to
// the builders by position, and DO NOTHING returns none for skipped rows,
// so the ids ent assigns after a skipped row are shifted; the capture
// must not use them. On PostgreSQL and SQLite, with and without a caller
// transaction, through OnConflictColumns and OnConflict.
func TestBulkUpsertDoNothingAutoIncrement(t *testing.T) {
	t.Parallel()
	type way struct {
		name string
		run  func(b *ent.ReaderCreateBulk) error
		dup  bool // DO NOTHING skips a row that conflicts with an earlier one of the statement (DO UPDATE fails)
		same bool // Ignore (DO UPDATE SET id = id) writes the conflicting rows with their values: updated events (NEW-H)
	}
	ctx := context.Background()
	ways := []way{
		{"OnConflictColumns.DoNothing", func(b *ent.ReaderCreateBulk) error {
			return b.OnConflictColumns("email").DoNothing().Exec(ctx)
		}, true, false},
		{"OnConflict(ConflictColumns).DoNothing", func(b *ent.ReaderCreateBulk) error {
			return b.OnConflict(entsql.ConflictColumns("email")).DoNothing().Exec(ctx)
		}, true, false},
		{"OnConflictColumns.Ignore", func(b *ent.ReaderCreateBulk) error {
			return b.OnConflictColumns("email").Ignore().Exec(ctx)
		}, false, true},
	}
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, entcapture.Config{Options: map[string]envelope.Options{"Reader": {Payload: envelope.After}}})
		_, err := e.db.Exec(`CREATE UNIQUE INDEX readers_email ON readers (email)`)
		must(t, err)
		for _, w := range ways {
			for _, inTx := range []bool{false, true} {
				name := w.name
				if inTx {
					name += "/in Tx"
				}
				t.Run(name, func(t *testing.T) {
					_, err := e.db.Exec(`DELETE FROM readers`)
					must(t, err)
					seed := e.client.Reader.CreateBulk(
						e.client.Reader.Create().SetName("Bee").SetEmail("b@x"),
						e.client.Reader.Create().SetName("Dee").SetEmail("d@x"),
					).SaveX(ctx)
					_, err = e.db.Exec(`DELETE FROM herald_outbox`)
					must(t, err)

					c := clientConn(e.client)
					var tx *ent.Tx
					if inTx {
						tx, err = e.client.Tx(ctx)
						must(t, err)
						c = txConn(tx)
					}
					// b@x and d@x conflict with the seed; Fox's f@x
					// conflicts with Fay's, in the same statement.
					bs := []*ent.ReaderCreate{
						c.Reader.Create().SetName("Ann").SetEmail("a@x"),
						c.Reader.Create().SetName("Bob").SetEmail("b@x"),
						c.Reader.Create().SetName("Cid").SetEmail("c@x"),
						c.Reader.Create().SetName("Dan").SetEmail("d@x"),
						c.Reader.Create().SetName("Eve").SetEmail("e@x"),
						c.Reader.Create().SetName("Fay").SetEmail("f@x"),
					}
					if w.dup {
						bs = append(bs, c.Reader.Create().SetName("Fox").SetEmail("f@x"))
					}
					err = w.run(c.Reader.CreateBulk(bs...))
					if tx != nil {
						if err != nil {
							_ = tx.Rollback()
						} else {
							err = tx.Commit()
						}
					}
					must(t, err)

					// The rows the database has, by id.
					rows, err := e.db.Query(`SELECT id, name FROM readers ORDER BY id`)
					must(t, err)
					defer rows.Close()
					names := map[float64]string{}
					for rows.Next() {
						var id int64
						var n string
						must(t, rows.Scan(&id, &n))
						names[float64(id)] = n
					}
					must(t, rows.Err())
					if len(names) != 6 {
						t.Fatalf("%d readers, want 6: %v", len(names), names)
					}
					for _, s := range seed {
						if names[float64(s.ID)] != s.Name {
							t.Fatalf("seed row %d is %q, want %q (a skipped row was updated)", s.ID, names[float64(s.ID)], s.Name)
						}
					}

					evs := e.events(t)
					var got, same []string
					for _, ev := range evs {
						p, err := cc.Decode(ev.Payload)
						must(t, err)
						after, _ := p["after"].(map[string]any)
						pk, _ := p["pk"].(float64)
						if w.same && p["operation"] == string(envelope.Updated) && after != nil && after["id"] == pk {
							if names[pk] != after["name"] {
								t.Errorf("updated event for id %v says name %v; the row is %q", pk, after["name"], names[pk])
							}
							same = append(same, after["name"].(string))
							continue
						}
						if p["operation"] != string(envelope.Inserted) || after == nil || after["id"] != pk {
							t.Fatalf("event %s", ev.Payload)
						}
						if names[pk] != after["name"] {
							t.Errorf("event for id %v says name %v; the row with that id is %q", pk, after["name"], names[pk])
						}
						if ev.OrderingKey != fmt.Sprintf("Reader:%d", int64(pk)) {
							t.Errorf("ordering key %q for id %v", ev.OrderingKey, pk)
						}
						got = append(got, after["name"].(string))
					}
					if fmt.Sprint(got) != "[Ann Cid Eve Fay]" {
						t.Errorf("inserted events for %v, want [Ann Cid Eve Fay]", got)
					}
					// On MySQL, ON DUPLICATE KEY UPDATE id = id leaves a row it
					// would set to its values unwritten (affected rows 0): no
					// event (doc.go, "MySQL and MariaDB").
					if want := map[bool]string{true: "[Bee Dee]", false: "[]"}[w.same && d != envelope.MySQL]; fmt.Sprint(same) != want {
						t.Errorf("updated events for %v, want %s (the rows Ignore wrote with their values)", same, want)
					}
				})
			}
		}
	})
}

// TestUpsertClassifiedByTheDatabase: through entcapture.Driver, an upsert
// without conflict columns (OnConflict().DoNothing(), on SQLite also
// Ignore()) and one whose update has a WHERE (sql.UpdateWhere) are
// classified row by row by the INSERT's own RETURNING — PostgreSQL
// "xmax = 0", SQLite a rowid beyond the table's largest (or an explicit
// id no row had) — where they failed with ErrUnsupported before (ent's
// suite's Upsert and edge-schema tests). Every row the statement
// inserted or updated has one event whose images are the stored rows;
// rows it skipped have none. Single creates and bulks, After and
// BeforeAndAfter, with and without client.Tx. What stays refused fails
// with ErrUnsupported.
func TestUpsertClassifiedByTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	notDee := func() entsql.ConflictOption { return entsql.UpdateWhere(entsql.NEQ(reader.FieldName, "Dee")) }
	type upsertCase struct {
		name   string
		sqlite bool    // SQLite only (PostgreSQL refuses DO UPDATE without a target)
		noRows bool    // ent returns sql.ErrNoRows (a single create the upsert skipped)
		same   []int64 // rows the upsert writes with the values they held (Ignore): updated; MySQL writes none
		// MySQL refuses it with ErrUnsupported, writing nothing (doc.go,
		// "MySQL and MariaDB"): ON DUPLICATE KEY UPDATE names no conflict
		// target (ent's statement names no columns and not every id is
		// set) and has no WHERE.
		mysqlRefused bool
		run          func(c conn) error
	}
	cases := []upsertCase{
		{name: "OnConflict().DoNothing, bulk, explicit ids below the largest", run: func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetID(5).SetName("Ann").SetEmail("a@x"),
				c.Reader.Create().SetID(11).SetName("Bob").SetEmail("b@x"), // conflicts: skipped
				c.Reader.Create().SetID(15).SetName("Cid").SetEmail("c@x"),
			).OnConflict().DoNothing().Exec(ctx)
		}},
		{name: "OnConflict().DoNothing, bulk", mysqlRefused: true, run: func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetName("Ann").SetEmail("a@x"),
				c.Reader.Create().SetName("Dan").SetEmail("d@x"), // conflicts: skipped
			).OnConflict().DoNothing().Exec(ctx)
		}},
		{name: "OnConflict().DoNothing, single", mysqlRefused: true, run: func(c conn) error {
			return c.Reader.Create().SetName("Eve").SetEmail("e@x").OnConflict().DoNothing().Exec(ctx)
		}},
		{name: "OnConflict().Ignore, bulk", sqlite: true, same: []int64{10}, run: func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetName("Ann").SetEmail("a@x"),
				c.Reader.Create().SetName("Bob").SetEmail("b@x"), // conflicts: set to itself
			).OnConflict().Ignore().Exec(ctx)
		}},
		// NEW-H: ent's Ignore is DO UPDATE SET id = id, not DO NOTHING: the
		// database writes the conflicting row (new xmin, triggers,
		// RowsAffected), which gets an updated event with equal images.
		{name: "OnConflictColumns.Ignore, single", same: []int64{10}, run: func(c conn) error {
			return c.Reader.Create().SetName("Bob").SetEmail("b@x").OnConflictColumns(reader.FieldEmail).Ignore().Exec(ctx)
		}},
		{name: "OnConflictColumns.Ignore, bulk", same: []int64{10, 20}, run: func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetName("Bob").SetEmail("b@x"), // conflicts: written with its values
				c.Reader.Create().SetName("Cid").SetEmail("c@x"), // inserted
				c.Reader.Create().SetName("Dan").SetEmail("d@x"), // conflicts: written with its values
			).OnConflictColumns(reader.FieldEmail).Ignore().Exec(ctx)
		}},
		{name: "UpdateWhere, bulk", mysqlRefused: true, run: func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetName("Bob").SetEmail("b@x"), // updated
				c.Reader.Create().SetName("Dan").SetEmail("d@x"), // Dee: skipped
				c.Reader.Create().SetName("Cid").SetEmail("c@x"), // inserted
			).OnConflict(entsql.ConflictColumns(reader.FieldEmail), notDee()).UpdateNewValues().Exec(ctx)
		}},
		{name: "UpdateWhere, single, updated", mysqlRefused: true, run: func(c conn) error {
			return c.Reader.Create().SetName("Bob").SetEmail("b@x").
				OnConflict(entsql.ConflictColumns(reader.FieldEmail), notDee()).UpdateNewValues().Exec(ctx)
		}},
		{name: "UpdateWhere, single, skipped", noRows: true, mysqlRefused: true, run: func(c conn) error {
			return c.Reader.Create().SetName("Dan").SetEmail("d@x").
				OnConflict(entsql.ConflictColumns(reader.FieldEmail), notDee()).UpdateNewValues().Exec(ctx)
		}},
		{name: "UpdateWhere, Update of a column", mysqlRefused: true, run: func(c conn) error {
			return c.Reader.Create().SetName("Bob").SetEmail("b@x").
				OnConflict(entsql.ConflictColumns(reader.FieldEmail), notDee()).Update(func(u *ent.ReaderUpsert) { u.SetName("Bob!") }).Exec(ctx)
		}},
	}
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, mode := range []envelope.PayloadMode{envelope.After, envelope.BeforeAndAfter} {
			t.Run(mode.String(), func(t *testing.T) {
				e := newEnv(t, d, entcapture.Config{Options: map[string]envelope.Options{"Reader": {Payload: mode}}})
				_, err := e.db.Exec(`CREATE UNIQUE INDEX readers_email ON readers (email)`)
				must(t, err)
				for _, uc := range cases {
					if uc.sqlite && d != envelope.SQLite {
						continue
					}
					for _, inTx := range []bool{false, true} {
						name := uc.name
						if inTx {
							name += "/in Tx"
						}
						t.Run(name, func(t *testing.T) {
							for _, q := range []string{`DELETE FROM readers`, `INSERT INTO readers (id, name, email) VALUES (10, 'Bee', 'b@x'), (20, 'Dee', 'd@x')`, `DELETE FROM herald_outbox`} {
								_, err := e.db.Exec(q)
								must(t, err)
							}
							if d == envelope.Postgres {
								_, err := e.db.Exec(`SELECT setval(pg_get_serial_sequence('readers', 'id'), 20)`)
								must(t, err)
							}
							before := readerRows(t, e)
							c := clientConn(e.client)
							var tx *ent.Tx
							if inTx {
								tx, err = e.client.Tx(ctx)
								must(t, err)
								c = txConn(tx)
							}
							err := uc.run(c)
							if tx != nil {
								if err != nil {
									_ = tx.Rollback()
								} else {
									err = tx.Commit()
								}
							}
							same := uc.same
							switch {
							case d == envelope.MySQL && uc.mysqlRefused:
								if !errors.Is(err, envelope.ErrUnsupported) {
									t.Fatalf("MySQL: err %v, want ErrUnsupported", err)
								}
							case uc.noRows:
								if !errors.Is(err, stdsql.ErrNoRows) {
									t.Fatalf("err %v, want sql.ErrNoRows (as ent without capture)", err)
								}
							default:
								must(t, err)
							}
							if d == envelope.MySQL {
								same = nil // a row set to its own values is not written
							}
							after := readerRows(t, e)
							if d == envelope.MySQL && uc.mysqlRefused && fmt.Sprint(after) != fmt.Sprint(before) {
								t.Errorf("MySQL: a refused upsert wrote rows: before %v, after %v", before, after)
							}
							checkReaderEvents(t, e, mode, before, after, same...)
						})
					}
				}
				t.Run("refused", func(t *testing.T) {
					if d == envelope.SQLite && mode == envelope.BeforeAndAfter {
						// An update without conflict columns: the rows it
						// replaces are unknown before the statement.
						err := e.client.Reader.Create().SetName("Bob").SetEmail("b@x").OnConflict(entsql.ResolveWithNewValues()).Exec(ctx)
						if !errors.Is(err, envelope.ErrUnsupported) {
							t.Errorf("DO UPDATE without conflict columns, SQLite, BeforeAndAfter: err %v, want ErrUnsupported", err)
						}
					}
					if d == envelope.Postgres {
						err := e.client.Reader.Create().SetName("Bob").SetEmail("b@x").OnConflict(entsql.ConflictConstraint("readers_email"), entsql.DoNothing()).Exec(ctx)
						if !errors.Is(err, envelope.ErrUnsupported) {
							t.Errorf("ON CONSTRAINT: err %v, want ErrUnsupported", err)
						}
					}
					// A client without Driver, in client.Tx: the statement
					// is not seen.
					tx, err := e.plain.Tx(ctx)
					must(t, err)
					defer func() { _ = tx.Rollback() }()
					err = tx.Reader.Create().SetName("Bob").SetEmail("b@x").OnConflict().DoNothing().Exec(ctx)
					if !errors.Is(err, envelope.ErrUnsupported) {
						t.Errorf("OnConflict().DoNothing in a plain client's Tx: err %v, want ErrUnsupported", err)
					}
				})
			})
		}
	})
}

// readerRows reads the readers table: id -> row.
func readerRows(t *testing.T, e *env) map[int64][2]string {
	t.Helper()
	rows, err := e.db.Query(`SELECT id, name, email FROM readers`)
	must(t, err)
	defer rows.Close()
	out := map[int64][2]string{}
	for rows.Next() {
		var id int64
		var n, m string
		must(t, rows.Scan(&id, &n, &m))
		out[id] = [2]string{n, m}
	}
	must(t, rows.Err())
	return out
}

// checkReaderEvents holds the outbox to the rows: one event per row the
// write inserted or updated (a row written with the values it held, by
// an Ignore, is one of same: updated, with equal images), its images the
// stored rows.
func checkReaderEvents(t *testing.T, e *env, mode envelope.PayloadMode, before, after map[int64][2]string, same ...int64) {
	t.Helper()
	want := map[int64]string{}
	for _, id := range same {
		want[id] = "updated"
	}
	for id, r := range after {
		if b, ok := before[id]; !ok {
			want[id] = "inserted"
		} else if b != r {
			want[id] = "updated"
		}
	}
	got := map[int64]string{}
	for _, ev := range e.events(t) {
		p, err := cc.Decode(ev.Payload)
		must(t, err)
		id := int64(p["pk"].(float64))
		op, _ := p["operation"].(string)
		if _, dup := got[id]; dup {
			t.Errorf("two events for reader %d", id)
		}
		got[id] = op
		a, _ := p["after"].(map[string]any)
		if a == nil || a["name"] != after[id][0] || a["id"] != float64(id) {
			t.Errorf("%s %d: after %v, the row is %v", op, id, a, after[id])
		}
		b, _ := p["before"].(map[string]any)
		switch {
		case op == "updated" && mode == envelope.BeforeAndAfter && (b == nil || b["name"] != before[id][0]):
			t.Errorf("updated %d: before %v, the row was %v", id, b, before[id])
		case op == "inserted" && b != nil:
			t.Errorf("inserted %d has a before image %v", id, b)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v (rows before %v, after %v)", got, want, before, after)
	}
}
