package entcapture_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	entgo "entgo.io/ent"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	cc "github.com/heraldgo/herald/internal/capturecases"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/predicate"
)

// conn is the typed clients of an *ent.Client or an *ent.Tx.
type conn struct {
	Loan   *ent.LoanClient
	Reader *ent.ReaderClient
	Tag    *ent.TagClient
}

func clientConn(c *ent.Client) conn { return conn{c.Loan, c.Reader, c.Tag} }
func txConn(tx *ent.Tx) conn        { return conn{tx.Loan, tx.Reader, tx.Tag} }

type setter interface {
	SetField(string, entgo.Value) error
}

// set fills a mutation from a neutral row, converting to the fields' Go
// types; nil leaves a nullable field unset (NULL).
func set(t testing.TB, m setter, model string, row cc.Row) {
	t.Helper()
	for _, k := range sortedKeys(row) {
		v := row[k]
		if v == nil || k == "id" || k == "code" {
			continue
		}
		if model == "Loan" && k == "days" {
			v = int(v.(int64))
		}
		if err := m.SetField(k, v); err != nil {
			t.Fatalf("%s.%s: %v", model, k, err)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func where(row cc.Row) []func(*sql.Selector) {
	var ps []func(*sql.Selector)
	for _, k := range sortedKeys(row) {
		ps = append(ps, sql.FieldEQ(k, row[k]))
	}
	return ps
}

func loanPs(ps []func(*sql.Selector)) []predicate.Loan {
	out := make([]predicate.Loan, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

func tagPs(ps []func(*sql.Selector)) []predicate.Tag {
	out := make([]predicate.Tag, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

func readerPs(ps []func(*sql.Selector)) []predicate.Reader {
	out := make([]predicate.Reader, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// createOne inserts one row through Create().Save.
func createOne(t testing.TB, ctx context.Context, c conn, model string, row cc.Row) error {
	switch model {
	case "Loan":
		b := c.Loan.Create()
		set(t, b.Mutation(), model, row)
		_, err := b.Save(ctx)
		return err
	case "Reader":
		b := c.Reader.Create()
		set(t, b.Mutation(), model, row)
		_, err := b.Save(ctx)
		return err
	case "Tag":
		b := c.Tag.Create().SetID(row["code"].(string))
		set(t, b.Mutation(), model, row)
		_, err := b.Save(ctx)
		return err
	}
	t.Fatalf("no model %s", model)
	return nil
}

// createBulk inserts rows through CreateBulk.
func createBulk(t testing.TB, ctx context.Context, c conn, model string, rows []cc.Row) (int, error) {
	switch model {
	case "Loan":
		bs := make([]*ent.LoanCreate, len(rows))
		for i, r := range rows {
			bs[i] = c.Loan.Create()
			set(t, bs[i].Mutation(), model, r)
		}
		out, err := c.Loan.CreateBulk(bs...).Save(ctx)
		return len(out), err
	case "Reader":
		bs := make([]*ent.ReaderCreate, len(rows))
		for i, r := range rows {
			bs[i] = c.Reader.Create()
			set(t, bs[i].Mutation(), model, r)
		}
		out, err := c.Reader.CreateBulk(bs...).Save(ctx)
		return len(out), err
	case "Tag":
		bs := make([]*ent.TagCreate, len(rows))
		for i, r := range rows {
			bs[i] = c.Tag.Create().SetID(r["code"].(string))
			set(t, bs[i].Mutation(), model, r)
		}
		out, err := c.Tag.CreateBulk(bs...).Save(ctx)
		return len(out), err
	}
	t.Fatalf("no model %s", model)
	return 0, nil
}

func updateOne(t testing.TB, ctx context.Context, c conn, model string, pk any, s cc.Row) error {
	switch model {
	case "Loan":
		b := c.Loan.UpdateOneID(pk.(int64))
		set(t, b.Mutation(), model, s)
		_, err := b.Save(ctx)
		return err
	case "Reader":
		b := c.Reader.UpdateOneID(pk.(int64))
		set(t, b.Mutation(), model, s)
		_, err := b.Save(ctx)
		return err
	case "Tag":
		b := c.Tag.UpdateOneID(pk.(string))
		set(t, b.Mutation(), model, s)
		_, err := b.Save(ctx)
		return err
	}
	t.Fatalf("no model %s", model)
	return nil
}

func updateWhere(t testing.TB, ctx context.Context, c conn, model string, w cc.Row, s cc.Row) (int, error) {
	ps := where(w)
	switch model {
	case "Loan":
		b := c.Loan.Update().Where(loanPs(ps)...)
		set(t, b.Mutation(), model, s)
		return b.Save(ctx)
	case "Reader":
		b := c.Reader.Update().Where(readerPs(ps)...)
		set(t, b.Mutation(), model, s)
		return b.Save(ctx)
	case "Tag":
		b := c.Tag.Update().Where(tagPs(ps)...)
		set(t, b.Mutation(), model, s)
		return b.Save(ctx)
	}
	t.Fatalf("no model %s", model)
	return 0, nil
}

func deleteOne(t testing.TB, ctx context.Context, c conn, model string, pk any) error {
	switch model {
	case "Loan":
		return c.Loan.DeleteOneID(pk.(int64)).Exec(ctx)
	case "Reader":
		return c.Reader.DeleteOneID(pk.(int64)).Exec(ctx)
	case "Tag":
		return c.Tag.DeleteOneID(pk.(string)).Exec(ctx)
	}
	t.Fatalf("no model %s", model)
	return nil
}

func deleteWhere(t testing.TB, ctx context.Context, c conn, model string, w cc.Row) (int, error) {
	ps := where(w)
	switch model {
	case "Loan":
		return c.Loan.Delete().Where(loanPs(ps)...).Exec(ctx)
	case "Reader":
		return c.Reader.Delete().Where(readerPs(ps)...).Exec(ctx)
	case "Tag":
		return c.Tag.Delete().Where(tagPs(ps)...).Exec(ctx)
	}
	t.Fatalf("no model %s", model)
	return 0, nil
}

// tagBulk is the CreateBulk of an upsert case's rows (all of Tag).
func tagBulk(t testing.TB, c conn, cs cc.Case) *ent.TagCreateBulk {
	if cs.Model != "Tag" {
		t.Fatalf("upsert paths are written for Tag, not %s", cs.Model)
	}
	bs := make([]*ent.TagCreate, len(cs.Write.Rows))
	for i, r := range cs.Write.Rows {
		bs[i] = c.Tag.Create().SetID(r["code"].(string)).SetLabel(r["label"].(string))
	}
	return c.Tag.CreateBulk(bs...)
}

// path is one ent way of doing a write kind; it returns the rows ent
// reported affected (-1 when the API does not say).
type path struct {
	name string
	run  func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error)
}

func keyRow(c cc.Case) cc.Row { return cc.Row{cc.ModelByName(c.Model).PK[0]: c.Write.PK} }

var paths = map[cc.Kind][]path{
	cc.Insert: {
		{"Create.Save", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return -1, createOne(t, ctx, c, cs.Model, cs.Write.Rows[0])
		}},
		{"CreateBulk(one)", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return createBulk(t, ctx, c, cs.Model, cs.Write.Rows)
		}},
	},
	cc.InsertMany: {
		{"CreateBulk", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return createBulk(t, ctx, c, cs.Model, cs.Write.Rows)
		}},
	},
	cc.UpdateByPK: {
		{"UpdateOneID.Save", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return -1, updateOne(t, ctx, c, cs.Model, cs.Write.PK, cs.Write.Set)
		}},
		{"Update.Where(key).Save", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return updateWhere(t, ctx, c, cs.Model, keyRow(cs), cs.Write.Set)
		}},
	},
	cc.UpdateWhere: {
		{"Update.Where.Save", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return updateWhere(t, ctx, c, cs.Model, cs.Write.Where, cs.Write.Set)
		}},
	},
	cc.DeleteByPK: {
		{"DeleteOneID.Exec", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return -1, deleteOne(t, ctx, c, cs.Model, cs.Write.PK)
		}},
		{"Delete.Where(key).Exec", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return deleteWhere(t, ctx, c, cs.Model, keyRow(cs))
		}},
	},
	cc.Upsert: {
		{"CreateBulk.OnConflictColumns.UpdateNewValues", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return -1, tagBulk(t, c, cs).OnConflictColumns(cs.Write.Conflict...).UpdateNewValues().Exec(ctx)
		}},
		{"CreateBulk.OnConflictColumns.Update(UpdateLabel)", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return -1, tagBulk(t, c, cs).OnConflictColumns(cs.Write.Conflict...).Update(func(u *ent.TagUpsert) { u.UpdateLabel() }).Exec(ctx)
		}},
		{"Create.OnConflictColumns.UpdateNewValues, one by one", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			for _, r := range cs.Write.Rows {
				if err := c.Tag.Create().SetID(r["code"].(string)).SetLabel(r["label"].(string)).
					OnConflictColumns(cs.Write.Conflict...).UpdateNewValues().Exec(ctx); err != nil {
					return 0, err
				}
			}
			return -1, nil
		}},
	},
	cc.UpsertIgnore: {
		{"CreateBulk.OnConflictColumns.DoNothing", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return -1, tagBulk(t, c, cs).OnConflictColumns(cs.Write.Conflict...).DoNothing().Exec(ctx)
		}},
		// Not Ignore: ent's Ignore is DO UPDATE SET id = id, which writes
		// the conflicting row and gets an updated event (NEW-H;
		// TestUpsertClassifiedByTheDatabase, TestBulkUpsertDoNothingAutoIncrement).
	},
	cc.DeleteWhere: {
		{"Delete.Where.Exec", func(t *testing.T, ctx context.Context, c conn, cs cc.Case) (int, error) {
			return deleteWhere(t, ctx, c, cs.Model, cs.Write.Where)
		}},
	},
}

