package entcapture_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/loan"
)

// TestReturningTransparent: the RETURNING the driver wrapper adds to
// ent's UPDATE and DELETE changes nothing ent reports. The same writes
// on a client on entcapture.Driver (without and within client.Tx) and on
// a plain client in client.Tx (no wrapper: ent's own Exec) return the
// same affected counts — rows matched, also when an UPDATE sets the
// values they already hold — the same entities, and the same not-found
// errors; and each captures one event per row written.
func TestReturningTransparent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type outcome struct {
		updated, unchanged, deleted int
		one                         string
		errs                        [3]bool // UpdateOneID(missing), UpdateOneID(1).Where(false), DeleteOneID(missing): not found
		events                      int
	}
	run := func(t *testing.T, c conn, begin func() (conn, func() error)) outcome {
		var o outcome
		for i := range 5 {
			c.Loan.Create().SetStatus([]string{"lent", "lost"}[i%2]).SetDays(i).SetReturned(false).SaveX(ctx)
		}
		step := func(f func(c conn) error) {
			t.Helper()
			cc, done := begin()
			err := f(cc)
			if cerr := done(); err == nil {
				err = cerr
			}
			must(t, err)
		}
		step(func(c conn) (err error) {
			o.updated, err = c.Loan.Update().Where(loan.Status("lent")).AddDays(10).Save(ctx)
			return err
		})
		step(func(c conn) (err error) {
			o.unchanged, err = c.Loan.Update().Where(loan.Status("lost")).SetStatus("lost").Save(ctx)
			return err
		})
		step(func(c conn) error {
			l, err := c.Loan.UpdateOneID(2).SetNote("n").Save(ctx)
			if err == nil {
				o.one = fmt.Sprintf("%d %s %d %v %s", l.ID, l.Status, l.Days, l.Returned, *l.Note)
			}
			return err
		})
		step(func(c conn) error {
			_, err := c.Loan.UpdateOneID(99).SetNote("x").Save(ctx)
			o.errs[0] = ent.IsNotFound(err)
			return nil
		})
		step(func(c conn) error {
			_, err := c.Loan.UpdateOneID(1).Where(loan.Status("none")).SetNote("x").Save(ctx)
			o.errs[1] = ent.IsNotFound(err)
			return nil
		})
		step(func(c conn) error {
			err := c.Loan.DeleteOneID(99).Exec(ctx)
			o.errs[2] = ent.IsNotFound(err)
			return nil
		})
		step(func(c conn) (err error) {
			o.deleted, err = c.Loan.Delete().Where(loan.DaysGTE(3)).Exec(ctx)
			return err
		})
		return o
	}
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		cfg := entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: envelope.BeforeAndAfter}}}
		noTx := func(e *env) func() (conn, func() error) {
			return func() (conn, func() error) { return clientConn(e.client), func() error { return nil } }
		}
		inTx := func(c *ent.Client) func() (conn, func() error) {
			return func() (conn, func() error) {
				tx, err := c.Tx(ctx)
				must(t, err)
				return txConn(tx), tx.Commit
			}
		}
		var outs []outcome
		for _, way := range []string{"driver", "driver, client.Tx", "plain, client.Tx"} {
			e := newEnv(t, d, cfg)
			var o outcome
			switch way {
			case "driver":
				o = run(t, clientConn(e.client), noTx(e))
			case "driver, client.Tx":
				o = run(t, clientConn(e.client), inTx(e.client))
			default:
				o = run(t, clientConn(e.client), inTx(e.plain))
			}
			o.events = len(e.events(t)) - 5
			t.Logf("%s: %+v", way, o)
			outs = append(outs, o)
		}
		want := outcome{updated: 3, unchanged: 2, deleted: 4, one: "2 lost 1 false n", errs: [3]bool{true, true, true}, events: 3 + 2 + 1 + 4}
		if d == envelope.MySQL {
			// MySQL's affected rows are the rows changed (without the
			// driver's clientFoundRows), so ent reports 0 for an UPDATE
			// setting the values the rows hold, plain or captured alike;
			// the capture, which read the matched rows FOR UPDATE, still
			// has their updated events.
			want.unchanged = 0
		}
		for i, o := range outs {
			if o != want {
				t.Errorf("way %d: %+v, want %+v", i, o, want)
			}
		}
	})
}
