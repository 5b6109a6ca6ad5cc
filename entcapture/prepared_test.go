package entcapture_test

import (
	"context"
	"strings"
	"testing"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/loan"
)

// refuseEvents makes the outbox refuse the event of a loan whose status
// is "boom" (the event INSERT itself fails, after the row was written),
// and the loans table a loan whose status is "bad".
func refuseEvents(t *testing.T, e *env) {
	t.Helper()
	_, err := e.db.Exec(`CREATE TRIGGER herald_refuse BEFORE INSERT ON herald_outbox
		WHEN NEW.payload LIKE '%"status":"boom"%' BEGIN SELECT RAISE(ABORT, 'event refused'); END`)
	must(t, err)
	// And the row of a loan whose status is "bad": the row INSERT fails.
	_, err = e.db.Exec(`CREATE TRIGGER loans_refuse BEFORE INSERT ON loans
		WHEN NEW.status = 'bad' BEGIN SELECT RAISE(ABORT, 'row refused'); END`)
	must(t, err)
}

func statuses(t *testing.T, e *env) string {
	t.Helper()
	var out []string
	for _, l := range e.client.Loan.Query().Order(loan.ByID()).AllX(context.Background()) {
		out = append(out, l.Status)
	}
	return strings.Join(out, ",")
}

// TestSQLitePreparedEvents: on SQLite the event INSERT runs as a
// statement prepared once (one per message shape) and reused by every
// write, in the hook's own transaction and in a caller's, and so does
// the row INSERT ent sends in the hook's own transaction; an event INSERT
// that fails still undoes its row — the hook's transaction is rolled
// back, the caller's is rolled back to the savepoint and stays usable —
// and a row INSERT that fails writes nothing.
func TestSQLitePreparedEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite, entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: envelope.After}}})
	refuseEvents(t, e)
	ctx := context.Background()

	e.client.Loan.Create().SetStatus("a").SetDays(1).SetReturned(false).SaveX(ctx)
	if _, err := e.client.Loan.Create().SetStatus("boom").SetDays(2).SetReturned(false).Save(ctx); err == nil || !strings.Contains(err.Error(), "event refused") {
		t.Fatalf("create without a transaction: err = %v, want the refused event", err)
	}
	if _, err := e.client.Loan.Create().SetStatus("bad").SetDays(2).SetReturned(false).Save(ctx); err == nil || !strings.Contains(err.Error(), "row refused") {
		t.Fatalf("create without a transaction: err = %v, want the refused row", err)
	}
	e.client.Loan.Create().SetStatus("b").SetDays(3).SetReturned(false).SaveX(ctx)

	tx, err := e.client.Tx(ctx)
	must(t, err)
	tx.Loan.Create().SetStatus("c").SetDays(4).SetReturned(false).SaveX(ctx)
	if _, err := tx.Loan.Create().SetStatus("boom").SetDays(5).SetReturned(false).Save(ctx); err == nil || !strings.Contains(err.Error(), "event refused") {
		t.Fatalf("create in a transaction: err = %v, want the refused event", err)
	}
	if _, err := tx.Loan.Create().SetStatus("bad").SetDays(5).SetReturned(false).Save(ctx); err == nil || !strings.Contains(err.Error(), "row refused") {
		t.Fatalf("create in a transaction: err = %v, want the refused row", err)
	}
	tx.Loan.Create().SetStatus("d").SetDays(6).SetReturned(false).SaveX(ctx) // still usable
	must(t, tx.Commit())

	if got := statuses(t, e); got != "a,b,c,d" {
		t.Fatalf("loans %s, want a,b,c,d", got)
	}
	evs := e.events(t)
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4", len(evs))
	}
	for i, s := range []string{"a", "b", "c", "d"} {
		if !strings.Contains(string(evs[i].Payload), `"status":"`+s+`"`) {
			t.Fatalf("event %d: %s, want status %s", i, evs[i].Payload, s)
		}
	}
	if n := entcapture.Prepared(e.drv); n != 2 {
		t.Fatalf("%d statements prepared, want 2 (the loan INSERT, the single-event INSERT)", n)
	}
}

// TestSQLitePreparedInCallerTx: in a caller's client.Tx (whose
// transaction entcapture.Driver wraps) the event INSERT is prepared too —
// the wrappers the driver hands out are seen through.
func TestSQLitePreparedInCallerTx(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite, entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: envelope.After}}})
	ctx := context.Background()
	for i := range 3 {
		tx, err := e.client.Tx(ctx)
		must(t, err)
		tx.Loan.Create().SetStatus("c").SetDays(i).SetReturned(false).SaveX(ctx)
		tx.Loan.Update().SetDays(10 + i).ExecX(ctx)
		must(t, tx.Commit())
	}
	if n := len(e.events(t)); n != 3+(1+2+3) { // the creates, then each update of every loan so far
		t.Fatalf("%d events, want 9", n)
	}
	if n := entcapture.Prepared(e.drv); n == 0 {
		t.Fatal("no statement prepared: the capture in a caller's transaction ran its event INSERT unprepared")
	}
}

// TestSQLitePreparedOneConnection: with MaxOpenConns set, preparing on
// the pool could wait for the connection the write's transaction holds,
// so the capture's statements run unprepared — and do not block.
func TestSQLitePreparedOneConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite, entcapture.Config{Options: map[string]envelope.Options{"Loan": {Payload: envelope.After}}})
	e.db.SetMaxOpenConns(1)
	refuseEvents(t, e)
	ctx := context.Background()
	e.client.Loan.Create().SetStatus("a").SetDays(1).SetReturned(false).SaveX(ctx)
	if _, err := e.client.Loan.Create().SetStatus("boom").SetDays(2).SetReturned(false).Save(ctx); err == nil {
		t.Fatal("create without a transaction: no error")
	}
	tx, err := e.client.Tx(ctx)
	must(t, err)
	tx.Loan.Create().SetStatus("b").SetDays(3).SetReturned(false).SaveX(ctx)
	if _, err := tx.Loan.Create().SetStatus("boom").SetDays(4).SetReturned(false).Save(ctx); err == nil {
		t.Fatal("create in a transaction: no error")
	}
	must(t, tx.Commit())
	if got := statuses(t, e); got != "a,b" {
		t.Fatalf("loans %s, want a,b", got)
	}
	if n := len(e.events(t)); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
	if n := entcapture.Prepared(e.drv); n != 0 {
		t.Fatalf("%d statements prepared with MaxOpenConns 1, want 0", n)
	}
}
