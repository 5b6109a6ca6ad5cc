package entcapture_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	entgo "entgo.io/ent"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/loan"
)

var (
	_ entcapture.Conn = (*ent.Client)(nil)
	_ entcapture.Conn = (*ent.Tx)(nil)
)

func eachDialect(t *testing.T, f func(t *testing.T, d envelope.Dialect)) {
	t.Helper()
	for _, c := range dialects {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f(t, c.dialect)
		})
	}
}

// recorder is a Wakeup that records its signals.
type recorder struct {
	mu      sync.Mutex
	signals [][]string
}

func (r *recorder) Signal(_ context.Context, topics []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signals = append(r.signals, append([]string(nil), topics...))
	return nil
}
func (r *recorder) Listen(ctx context.Context, _ func([]string)) error { <-ctx.Done(); return nil }
func (r *recorder) Close() error                                       { return nil }
func (r *recorder) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.signals)
}

// TestNoWrapperOutsideTransaction: a captured write outside a
// transaction on a client opened without entcapture.Driver fails with
// ErrConfiguration saying how to install it, and writes nothing; inside
// client.Tx the same client captures.
func TestNoWrapperOutsideTransaction(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, entcapture.Config{})
		ctx := context.Background()
		_, err := e.plain.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).Save(ctx)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "entcapture.Driver") || !strings.Contains(err.Error(), "Loan") {
			t.Fatalf("err = %v, want ErrConfiguration naming Loan and entcapture.Driver", err)
		}
		if n := e.count(t, "loans"); n != 0 {
			t.Fatalf("%d loans written", n)
		}
		tx, err := e.plain.Tx(ctx)
		must(t, err)
		_, err = tx.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).Save(ctx)
		must(t, err)
		must(t, tx.Commit())
		if n := len(e.events(t)); n != 1 {
			t.Fatalf("%d events, want 1", n)
		}
	})
}

type failKey struct{}

// failing captures Loan with an Extend that fails when the context says.
func failing(mode envelope.PayloadMode) entcapture.Config {
	return entcapture.Config{Options: map[string]envelope.Options{
		"Loan": {Payload: mode, Extend: func(ctx context.Context, c envelope.Change) (*envelope.Extension, error) {
			if ctx.Value(failKey{}) != nil {
				return nil, errors.New("extend refused")
			}
			return nil, nil
		}},
	}}
}

// TestFailedEventUndoesWrite: an event that fails after its row was
// written undoes the write — without a caller transaction (the hook's
// own is rolled back) and inside one (rolled back to a savepoint: the
// transaction stays usable and commits its other writes).
func TestFailedEventUndoesWrite(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, failing(envelope.BeforeAndAfter))
		ctx := context.Background()
		bad := context.WithValue(ctx, failKey{}, true)
		l := e.client.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx)

		if _, err := e.client.Loan.Create().SetStatus("x").SetDays(2).SetReturned(false).Save(bad); err == nil {
			t.Fatal("create: no error")
		}
		if _, err := e.client.Loan.UpdateOneID(l.ID).SetStatus("x").Save(bad); err == nil {
			t.Fatal("update one: no error")
		}
		if _, err := e.client.Loan.Update().SetStatus("x").Save(bad); err == nil {
			t.Fatal("update: no error")
		}
		if err := e.client.Loan.DeleteOneID(l.ID).Exec(bad); err == nil {
			t.Fatal("delete: no error")
		}
		if got := e.client.Loan.Query().AllX(ctx); len(got) != 1 || got[0].Status != "lent" {
			t.Fatalf("loans after failed writes: %v", got)
		}

		tx, err := e.client.Tx(ctx)
		must(t, err)
		if _, err := tx.Loan.UpdateOneID(l.ID).SetStatus("x").Save(bad); err == nil {
			t.Fatal("update in tx: no error")
		}
		if _, err := tx.Loan.Create().SetStatus("y").SetDays(3).SetReturned(false).Save(bad); err == nil {
			t.Fatal("create in tx: no error")
		}
		// The transaction is still usable.
		tx.Loan.UpdateOneID(l.ID).SetStatus("returned").SaveX(ctx)
		must(t, tx.Commit())
		if got := e.client.Loan.Query().AllX(ctx); len(got) != 1 || got[0].Status != "returned" {
			t.Fatalf("loans after the transaction: %v", got)
		}
		if n := len(e.events(t)); n != 2 { // the first create, the last update
			t.Fatalf("%d events, want 2", n)
		}
	})
}

// TestWakeupAfterCommitOnly: the wakeup is signalled after the outermost
// commit, never inside the transaction and never after a rollback.
func TestWakeupAfterCommitOnly(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		r := &recorder{}
		e := newEnv(t, d, entcapture.Config{Wakeup: r})
		ctx := context.Background()
		e.client.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx)
		if r.n() != 1 {
			t.Fatalf("%d signals after an autocommit write, want 1", r.n())
		}
		tx, err := e.client.Tx(ctx)
		must(t, err)
		tx.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx)
		tx.Loan.Update().SetDays(5).SaveX(ctx)
		if r.n() != 1 {
			t.Fatalf("signalled inside the transaction")
		}
		must(t, tx.Rollback())
		if r.n() != 1 {
			t.Fatalf("signalled after a rollback")
		}
		tx, err = e.client.Tx(ctx)
		must(t, err)
		tx.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx)
		if _, err := entcapture.Enqueue(ctx, tx, envelope.Message{Topic: "t", Payload: 1}); err != nil {
			t.Fatal(err)
		}
		must(t, tx.Commit())
		if r.n() < 2 {
			t.Fatalf("not signalled after the commit")
		}
	})
}

