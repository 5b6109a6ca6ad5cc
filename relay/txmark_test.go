package relay

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// sinkTx is a TxDelivery writing each event's id to the table sink, in
// the relay's transaction. before, when set, runs first in each call.
type sinkTx struct {
	calls  atomic.Int32
	before func(ctx context.Context, tx *sql.Tx, es []*envelope.Event) []error
}

func (s *sinkTx) DeliverTx(ctx context.Context, tx *sql.Tx, es []*envelope.Event) []error {
	s.calls.Add(1)
	if s.before != nil {
		if errs := s.before(ctx, tx, es); errs != nil {
			return errs
		}
	}
	for _, e := range es {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sink (id) VALUES ('`+e.ID.String()+`')`); err != nil {
			errs := make([]error, len(es))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
	}
	return nil
}

func (s *sinkTx) Deliver(context.Context, *envelope.Event) error {
	return errors.New("sinkTx: Deliver called; the relay must call DeliverTx")
}

func (s *sinkTx) Close() error { return nil }

var _ delivery.TxDelivery = (*sinkTx)(nil)

func sinkTable(t testing.TB, e *env) {
	t.Helper()
	ddl := `CREATE TABLE sink (id TEXT PRIMARY KEY)`
	if e.d == envelope.MySQL {
		ddl = `CREATE TABLE sink (id VARCHAR(64) PRIMARY KEY)`
	}
	if _, err := e.db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
}

func sinkRows(t testing.TB, e *env) map[string]bool {
	t.Helper()
	rows, err := e.db.Query(`SELECT id FROM sink`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A TxDelivery's writes commit with the mark: every published event has
// its row, no failed one has. A failing event's transaction is rolled
// back and the others go again in a new one (the sink's primary key
// would refuse a row written twice); the later events of the failed
// event's key wait.
func TestTxDeliveryCommitsWithMark(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		if e.d == envelope.MySQL {
			// Refused at New (TestTxDeliveryRefusedOnMySQL).
			return
		}
		sinkTable(t, e)
		d := &sinkTx{}
		d.before = func(_ context.Context, _ *sql.Tx, es []*envelope.Event) []error {
			var errs []error
			for i, ev := range es {
				if ev.Topic == "bad" {
					if errs == nil {
						errs = make([]error, len(es))
					}
					errs[i] = delivery.Permanent(errors.New("refused"))
				}
			}
			return errs
		}
		es := e.enqueue(t, msg("good", "k1", 1), msg("bad", "k2", 2), msg("good", "k2", 3), msg("good", "k3", 4), msg("good", "", 5))
		r := e.newRelay(t, d, Config{})
		start(t, r)
		testkit.Eventually(t, 30*time.Second, func() bool {
			return e.count(t, "published_at IS NOT NULL") == 3 && e.count(t, "dead_lettered_at IS NOT NULL") == 1
		}, "three events published, one dead-lettered")
		got := sinkRows(t, e)
		for _, ev := range es {
			published := e.row(t, ev.ID).PublishedAt != nil
			if got[ev.ID.String()] != published {
				t.Errorf("event %s (topic %s, key %s): in the sink %v, published %v", ev.ID, ev.Topic, ev.OrderingKey, got[ev.ID.String()], published)
			}
		}
		if d.calls.Load() < 2 {
			t.Fatalf("DeliverTx called %d times; want the failed transaction retried without the failure", d.calls.Load())
		}
	})
}

// A transaction whose mark takes fewer rows than the delivery wrote (an
// event's lease taken over meanwhile) is rolled back: nothing of it is
// written. The other events go again, the taken one once its lease ends:
// in the end each event has exactly one row.
func TestTxDeliveryRollsBackShortMark(t *testing.T) {
	e := newEnv(t, envelope.Postgres)
	sinkTable(t, e)
	var stole sync.Once
	stolen := make(chan struct{})
	d := &sinkTx{}
	d.before = func(ctx context.Context, _ *sql.Tx, es []*envelope.Event) []error {
		stole.Do(func() {
			// Another relay takes the first event's lease.
			if _, err := e.db.ExecContext(ctx, `UPDATE herald_outbox SET leased_by = 'thief', lease_until = now() + interval '1 second' WHERE id = $1`, es[0].ID); err != nil {
				t.Error(err)
			}
			close(stolen)
		})
		return nil
	}
	logs := &logRecords{}
	es := e.enqueue(t, msg("a", "k1", 1), msg("a", "k2", 2), msg("a", "k3", 3))
	r := e.newRelay(t, d, Config{Logger: slog.New(logs), Lease: 3 * time.Second, DeliveryTimeout: time.Second})
	start(t, r)
	<-stolen
	testkit.Eventually(t, 30*time.Second, func() bool { return e.count(t, "published_at IS NOT NULL") == len(es) }, "every event published")
	if got := sinkRows(t, e); len(got) != len(es) {
		t.Fatalf("%d sink rows for %d events", len(got), len(es))
	}
	warned := false
	for _, rec := range logs.atLeast(slog.LevelWarn) {
		if rec.Message == "herald/relay: some events were no longer leased by this relay (lease expired and taken over); the delivery's transaction is rolled back, its other events released" {
			warned = true
		}
	}
	if !warned {
		t.Fatal("no WARN for the short mark")
	}
}

// A TxDelivery on MySQL is refused at New, not at a batch.
func TestTxDeliveryRefusedOnMySQL(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		if e.d != envelope.MySQL {
			return
		}
		_, err := New(e.db, &sinkTx{}, Config{})
		if !errors.Is(err, envelope.ErrUnsupported) || !strings.Contains(err.Error(), "TxDelivery") {
			t.Fatalf("New(TxDelivery) on MySQL = %v, want ErrUnsupported naming TxDelivery", err)
		}
	})
}
