package entcapture_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"entgo.io/ent/schema/field"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/entcapture/entcapturert"
	"github.com/heraldgo/herald/envelope"
	cc "github.com/heraldgo/herald/internal/capturecases"
	"github.com/heraldgo/herald/internal/capturecases/entimages/ent"
	"github.com/heraldgo/herald/internal/capturecases/entimages/ent/member"
	_ "github.com/heraldgo/herald/internal/capturecases/entimages/ent/runtime"
	"github.com/heraldgo/herald/internal/capturecases/entimages/schema"
)

// imgEnv is one test database with the entimages schemas: a client on
// entcapture.Driver and one on the plain driver.
type imgEnv struct {
	dialect envelope.Dialect
	db      *sql.DB
	client  *ent.Client
	plain   *ent.Client
}

func newImgEnv(t testing.TB, d envelope.Dialect) *imgEnv {
	t.Helper()
	db := openDB(t, d)
	raw := entsql.OpenDB(entDialect(d), db)
	e := &imgEnv{dialect: d, db: db, client: ent.NewClient(ent.Driver(entcapture.Driver(raw))), plain: ent.NewClient(ent.Driver(raw))}
	createSchema(t, func(ctx context.Context) error { return e.client.Schema.Create(ctx) })
	return e
}

// way is how a test reaches the database: through the client on Driver
// (its own transaction), in client.Tx of it, or in client.Tx of the plain
// client (no wrapper: the capture reads rows instead of RETURNING).
type way struct {
	name string
	run  func(t *testing.T, e *imgEnv, f func(c *ent.Client) error)
}

var ways = []way{
	{"Driver", func(t *testing.T, e *imgEnv, f func(c *ent.Client) error) { must(t, f(e.client)) }},
	{"Driver Tx", func(t *testing.T, e *imgEnv, f func(c *ent.Client) error) { inTx(t, e.client, f) }},
	{"plain Tx", func(t *testing.T, e *imgEnv, f func(c *ent.Client) error) { inTx(t, e.plain, f) }},
}

func inTx(t *testing.T, c *ent.Client, f func(c *ent.Client) error) {
	t.Helper()
	tx, err := c.Tx(context.Background())
	must(t, err)
	if err := f(tx.Client()); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	must(t, tx.Commit())
}

// eachWay runs f for each dialect and way, each in a fresh database.
func eachWay(t *testing.T, f func(t *testing.T, e *imgEnv, w way)) {
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, w := range ways {
			t.Run(w.name, func(t *testing.T) {
				t.Parallel()
				f(t, newImgEnv(t, d), w)
			})
		}
	})
}

// payloads returns the decoded events, in sequence order, and empties the
// outbox.
func (e *imgEnv) payloads(t testing.TB) []map[string]any {
	t.Helper()
	rows, err := e.db.Query(`SELECT payload FROM herald_outbox ORDER BY sequence`)
	must(t, err)
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var b []byte
		must(t, rows.Scan(&b))
		p, err := cc.Decode(b)
		must(t, err)
		out = append(out, p)
	}
	must(t, rows.Err())
	_, err = e.db.Exec(`DELETE FROM herald_outbox`)
	must(t, err)
	return out
}

func image(t testing.TB, p map[string]any, which string) map[string]any {
	t.Helper()
	m, ok := p[which].(map[string]any)
	if !ok {
		t.Fatalf("event has no %s image: %v", which, p)
	}
	return m
}

func one(t testing.TB, ps []map[string]any, op envelope.Operation) map[string]any {
	t.Helper()
	if len(ps) != 1 || ps[0]["operation"] != string(op) {
		t.Fatalf("events %v, want one %s", ps, op)
	}
	return ps[0]
}

var ctx = context.Background()

