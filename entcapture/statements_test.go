package entcapture_test

import (
	"context"
	stdsql "database/sql"
	"sync/atomic"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/loan"
)

type stdEQ interface {
	ExecContext(ctx context.Context, query string, args ...any) (stdsql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*stdsql.Rows, error)
}

// counting counts the statements sent through an ent driver and its
// transactions (BEGIN, COMMIT and ROLLBACK aside).
type counting struct {
	dialect.Driver
	n *atomic.Int64
}

func (c counting) Exec(ctx context.Context, q string, args, v any) error {
	c.n.Add(1)
	return c.Driver.Exec(ctx, q, args, v)
}

func (c counting) Query(ctx context.Context, q string, args, v any) error {
	c.n.Add(1)
	return c.Driver.Query(ctx, q, args, v)
}

func (c counting) ExecContext(ctx context.Context, q string, args ...any) (stdsql.Result, error) {
	c.n.Add(1)
	return c.Driver.(stdEQ).ExecContext(ctx, q, args...)
}

func (c counting) QueryContext(ctx context.Context, q string, args ...any) (*stdsql.Rows, error) {
	c.n.Add(1)
	return c.Driver.(stdEQ).QueryContext(ctx, q, args...)
}

func (c counting) Tx(ctx context.Context) (dialect.Tx, error) {
	tx, err := c.Driver.Tx(ctx)
	if err != nil {
		return nil, err
	}
	return countingTx{tx, c.n}, nil
}

type countingTx struct {
	dialect.Tx
	n *atomic.Int64
}

func (c countingTx) Exec(ctx context.Context, q string, args, v any) error {
	c.n.Add(1)
	return c.Tx.Exec(ctx, q, args, v)
}

func (c countingTx) Query(ctx context.Context, q string, args, v any) error {
	c.n.Add(1)
	return c.Tx.Query(ctx, q, args, v)
}

func (c countingTx) ExecContext(ctx context.Context, q string, args ...any) (stdsql.Result, error) {
	c.n.Add(1)
	return c.Tx.(stdEQ).ExecContext(ctx, q, args...)
}

func (c countingTx) QueryContext(ctx context.Context, q string, args ...any) (*stdsql.Rows, error) {
	c.n.Add(1)
	return c.Tx.(stdEQ).QueryContext(ctx, q, args...)
}