// reset empties every table and restarts generated keys.
func reset(t testing.TB, e *env) {
	t.Helper()
	if e.dialect == envelope.Postgres {
		_, err := e.db.Exec(`TRUNCATE readers, loans, tags, herald_outbox RESTART IDENTITY`)
		must(t, err)
		return
	}
	for _, tb := range []string{"readers", "loans", "tags", "herald_outbox"} {
		_, err := e.db.Exec(`DELETE FROM ` + tb)
		must(t, err)
		if e.dialect == envelope.MySQL && tb != "tags" {
			_, err := e.db.Exec(`ALTER TABLE ` + tb + ` AUTO_INCREMENT = 1`)
			must(t, err)
		}
	}
	if e.dialect == envelope.SQLite {
		_, _ = e.db.Exec(`DELETE FROM sqlite_sequence`)
	}
}

const fixedAt = "2000-01-01T00:00:00Z"

// TestConformance runs internal/capturecases through ent: every case
// ent can express, through each ent path of its kind, outside and inside
// a caller's transaction, in every payload mode, on PostgreSQL,
// SQLite and MySQL (MariaDB here). The committed events must be byte for byte the payloads
// capturecases.ExpectJSON renders (what gormcapture's events are checked
// against too), occurred_at aside, with the same topics and ordering keys.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, d := range withMySQL() {
		for _, mode := range []envelope.PayloadMode{envelope.After, envelope.Keys, envelope.BeforeAndAfter} {
			t.Run(d.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				opts := map[string]envelope.Options{}
				for _, m := range cc.Models {
					opts[m.Name] = envelope.Options{Payload: mode}
				}
				e := newEnv(t, d.dialect, entcapture.Config{Namespace: cc.Namespace, Options: opts})
				for _, c := range cc.Cases {
					if why, ok := cc.EntUnsupported[c.Name]; ok {
						t.Logf("skip %q: %s", c.Name, why)
						continue
					}
					ps, ok := paths[c.Write.Kind]
					if !ok {
						t.Errorf("case %q: no ent path for %s", c.Name, c.Write.Kind)
						continue
					}
					for _, p := range ps {
						for _, inTx := range []bool{false, true} {
							name := c.Name + "/" + p.name
							if inTx {
								name += "/in Tx"
							}
							t.Run(name, func(t *testing.T) { runCase(t, e, c, p, mode, inTx) })
						}
					}
				}
			})
		}
	}
}

