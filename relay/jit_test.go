package relay

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// explainJIT runs the relay's lease under EXPLAIN ANALYZE on q (the pool,
// or the lease's own transaction) and reports whether PostgreSQL
// JIT-compiled it.
func explainJIT(t *testing.T, r *Relay, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) bool {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+r.sql.lease,
		r.args([]any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize, int64(0)})...) // 0: no lease floor
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan string
	for rows.Next() {
		if err := rows.Scan(&plan); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(plan, `"JIT"`)
}

// jitEnv is a PostgreSQL env whose server can JIT-compile; the test is
// skipped where it has no JIT provider (nothing to guard against).
func jitEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, envelope.Postgres)
	var available bool
	if err := e.db.QueryRow(`SELECT pg_jit_available()`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if !available {
		t.Skip("this PostgreSQL has no JIT provider (pg_jit_available() is false): nothing to guard against")
	}
	return e
}

// withParams is e on a pool of its own whose DSN adds params (session
// settings such as "&jit=off").
func (e *env) withParams(t *testing.T, params string) *env {
	t.Helper()
	db, err := sql.Open("pgx", e.dsn+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c := *e
	c.db = db
	return &c
}

// TestLeaseImmuneToJIT: on connections where PostgreSQL would JIT-compile
// the lease (jit_above_cost = 0 stands for a large table's estimate), the
// relay leases with jit off in the lease's own transaction, and the lease
// still takes and commits its events; on connections with jit off it
// leases as a single statement.
func TestLeaseImmuneToJIT(t *testing.T) {
	t.Parallel()
	e := jitEnv(t)
	fillKeyed(t, e, 500, 0)
	open := func(params string) *env { return e.withParams(t, params) }

	jit := open("&jit=on&jit_above_cost=0")
	r := jit.newRelay(t, &recorder{}, Config{Name: "jit"})
	if !r.noJIT.Load() {
		t.Fatal("the relay did not see that its connections JIT-compile (jit on, jit_above_cost 0)")
	}
	plain, err := r.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	compiled := explainJIT(t, r, plain)
	_ = plain.Rollback()
	if !compiled {
		t.Fatal("control: the lease run as a plain statement on these connections was not JIT-compiled; the test proves nothing")
	}
	ltx, err := r.beginLease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	compiled = explainJIT(t, r, ltx.tx)
	ltx.rollback()
	if compiled {
		t.Fatal("the lease in the relay's lease transaction was JIT-compiled")
	}
	// A carried mark (pending.go) stands in for SET LOCAL: its statement
	// sets jit off for the lease after it.
	ltx, err = r.beginLeaseWith(context.Background(), &carriedMark{seqs: "{}"}, false)
	if err != nil {
		t.Fatal(err)
	}
	compiled = explainJIT(t, r, ltx.tx)
	ltx.rollback()
	if compiled {
		t.Fatal("the lease after a carried mark in its transaction was JIT-compiled")
	}
	batch, _, err := r.lease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != r.cfg.BatchSize {
		t.Fatalf("leased %d events, want %d", len(batch), r.cfg.BatchSize)
	}
	var leased int
	if err := e.db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE leased_by = 'jit'`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != len(batch) {
		t.Fatalf("another connection sees %d events leased, want %d: the lease's transaction did not commit", leased, len(batch))
	}

	off := open("&jit=off")
	if r := off.newRelay(t, &recorder{}, Config{Name: "nojit"}); r.noJIT.Load() {
		t.Fatal("the relay leases in a transaction on connections with jit off")
	}
}

// TestLeaseJITGuardFollowsTheEstimate: where JIT is possible, a lease
// runs in a transaction with jit off only when its estimated cost reaches
// half of jit_above_cost; a lease estimated far below it runs as one
// statement (three round trips fewer on every poll of a relay that keeps
// up). An estimate that cannot be had counts as over.
func TestLeaseJITGuardFollowsTheEstimate(t *testing.T) {
	t.Parallel()
	e := jitEnv(t)
	fillKeyed(t, e, 300, 0)
	relayOn := func(name, params string) *Relay {
		return e.withParams(t, params).newRelay(t, &recorder{}, Config{Name: name, BatchSize: 10})
	}
	ctx := context.Background()
	args := func(r *Relay) []any {
		return []any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize, int64(0)}
	}
	for _, c := range []struct {
		name, params string
		guarded      bool
	}{
		{"cheap", "&jit=on&jit_above_cost=1e12", false},
		{"dear", "&jit=on&jit_above_cost=2", true},
	} {
		r := relayOn(c.name, c.params)
		if !r.noJIT.Load() {
			t.Fatalf("%s: the relay did not see that its connections may JIT-compile", c.name)
		}
		if got := r.leaseNeedsJITOff(ctx, r.sql.lease, args(r)); got != c.guarded {
			t.Fatalf("%s (%s): lease with jit off = %v, want %v (estimate %v)", c.name, c.params, got, c.guarded, r.jitCost[r.sql.lease])
		}
		if est := r.jitCost[r.sql.lease]; est.cost <= 0 || est.at.IsZero() {
			t.Fatalf("%s: no estimate recorded: %+v", c.name, est)
		}
		batch, _, err := r.lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) != 10 {
			t.Fatalf("%s: leased %d events, want 10", c.name, len(batch))
		}
		if _, err := r.mark(ctx, batch, make([]error, len(batch))); err != nil {
			t.Fatal(err)
		}
	}
	r := relayOn("unknown", "&jit=on&jit_above_cost=1e12")
	if !r.leaseNeedsJITOff(ctx, "SELECT * FROM herald_no_such_table", nil) {
		t.Fatal("a lease whose estimate could not be read ran without jit off")
	}
}

// TestSlowLeaseAsksAgainOnlyAfterARecheck: a slow unguarded lease makes the
// next lease of its form ask for the estimate again — but not when the
// estimate was asked less than jitSlowRecheck ago (a slow database made
// every lease slow, and every poll ran an EXPLAIN).
func TestSlowLeaseAsksAgainOnlyAfterARecheck(t *testing.T) {
	t.Parallel()
	r := &Relay{jitCost: map[string]jitEstimate{
		"fresh": {cost: 10, at: time.Now()},
		"old":   {cost: 10, at: time.Now().Add(-jitSlowRecheck - time.Millisecond)},
	}}
	r.slowLease("fresh")
	r.slowLease("old")
	r.slowLease("never asked")
	if _, ok := r.jitCost["fresh"]; !ok {
		t.Fatal("a slow lease dropped an estimate asked less than jitSlowRecheck ago")
	}
	if _, ok := r.jitCost["old"]; ok {
		t.Fatalf("a slow lease kept an estimate asked more than jitSlowRecheck ago: %+v", r.jitCost["old"])
	}
	if len(r.jitCost) != 1 {
		t.Fatalf("estimates after the slow leases: %+v, want only the fresh one", r.jitCost)
	}
}