// TestEnqueue: events enqueued in a transaction commit or roll back with
// it; idempotency keys return the stored event; outside a transaction
// they commit at once.
func TestEnqueue(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, entcapture.Config{})
		ctx := context.Background()
		ev, err := entcapture.Enqueue(ctx, e.client, envelope.Message{Topic: "a", Payload: map[string]any{"x": 1}, IdempotencyKey: "k1", OrderingKey: "o"})
		must(t, err)
		again, err := entcapture.Enqueue(ctx, e.client, envelope.Message{Topic: "a", Payload: 2, IdempotencyKey: "k1"})
		must(t, err)
		if again.ID != ev.ID {
			t.Fatalf("idempotency key: got a new event %v, want %v", again.ID, ev.ID)
		}
		tx, err := e.client.Tx(ctx)
		must(t, err)
		_, err = entcapture.EnqueueMany(ctx, tx, []envelope.Message{{Topic: "b", Payload: 1}, {Topic: "c", Payload: 2}})
		must(t, err)
		if _, err := entcapture.Enqueue(ctx, tx, envelope.Message{Topic: "", Payload: 1}); !errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("empty topic: %v", err)
		}
		tx.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).SaveX(ctx) // the transaction is usable
		must(t, tx.Rollback())
		if n := len(e.events(t)); n != 1 {
			t.Fatalf("%d events after the rollback, want 1", n)
		}
		tx, err = e.client.Tx(ctx)
		must(t, err)
		_, err = entcapture.EnqueueMany(ctx, tx, []envelope.Message{{Topic: "b", Payload: 1}, {Topic: "c", Payload: 2}})
		must(t, err)
		must(t, tx.Commit())
		if n := len(e.events(t)); n != 3 {
			t.Fatalf("%d events after the commit, want 3", n)
		}
	})
}

// TestBadDeclaration: a declaration naming an unknown column fails the
// write with ErrConfiguration naming the schema and the option, and
// writes nothing.
func TestBadDeclaration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite, entcapture.Config{Options: map[string]envelope.Options{"Loan": {Fields: []string{"nope"}}}})
	_, err := e.client.Loan.Create().SetStatus("lent").SetDays(1).SetReturned(false).Save(context.Background())
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "Loan Options.Fields") {
		t.Fatalf("err = %v", err)
	}
	if n := e.count(t, "loans"); n != 0 {
		t.Fatalf("%d loans written", n)
	}
}

// fakeMutation is a mutation of a schema generated without Extension.
type fakeMutation struct{ entgo.Mutation }

func (fakeMutation) Type() string     { return "Loan" }
func (fakeMutation) Op() entgo.Op     { return entgo.OpCreate }
func (fakeMutation) Fields() []string { return nil }

// TestMissingGlue: a captured schema whose code was generated without
// entcapturegen.Extension fails with ErrConfiguration saying what to add.
func TestMissingGlue(t *testing.T) {
	t.Parallel()
	called := false
	next := entgo.MutateFunc(func(context.Context, entgo.Mutation) (entgo.Value, error) { called = true; return nil, nil })
	_, err := entcapture.Mixin(envelope.Options{}).Hooks()[0](next).Mutate(context.Background(), fakeMutation{})
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "entcapturegen.Extension()") || called {
		t.Fatalf("err = %v, write ran: %v", err, called)
	}
}