func runCase(t *testing.T, e *env, c cc.Case, p path, mode envelope.PayloadMode, inTx bool) {
	ctx := context.Background()
	reset(t, e)
	for _, r := range c.Seed {
		model := c.Model
		if _, isReader := r["email"]; isReader {
			model = "Reader"
		}
		must(t, createOne(t, ctx, clientConn(e.client), model, r))
	}
	_, err := e.db.Exec(`DELETE FROM herald_outbox`)
	must(t, err)

	var n int
	if inTx {
		tx, err := e.client.Tx(ctx)
		must(t, err)
		n, err = p.run(t, ctx, txConn(tx), c)
		if err != nil {
			_ = tx.Rollback()
			t.Fatalf("write: %v", err)
		}
		must(t, tx.Commit())
	} else {
		n, err = p.run(t, ctx, clientConn(e.client), c)
		if err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	want := cc.Expect(c, mode)
	if n >= 0 && n != len(want) {
		t.Errorf("ent reported %d rows, want %d", n, len(want))
	}
	raw, err := cc.ExpectJSON(c, mode, fixedAt)
	must(t, err)
	got := e.events(t)
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d:\n%s", len(got), len(want), dump(got))
	}
	for i, w := range want {
		g := got[i]
		env, err := cc.Decode(g.Payload)
		if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
		if e.dialect != envelope.Postgres {
			// SQLite, and MySQL's LONGTEXT payload, store the bytes herald wrote.
			if b := cc.ReplaceOccurredAt(g.Payload, fixedAt); !bytes.Equal(b, raw[i]) {
				t.Errorf("event %d payload:\n got %s\nwant %s", i, b, raw[i])
			}
		} else if !reflect.DeepEqual(env, w.Envelope) {
			// PostgreSQL's jsonb normalizes what it stores.
			t.Errorf("event %d envelope:\n got %v\nwant %v", i, env, w.Envelope)
		}
		if g.Topic != w.Topic || g.OrderingKey != w.OrderingKey {
			t.Errorf("event %d: topic %q key %q, want %q %q", i, g.Topic, g.OrderingKey, w.Topic, w.OrderingKey)
		}
	}
}

func dump(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s %s %s\n", e.Topic, e.OrderingKey, e.Payload)
	}
	return b.String()
}