// TestNullUUIDEdgeField (issue 18, 8): an optional, non-Nillable UUID edge
// field whose column is NULL is null in every image — after ClearAccount,
// and in an upsert's inserted row — not the nil UUID its Go field holds.
func TestNullUUIDEdgeField(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		a := e.client.Account.Create().SetName("acme").SaveX(ctx)
		m := e.client.Member.Create().SetTenant("t").SetEmail("m@x").SetAccount(a).SaveX(ctx)
		e.payloads(t)
		w.run(t, e, func(c *ent.Client) error { return c.Member.UpdateOneID(m.ID).ClearAccount().Exec(ctx) })
		p := one(t, e.payloads(t), envelope.Updated)
		if got := image(t, p, "after")["account_id"]; got != nil {
			t.Errorf("after ClearAccount: after.account_id = %v, want null", got)
		}
		if got := image(t, p, "before")["account_id"]; got != a.ID.String() {
			t.Errorf("before.account_id = %v, want %v", got, a.ID)
		}
		w.run(t, e, func(c *ent.Client) error { return c.Member.Update().ClearAccount().SetName("n").Exec(ctx) })
		if got := image(t, one(t, e.payloads(t), envelope.Updated), "before")["account_id"]; got != nil {
			t.Errorf("bulk update: before.account_id = %v, want null", got)
		}
		w.run(t, e, func(c *ent.Client) error {
			return c.Member.Create().SetTenant("t").SetEmail("new@x").OnConflictColumns(member.FieldTenant, member.FieldEmail).UpdateNewValues().Exec(ctx)
		})
		if got, ok := image(t, one(t, e.payloads(t), envelope.Inserted), "after")["account_id"]; !ok || got != nil {
			t.Errorf("upsert's inserted row: after.account_id = %v (present %v), want null", got, ok)
		}
	})
}

// TestDatabaseDefaultInCreate (issue 18, 9): a create that leaves unset a
// field with a database default (entsql.Default) has the value the row
// holds in its event, not null.
func TestDatabaseDefaultInCreate(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		w.run(t, e, func(c *ent.Client) error { return c.Member.Create().SetTenant("t").SetEmail("d@x").Exec(ctx) })
		after := image(t, one(t, e.payloads(t), envelope.Inserted), "after")
		if after["region"] != "eu" {
			t.Errorf("after.region = %v, want the database default \"eu\"", after["region"])
		}
		if v, ok := after["name"]; !ok || v != nil {
			t.Errorf("after.name = %v (present %v), want null", v, ok)
		}
		w.run(t, e, func(c *ent.Client) error {
			return c.Member.CreateBulk(c.Member.Create().SetTenant("t").SetEmail("b1@x"), c.Member.Create().SetTenant("t").SetEmail("b2@x")).Exec(ctx)
		})
		ps := e.payloads(t)
		if len(ps) != 2 {
			t.Fatalf("bulk: %d events, want 2", len(ps))
		}
		for i, p := range ps {
			if r := image(t, p, "after")["region"]; r != "eu" {
				t.Errorf("bulk: row %d's region = %v, want \"eu\"", i, r)
			}
		}
		// A bulk whose items differ in the fields they set: ent inserts
		// NULL where an item leaves a column other items set, and the
		// event says what the row holds.
		w.run(t, e, func(c *ent.Client) error {
			return c.Member.CreateBulk(c.Member.Create().SetTenant("t").SetEmail("m1@x"), c.Member.Create().SetTenant("t").SetEmail("m2@x").SetRegion("us")).Exec(ctx)
		})
		for _, p := range e.payloads(t) {
			var stored sql.NullString
			must(t, e.db.QueryRow(`SELECT region FROM members WHERE id = `+fmt.Sprint(p["pk"])).Scan(&stored))
			if r := image(t, p, "after")["region"]; (r == nil) != !stored.Valid || (stored.Valid && r != stored.String) {
				t.Errorf("mixed bulk: row %v's region = %v, stored %v", p["pk"], r, stored)
			}
		}
	})
}

// TestCreateAtColumnPrecision (issue 18, 10): on PostgreSQL a create's
// event holds its times as the columns store them: a timestamptz(3)
// keeps milliseconds, a timestamptz microseconds (mixin.Time's fields are
// set from time.Now, with nanoseconds).
func TestCreateAtColumnPrecision(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		if e.dialect != envelope.Postgres {
			t.Skip("SQLite stores the time as given")
		}
		seen := time.Date(2026, 5, 1, 10, 20, 5, 123456789, time.UTC)
		var id int
		w.run(t, e, func(c *ent.Client) error {
			m, err := c.Member.Create().SetTenant("t").SetEmail("p@x").SetSeen(seen).SetCreateTime(seen).Save(ctx)
			if m != nil {
				id = m.ID
			}
			return err
		})
		after := image(t, one(t, e.payloads(t), envelope.Inserted), "after")
		var stored, created time.Time
		must(t, e.db.QueryRow(`SELECT seen, create_time FROM members WHERE id = $1`, id).Scan(&stored, &created))
		for col, want := range map[string]time.Time{"seen": stored, "create_time": created} {
			s, _ := after[col].(string)
			got, err := time.Parse(time.RFC3339Nano, s)
			if err != nil || !got.Equal(want) {
				t.Errorf("after.%s = %v, want the stored %s", col, after[col], want.UTC().Format(time.RFC3339Nano))
			}
		}
	})
}