// TestStatementCounts: a bulk write costs the same number of statements
// for 10 rows as for 300, and exactly the number the design allows, in
// every payload mode. On a client opened on entcapture.Driver, without a
// caller transaction and in one, the wrapper adds RETURNING to ent's
// UPDATE and DELETE: an update is the UPDATE (after images returned) and
// the event INSERT, plus a locked SELECT of the before images in
// BeforeAndAfter (and SQLite's write-lock statement before it); a delete
// is the DELETE (before images returned) and the event INSERT. On a plain
// driver in a caller transaction (no wrapper) the capture reads the rows
// first and the after images by id. An upsert is the conflicting rows
// read before, the INSERT, the rows read after, and the event INSERT.
// In a caller transaction each write adds a SAVEPOINT and its RELEASE.
func TestStatementCounts(t *testing.T) {
	t.Parallel()
	type setup struct {
		name     string
		wrapper  bool // the client is on entcapture.Driver
		callerTx bool
	}
	setups := []setup{{"driver", true, false}, {"driver, client.Tx", true, true}, {"plain, client.Tx", false, true}}
	// want returns the statements of a write (SAVEPOINT/RELEASE aside).
	want := func(d envelope.Dialect, mode envelope.PayloadMode, wrapper bool, name string) int64 {
		if d == envelope.MySQL {
			// No RETURNING: every write is read around, with or without
			// Driver (doc.go, "MySQL and MariaDB"). The events cost three
			// statements: the per-key order's lock rows (SELECT … LOCK IN
			// SHARE MODE on herald_outbox_keylock), the multi-row INSERT,
			// and the read-back of the sequences it gave.
			const events int64 = 3
			switch name {
			case "CreateBulk":
				return 1 + events
			case "upsert CreateBulk": // the plain CreateBulk, then SELECT … FOR UPDATE, INSERT, SELECT
				return 1 + events + 3 + events
			case "UpdateOne": // UPDATE, ent's SELECT of the entity
				n := 2 + events
				if mode != envelope.Keys {
					n++ // the after image read by id
				}
				if mode == envelope.BeforeAndAfter {
					n++ // the before image, FOR UPDATE
				}
				return n
			case "Update.Where": // SELECT ids (or before images) FOR UPDATE, the pinned UPDATE
				n := 2 + events
				if mode != envelope.Keys {
					n++ // the after images read by id
				}
				return n
			case "Delete.Where": // SELECT … FOR UPDATE, the pinned DELETE
				return 2 + events
			}
		}
		lock := int64(0) // SQLite takes the write lock before a read it is about to write
		if d == envelope.SQLite {
			lock = 1
		}
		switch name {
		case "CreateBulk":
			return 2
		case "upsert CreateBulk": // a plain CreateBulk of half the rows, then the upsert
			if d == envelope.Postgres && wrapper {
				// The INSERT classifies its rows and returns their images
				// (upsert.go): no snapshot before or after it.
				return 2 + 2
			}
			if wrapper {
				// SQLite: the largest rowid, read under the lock, then the
				// INSERT classifies its rows and returns their images; the
				// conflicting rows' before images are read before it.
				n := 2 + lock + 3
				if mode == envelope.BeforeAndAfter {
					n++
				}
				return n
			}
			return 2 + lock + 4 // SELECT conflicting rows, INSERT, SELECT rows, event INSERT
		case "UpdateOne":
			// UPDATE, ent's own SELECT of the entity, event INSERT.
			n := int64(3)
			if mode == envelope.BeforeAndAfter {
				n += lock + 1 // the before image
			}
			if !wrapper && mode != envelope.Keys {
				n++ // the after image read by id
			}
			return n
		case "Update.Where":
			if !wrapper {
				n := lock + 3 // SELECT ids/before, UPDATE, event INSERT
				if mode != envelope.Keys {
					n++ // the after images read by id
				}
				return n
			}
			if mode == envelope.BeforeAndAfter {
				return lock + 3
			}
			return 2
		case "Delete.Where":
			if !wrapper {
				return lock + 3
			}
			return 2
		}
		t.Fatalf("no count for %s", name)
		return 0
	}
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, su := range setups {
			modes := []envelope.PayloadMode{envelope.Keys, envelope.After, envelope.BeforeAndAfter}
			if !su.wrapper {
				modes = modes[1:2] // Config.Options needs the wrapper: the schemas' Mixin (After) applies
			}
			for _, mode := range modes {
				counts := map[string][2]int64{}
				for i, n := range []int{10, 300} {
					var cnt atomic.Int64
					db := openDB(t, d)
					var drv dialect.Driver = counting{entsql.OpenDB(entDialect(d), db), &cnt}
					if su.wrapper {
						drv = entcapture.Driver(drv,
							entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: mode}, "Tag": {Payload: mode}}})
					}
					client := ent.NewClient(ent.Driver(drv))
					ctx := context.Background()
					createSchema(t, func(ctx context.Context) error { return client.Schema.Create(ctx) })
					c := clientConn(client)
					measure := func(name string, f func(c conn)) {
						c := c
						var tx *ent.Tx
						if su.callerTx {
							var err error
							tx, err = client.Tx(ctx)
							must(t, err)
							c = txConn(tx)
						}
						cnt.Store(0)
						f(c)
						got := cnt.Load()
						if tx != nil {
							must(t, tx.Commit())
						}
						cs := counts[name]
						cs[i] = got
						counts[name] = cs
					}
					measure("CreateBulk", func(c conn) {
						bs := make([]*ent.LoanCreate, n)
						for j := range bs {
							bs[j] = c.Loan.Create().SetStatus("lent").SetDays(j).SetReturned(false)
						}
						c.Loan.CreateBulk(bs...).SaveX(ctx)
					})
					measure("Update.Where", func(c conn) { c.Loan.Update().Where(loan.DaysGTE(0)).AddDays(1).SaveX(ctx) })
					measure("UpdateOne", func(c conn) { c.Loan.UpdateOneID(1).SetStatus("returned").SaveX(ctx) })
					measure("upsert CreateBulk", func(c conn) {
						bs := make([]*ent.TagCreate, n)
						for j := range bs {
							bs[j] = c.Tag.Create().SetID(string(rune('a'+j%26)) + string(rune('a'+j/26))).SetLabel("x")
						}
						c.Tag.CreateBulk(bs[:n/2]...).ExecX(ctx)
						c.Tag.CreateBulk(bs...).OnConflictColumns("code").UpdateNewValues().ExecX(ctx)
					})
					measure("Delete.Where", func(c conn) { c.Loan.Delete().Where(loan.DaysGTE(0)).ExecX(ctx) })
					if got := len((&env{db: db}).events(t)); got != 4*n+n/2+1 {
						t.Fatalf("%s %s n=%d: %d events, want %d", su.name, mode, n, got, 4*n+n/2+1)
					}
				}
				for name, c := range counts {
					w := want(d, mode, su.wrapper, name)
					if su.callerTx {
						w += 2 // SAVEPOINT, RELEASE
						if name == "upsert CreateBulk" {
							w += 2 // of the plain CreateBulk before the upsert
						}
					}
					t.Logf("%s, %s, %s: %d statements for 10 rows, %d for 300 (want %d)", su.name, mode, name, c[0], c[1], w)
					if c[0] != w || c[1] != w {
						t.Errorf("%s, %s, %s: %d statements for 10 rows, %d for 300, want %d", su.name, mode, name, c[0], c[1], w)
					}
				}
			}
		}
	})
}

// TestCreateStatementCounts: on PostgreSQL a single-row Create through
// entcapture.Driver is one statement with its event, with or without a
// caller's transaction (BEGIN and COMMIT aside): no savepoint, no event
// INSERT of its own, no transaction of the hook's.
func TestCreateStatementCounts(t *testing.T) {
	t.Parallel()
	for _, mode := range []envelope.PayloadMode{envelope.Keys, envelope.After, envelope.BeforeAndAfter} {
		var cnt atomic.Int64
		db := openDB(t, envelope.Postgres)
		drv := entcapture.Driver(counting{entsql.OpenDB(dialect.Postgres, db), &cnt},
			entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: mode}}})
		client := ent.NewClient(ent.Driver(drv))
		ctx := context.Background()
		createSchema(t, func(ctx context.Context) error { return client.Schema.Create(ctx) })
		cnt.Store(0)
		client.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx)
		if n := cnt.Load(); n != 1 {
			t.Errorf("%s Create: %d statements, want 1", mode, n)
		}
		tx, err := client.Tx(ctx)
		must(t, err)
		cnt.Store(0)
		tx.Loan.Create().SetStatus("lent").SetDays(2).SetReturned(false).SaveX(ctx)
		if n := cnt.Load(); n != 1 {
			t.Errorf("%s Create in client.Tx: %d statements, want 1", mode, n)
		}
		must(t, tx.Commit())
		if got := len((&env{db: db}).events(t)); got != 2 {
			t.Fatalf("%s: %d events, want 2", mode, got)
		}
	}
}
