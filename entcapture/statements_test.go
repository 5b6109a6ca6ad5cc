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
// for 10 rows as for 300 — one snapshot statement (two for an upsert:
// the conflicting rows before, the rows after), the write, and one
// multi-row event INSERT — in every payload mode.
func TestStatementCounts(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, mode := range []envelope.PayloadMode{envelope.Keys, envelope.After, envelope.BeforeAndAfter} {
			counts := map[string][2]int64{}
			for i, n := range []int{10, 300} {
				var cnt atomic.Int64
				db := openDB(t, d)
				drv := entcapture.Driver(counting{entsql.OpenDB(entDialect(d), db), &cnt},
					entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: mode}, "Tag": {Payload: mode}}})
				client := ent.NewClient(ent.Driver(drv))
				ctx := context.Background()
				createSchema(t, func(ctx context.Context) error { return client.Schema.Create(ctx) })
				measure := func(name string, f func()) {
					cnt.Store(0)
					f()
					c := counts[name]
					c[i] = cnt.Load()
					counts[name] = c
				}
				measure("CreateBulk", func() {
					bs := make([]*ent.LoanCreate, n)
					for j := range bs {
						bs[j] = client.Loan.Create().SetStatus("lent").SetDays(j).SetReturned(false)
					}
					client.Loan.CreateBulk(bs...).SaveX(ctx)
				})
				measure("Update.Where", func() { client.Loan.Update().Where(loan.DaysGTE(0)).AddDays(1).SaveX(ctx) })
				measure("upsert CreateBulk", func() {
					bs := make([]*ent.TagCreate, n)
					for j := range bs {
						bs[j] = client.Tag.Create().SetID(string(rune('a'+j%26)) + string(rune('a'+j/26))).SetLabel("x")
					}
					client.Tag.CreateBulk(bs[:n/2]...).ExecX(ctx)
					client.Tag.CreateBulk(bs...).OnConflictColumns("code").UpdateNewValues().ExecX(ctx)
				})
				measure("Delete.Where", func() { client.Loan.Delete().Where(loan.DaysGTE(0)).ExecX(ctx) })
				if got := len((&env{db: db}).events(t)); got != 4*n+n/2 {
					t.Fatalf("%s n=%d: %d events, want %d", mode, n, got, 4*n+n/2)
				}
			}
			for name, c := range counts {
				t.Logf("%s %s: %d statements for 10 rows, %d for 300", mode, name, c[0], c[1])
				if c[0] != c[1] {
					t.Errorf("%s %s: %d statements for 10 rows, %d for 300", mode, name, c[0], c[1])
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