func changedOf(t testing.TB, p map[string]any) []string {
	t.Helper()
	var out []string
	cs, _ := p["changed"].([]any)
	for _, c := range cs {
		out = append(out, c.(string))
	}
	return out
}

// TestChangedListsEveryColumnSet (issue 18, 11): "changed" names the
// columns a schema hook sets, those Modify sets, and an AppendTags.
func TestChangedListsEveryColumnSet(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		m := e.client.Member.Create().SetTenant("t").SetEmail("c@x").SaveX(ctx)
		e.payloads(t)
		cases := []struct {
			name string
			f    func(c *ent.Client) error
			want string
		}{
			{"schema hook", func(c *ent.Client) error {
				return c.Member.UpdateOneID(m.ID).SetName("a").Exec(schema.WithStamp(ctx, "s1"))
			}, "stamp"},
			{"schema hook, bulk", func(c *ent.Client) error {
				return c.Member.Update().SetName("b").Exec(schema.WithStamp(ctx, "s2"))
			}, "stamp"},
			{"Modify", func(c *ent.Client) error {
				return c.Member.UpdateOneID(m.ID).SetName("c").Modify(func(u *entsql.UpdateBuilder) { u.Set(member.FieldRegion, "ap") }).Exec(ctx)
			}, "region"},
			{"AppendTags", func(c *ent.Client) error {
				return c.Member.Update().AppendTags([]string{"x"}).Exec(ctx)
			}, "tags"},
		}
		for _, c := range cases {
			w.run(t, e, c.f)
			ch := changedOf(t, one(t, e.payloads(t), envelope.Updated))
			if !slices.Contains(ch, c.want) {
				t.Errorf("%s: changed = %v, want it to name %s", c.name, ch, c.want)
			}
		}
	})
}

// TestUpdateNarrowedBySchemaHook (issue 18, 3, updates): a schema hook
// that narrows an update (a tenant WhereP) leaves the rows it excludes
// without events.
func TestUpdateNarrowedBySchemaHook(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		a := e.client.Member.Create().SetTenant("a").SetEmail("x@x").SaveX(ctx)
		e.client.Member.Create().SetTenant("b").SetEmail("x@x").SaveX(ctx)
		e.payloads(t)
		w.run(t, e, func(c *ent.Client) error {
			return c.Member.Update().Where(member.Email("x@x")).SetName("n").Exec(schema.WithTenant(ctx, "a"))
		})
		p := one(t, e.payloads(t), envelope.Updated)
		if pk, _ := p["pk"].(float64); int(pk) != a.ID {
			t.Errorf("event for %v, want tenant a's row %d", p["pk"], a.ID)
		}
		if n := e.plain.Member.Query().Where(member.Name("n")).CountX(ctx); n != 1 {
			t.Fatalf("%d rows updated, want 1", n)
		}
	})
}

// TestUpsertSettingConflictColumn (issue 18, 5): an upsert whose action
// sets a conflict column is captured as the update it is.
func TestUpsertSettingConflictColumn(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		m := e.client.Member.Create().SetTenant("t").SetEmail("a1").SetName("old").SaveX(ctx)
		e.payloads(t)
		w.run(t, e, func(c *ent.Client) error {
			return c.Member.Create().SetTenant("t").SetEmail("a1").SetName("new").
				OnConflictColumns(member.FieldTenant, member.FieldEmail).
				Update(func(u *ent.MemberUpsert) { u.SetEmail("a2") }).Exec(ctx)
		})
		p := one(t, e.payloads(t), envelope.Updated)
		if pk, _ := p["pk"].(float64); int(pk) != m.ID {
			t.Errorf("pk %v, want %d", p["pk"], m.ID)
		}
		if b, a := image(t, p, "before")["email"], image(t, p, "after")["email"]; b != "a1" || a != "a2" {
			t.Errorf("email %v -> %v, want a1 -> a2", b, a)
		}
		if ch := changedOf(t, p); !slices.Equal(ch, []string{"email"}) {
			t.Errorf("changed = %v, want [email]", ch)
		}
	})
}

