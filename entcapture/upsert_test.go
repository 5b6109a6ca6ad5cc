package entcapture_test

import (
	"context"
	"fmt"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	cc "github.com/heraldgo/herald/internal/capturecases"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
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
	}
	ctx := context.Background()
	ways := []way{
		{"OnConflictColumns.DoNothing", func(b *ent.ReaderCreateBulk) error {
			return b.OnConflictColumns("email").DoNothing().Exec(ctx)
		}, true},
		{"OnConflict(ConflictColumns).DoNothing", func(b *ent.ReaderCreateBulk) error {
			return b.OnConflict(entsql.ConflictColumns("email")).DoNothing().Exec(ctx)
		}, true},
		{"OnConflictColumns.Ignore", func(b *ent.ReaderCreateBulk) error {
			return b.OnConflictColumns("email").Ignore().Exec(ctx)
		}, false},
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
					var got []string
					for _, ev := range evs {
						p, err := cc.Decode(ev.Payload)
						must(t, err)
						after, _ := p["after"].(map[string]any)
						pk, _ := p["pk"].(float64)
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
						t.Errorf("events for %v, want [Ann Cid Eve Fay] (only the inserted rows)", got)
					}
				})
			}
		}
	})
}