// TestCommitOrder: 20 goroutines update the same 5 rows 100 times each;
// per row, the events' sequence order is the order of the versions they
// carry (each update adds 1 to days).
func TestCommitOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres, entcapture.Config{})
	ctx := context.Background()
	var ids []int64
	for range 5 {
		ids = append(ids, e.client.Loan.Create().SetStatus("lent").SetDays(0).SetReturned(false).SaveX(ctx).ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 100 {
				if _, err := e.client.Loan.UpdateOneID(ids[rng.IntN(len(ids))]).AddDays(1).Save(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	last := map[float64]float64{}
	n := 0
	for _, ev := range e.events(t) {
		var env struct {
			Operation string
			PK        float64
			After     struct{ Days float64 }
		}
		must(t, json.Unmarshal(ev.Payload, &env))
		if env.Operation != "updated" {
			continue
		}
		n++
		if env.After.Days != last[env.PK]+1 {
			t.Fatalf("row %v: event with days %v after days %v", env.PK, env.After.Days, last[env.PK])
		}
		last[env.PK] = env.After.Days
	}
	if n != 2000 {
		t.Fatalf("%d update events, want 2000", n)
	}
}

// TestAtomicity: random creates, updates and deletes, in and out of
// transactions, with random rollbacks and failing events: folding the
// committed events reproduces the committed table exactly.
func TestAtomicity(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, failing(envelope.After))
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(7, uint64(len(d))))
		write := func(c *ent.LoanClient, ctx context.Context) {
			switch rng.IntN(4) {
			case 0:
				_, _ = c.Create().SetStatus("lent").SetDays(rng.IntN(30)).SetReturned(false).Save(ctx)
			case 1:
				_, _ = c.Update().Where(loan.DaysGT(rng.IntN(30))).AddDays(1).Save(ctx)
			case 2:
				if ids, err := c.Query().IDs(context.Background()); err == nil && len(ids) > 0 {
					_, _ = c.UpdateOneID(ids[rng.IntN(len(ids))]).SetStatus(fmt.Sprint("s", rng.IntN(9))).Save(ctx)
				}
			default:
				_, _ = c.Delete().Where(loan.DaysLT(rng.IntN(10))).Exec(ctx)
			}
		}
		for range 150 {
			wctx := ctx
			if rng.IntN(5) == 0 {
				wctx = context.WithValue(ctx, failKey{}, true)
			}
			if rng.IntN(2) == 0 {
				write(e.client.Loan, wctx)
				continue
			}
			tx, err := e.client.Tx(ctx)
			must(t, err)
			for range 1 + rng.IntN(3) {
				write(tx.Loan, wctx)
			}
			if rng.IntN(3) == 0 {
				must(t, tx.Rollback())
			} else {
				must(t, tx.Commit())
			}
		}
		want := map[string]string{}
		for _, l := range e.client.Loan.Query().AllX(ctx) {
			want[fmt.Sprint(l.ID)] = fmt.Sprintf("%s/%d", l.Status, l.Days)
		}
		got := map[string]string{}
		for _, ev := range e.events(t) {
			var env struct {
				Operation string
				PK        json.Number
				After     struct {
					Status string
					Days   int
				}
			}
			dec := json.NewDecoder(strings.NewReader(string(ev.Payload)))
			dec.UseNumber()
			must(t, dec.Decode(&env))
			if env.Operation == "deleted" {
				delete(got, env.PK.String())
				continue
			}
			got[env.PK.String()] = fmt.Sprintf("%s/%d", env.After.Status, env.After.Days)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("events fold to\n%v\nthe table holds\n%v", got, want)
		}
	})
}

var _ = dialect.Postgres

// TestUnclassifiableUpsert: an upsert whose conflict clause names no
// columns, in a transaction of a client not opened on Driver, cannot be
// classified (inserted or updated?): the capture does not see its
// statement. It fails with ErrUnsupported naming the schema and what to
// do, and writes nothing. (Through Driver it is classified by its own
// statement: TestUpsertClassifiedByTheDatabase.) On MySQL a create whose
// every id is set is classified by its id, and one without ids is refused.
func TestUnclassifiableUpsert(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, entcapture.Config{})
		ctx := context.Background()
		tx, err := e.plain.Tx(ctx)
		must(t, err)
		err = tx.Tag.Create().SetID("a").SetLabel("A").OnConflict(entsql.DoNothing()).Exec(ctx)
		if d == envelope.MySQL {
			// On MySQL the capture never sees the statement (no RETURNING,
			// Driver or not): it reads the rows by a target it infers. A
			// create whose every id is set conflicts on the id (doc.go,
			// "MySQL and MariaDB"), so this one is classified: the tag
			// is inserted with its event.
			if err != nil {
				_ = tx.Rollback()
				t.Fatalf("MySQL, every id set: err = %v", err)
			}
			must(t, tx.Commit())
			if got := topicsOf(t, e.db, envelope.DefaultTable); fmt.Sprint(got) != "[tag.inserted]" {
				t.Fatalf("MySQL, every id set: events %v, want [tag.inserted]", got)
			}
			// Without ids there is no target to read by: refused, and
			// nothing written.
			tx, err = e.plain.Tx(ctx)
			must(t, err)
			err = tx.Reader.Create().SetName("r").SetEmail("r@x").OnConflict(entsql.DoNothing()).Exec(ctx)
			_ = tx.Rollback()
			if !errors.Is(err, envelope.ErrUnsupported) || !strings.Contains(err.Error(), "Reader") || !strings.Contains(err.Error(), "OnConflictColumns") {
				t.Fatalf("MySQL, no ids: err = %v", err)
			}
			if n := e.count(t, "readers"); n != 0 {
				t.Fatalf("MySQL: %d readers written", n)
			}
			return
		}
		if !errors.Is(err, envelope.ErrUnsupported) || !strings.Contains(err.Error(), "Tag") || !strings.Contains(err.Error(), "OnConflictColumns") || !strings.Contains(err.Error(), "entcapture.Driver") {
			t.Fatalf("err = %v", err)
		}
		must(t, tx.Commit())
		if n := e.count(t, "tags"); n != 0 {
			t.Fatalf("%d tags written", n)
		}
		if n := len(e.events(t)); n != 0 {
			t.Fatalf("%d events written", n)
		}
	})
}