// TestConcurrentUpsertOfNewKey (issue 18, 2): tx1 inserts a key; an
// upsert of the same key waits for tx1, then updates the row tx1
// committed. Its event is "updated", with tx1's row as the before image.
func TestConcurrentUpsertOfNewKey(t *testing.T) {
	t.Parallel()
	e := newImgEnv(t, envelope.Postgres)
	tx1, err := e.client.Tx(ctx)
	must(t, err)
	defer func() { _ = tx1.Rollback() }()
	must(t, tx1.Member.Create().SetTenant("t").SetEmail("k").SetName("one").Exec(ctx))
	pid := backendPID(ctx, t, tx1)

	done := make(chan error, 1)
	go func() {
		done <- e.client.Member.Create().SetTenant("t").SetEmail("k").SetName("two").
			OnConflictColumns(member.FieldTenant, member.FieldEmail).UpdateNewValues().Exec(ctx)
	}()
	// Wait until the upsert waits on tx1.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		must(t, e.db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n))
		if n > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the upsert did not wait for tx1: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the upsert never waited for tx1")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
	}
	must(t, tx1.Commit())
	must(t, <-done)
	ps := e.payloads(t)
	if len(ps) != 2 || ps[0]["operation"] != string(envelope.Inserted) {
		t.Fatalf("events %v, want tx1's insert and the upsert's update", ps)
	}
	p := ps[1]
	if p["operation"] != string(envelope.Updated) {
		t.Fatalf("the upsert's event is %v, want updated", p["operation"])
	}
	if b := image(t, p, "before")["name"]; b != "one" {
		t.Errorf("before.name = %v, want tx1's \"one\"", b)
	}
	if a := image(t, p, "after")["name"]; a != "two" {
		t.Errorf("after.name = %v, want \"two\"", a)
	}
}

// backendPID is the PostgreSQL backend of tx's connection.
func backendPID(ctx context.Context, t *testing.T, tx interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) int {
	t.Helper()
	rows, err := tx.QueryContext(ctx, `SELECT pg_backend_pid()`)
	must(t, err)
	defer rows.Close()
	var pid int
	for rows.Next() {
		must(t, rows.Scan(&pid))
	}
	must(t, rows.Err())
	return pid
}

// storedText reads column col of row id of table as the text the
// database holds.
func (e *imgEnv) storedText(t testing.TB, table, col string, id any) any {
	t.Helper()
	q := fmt.Sprintf(`SELECT %s FROM %s WHERE id = %v`, textOf(e.dialect, col), table, id)
	var v sql.NullString
	must(t, e.db.QueryRow(q).Scan(&v))
	if !v.Valid {
		return nil
	}
	return v.String
}

// TestValueScannerImages (NEW-A of integration/entsuite): a field with a
// ValueScanner (field.BinaryValueScanner, a ValueScannerFunc) is in the
// events as its column holds it — the scanner's Value — not in its Go
// form (a url.URL as an object, the decoded text).
func TestValueScannerImages(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		u, err := url.Parse("https://a.example/x?q=1")
		must(t, err)
		var id int
		w.run(t, e, func(c *ent.Client) error {
			l, err := c.Link.Create().SetURL(u).SetCode("hello").Save(ctx)
			if err == nil {
				id = l.ID
			}
			return err
		})
		check := func(what string, img map[string]any) {
			t.Helper()
			for _, col := range []string{"url", "code", "note"} {
				if got, want := img[col], e.storedText(t, "links", col, id); got != want {
					t.Errorf("%s: %s = %#v, the column holds %#v", what, col, got, want)
				}
			}
		}
		check("create", image(t, one(t, e.payloads(t), envelope.Inserted), "after"))
		w.run(t, e, func(c *ent.Client) error { return c.Link.UpdateOneID(id).SetCode("bye").SetNote("n").Exec(ctx) })
		p := one(t, e.payloads(t), envelope.Updated)
		check("update", image(t, p, "after"))
		if b := image(t, p, "before"); b["code"] != base64.StdEncoding.EncodeToString([]byte("hello")) || b["url"] != u.String() {
			t.Errorf("update: before image %v", b)
		}
	})
}

// TestCreateImageAsStored (NEW-F of integration/entsuite, ent's
// encryptfield example): a schema hook seals a field before the INSERT
// and opens it in the entity the create returns; the create's event
// holds what the row holds (the sealed text), not the entity's
// plaintext.
func TestCreateImageAsStored(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		var got *ent.Secret
		w.run(t, e, func(c *ent.Client) (err error) {
			got, err = c.Secret.Create().SetName("s").Save(ctx)
			return err
		})
		if got.Name != "s" {
			t.Fatalf("the hook returned name %q, want the plaintext", got.Name)
		}
		if after := image(t, one(t, e.payloads(t), envelope.Inserted), "after"); after["name"] != schema.Seal("s") {
			t.Errorf("create: after.name = %v, the row holds %v", after["name"], schema.Seal("s"))
		}
		w.run(t, e, func(c *ent.Client) error {
			return c.Secret.CreateBulk(c.Secret.Create().SetName("b1"), c.Secret.Create().SetName("b2")).Exec(ctx)
		})
		ps := e.payloads(t)
		if len(ps) != 2 {
			t.Fatalf("bulk: %d events, want 2", len(ps))
		}
		for _, p := range ps {
			if n, want := image(t, p, "after")["name"], e.storedText(t, "secrets", "name", p["pk"]); n != want {
				t.Errorf("bulk: row %v: after.name = %v, the row holds %v", p["pk"], n, want)
			}
		}
	})
}

// TestScannedValueOfNil: an unset optional ValueScanner field of a
// pointer type (a nil *url.URL, whose MarshalBinary panics) is NULL, as
// its column holds it; the harness's ExValueScan panicked without this.
func TestScannedValueOfNil(t *testing.T) {
	if got := entcapturert.ScannedValue(field.BinaryValueScanner[*url.URL]{}, (*url.URL)(nil), true); got != nil {
		t.Errorf("ScannedValue(nil *url.URL) = %#v, want nil", got)
	}
	u, _ := url.Parse("https://a.example")
	if got := entcapturert.ScannedValue(field.BinaryValueScanner[*url.URL]{}, u, true); got != "https://a.example" {
		t.Errorf("ScannedValue(%v) = %#v", u, got)
	}
}

// TestImagesAsStored (NEW-G of integration/entsuite, its field_types
// schema): a column whose Go value has another stored form is in the
// events as the row holds it — a time.Duration in a bigint column as its
// nanoseconds (not seconds), a time under a Valuer (sql.NullTime) at the
// column's precision (PostgreSQL keeps microseconds), and a Valuer whose
// Scan does not give back what its Value stored (Paren) as the column's
// text, not the Value of what Scan made of it.
func TestImagesAsStored(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, e *imgEnv, w way) {
		gone := time.Date(2026, 5, 1, 10, 20, 5, 123456789, time.UTC)
		var vid, lid int
		w.run(t, e, func(c *ent.Client) error {
			v, err := c.Visit.Create().SetAt(gone).SetTook(1500 * time.Millisecond).
				SetGone(&sql.NullTime{Time: gone, Valid: true}).Save(ctx)
			if err == nil {
				vid = v.ID
			}
			return err
		})
		storedGone := func() time.Time {
			t.Helper()
			var g time.Time
			must(t, e.db.QueryRow(fmt.Sprintf(`SELECT gone FROM visits WHERE id = %d`, vid)).Scan(&g))
			return g
		}
		check := func(what string, img map[string]any) {
			t.Helper()
			if got := fmt.Sprintf("%.0f", img["took"]); got != "1500000000" {
				t.Errorf("%s: took = %v, the column holds 1500000000 (nanoseconds)", what, img["took"])
			}
			s, _ := img["gone"].(string)
			got, err := time.Parse(time.RFC3339Nano, s)
			if want := storedGone(); err != nil || !got.Equal(want) {
				t.Errorf("%s: gone = %v, the column holds %v", what, img["gone"], want.Format(time.RFC3339Nano))
			}
		}
		check("create", image(t, one(t, e.payloads(t), envelope.Inserted), "after"))
		w.run(t, e, func(c *ent.Client) error { return c.Visit.UpdateOneID(vid).SetKind("run").Exec(ctx) })
		p := one(t, e.payloads(t), envelope.Updated)
		check("update after", image(t, p, "after"))
		check("update before", image(t, p, "before"))

		w.run(t, e, func(c *ent.Client) error {
			l, err := c.Link.Create().SetURL(&url.URL{Scheme: "https", Host: "a.example"}).SetCode("c").SetParen("x").Save(ctx)
			if err == nil {
				lid = l.ID
			}
			return err
		})
		if got := image(t, one(t, e.payloads(t), envelope.Inserted), "after")["paren"]; got != "(x)" {
			t.Errorf("create: paren = %v, the column holds (x)", got)
		}
		w.run(t, e, func(c *ent.Client) error { return c.Link.UpdateOneID(lid).SetCode("d").Exec(ctx) })
		p = one(t, e.payloads(t), envelope.Updated)
		for _, which := range []string{"before", "after"} {
			if got, want := image(t, p, which)["paren"], e.storedText(t, "links", "paren", lid); got != want {
				t.Errorf("update %s: paren = %v, the column holds %v", which, got, want)
			}
		}
	})
}
