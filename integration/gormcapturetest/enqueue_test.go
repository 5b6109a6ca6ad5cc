package gormcapture_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/outbox"
)

// The after-commit cases of notes/gorm-aftercommit.md §4, for
// Enqueue/EnqueueMany: a wakeup fires exactly once after the outermost
// commit with the coalesced topics, and never after a rollback. The
// capture cases of the table (associations, CreateInBatches, gorm.G,
// default transactions) are in capture_tx_test.go.

type afterCommitCase struct {
	name  string
	cfg   *gorm.Config
	run   func(t *testing.T, e *env) // the scenario
	fires []string                   // expected signals, each "a b" (sorted topics)
	count int                        // events committed at the end
}

var afterCommitCases = []afterCommitCase{
	{name: "01 Transaction commits", fires: []string{"a b"}, count: 3, run: func(t *testing.T, e *env) {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a", "b", "a")
			return nil
		}))
	}},
	{name: "02 Transaction returns error", count: 0, run: func(t *testing.T, e *env) {
		err := e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a")
			return errors.New("no")
		})
		if err == nil {
			t.Fatal("want error")
		}
	}},
	{name: "03 Transaction panics", count: 0, run: func(t *testing.T, e *env) {
		func() {
			defer func() { _ = recover() }()
			_ = e.db.Transaction(func(tx *gorm.DB) error {
				enq(t, tx, "a")
				panic("boom")
			})
		}()
	}},
	{name: "04 nested: inner error, outer commits", fires: []string{"a c"}, count: 2, run: func(t *testing.T, e *env) {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a")
			_ = tx.Transaction(func(tx2 *gorm.DB) error {
				enq(t, tx2, "b")
				return errors.New("inner")
			})
			enq(t, tx, "c")
			return nil
		}))
	}},
	{name: "05 nested: inner panics, outer recovers and commits", fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a")
			func() {
				defer func() { _ = recover() }()
				_ = tx.Transaction(func(tx2 *gorm.DB) error {
					enq(t, tx2, "b")
					panic("inner")
				})
			}()
			return nil
		}))
	}},
	{name: "06 three levels: innermost error, middle ok", fires: []string{"a b"}, count: 2, run: func(t *testing.T, e *env) {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a")
			return tx.Transaction(func(tx2 *gorm.DB) error {
				enq(t, tx2, "b")
				_ = tx2.Transaction(func(tx3 *gorm.DB) error {
					enq(t, tx3, "c")
					return errors.New("innermost")
				})
				return nil
			})
		}))
	}},
	{name: "07 nested: inner ok, outer returns error", count: 0, run: func(t *testing.T, e *env) {
		_ = e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a")
			must(t, tx.Transaction(func(tx2 *gorm.DB) error {
				enq(t, tx2, "b")
				return nil
			}))
			return errors.New("outer")
		})
	}},
	{name: "08 manual SavePoint/RollbackTo", fires: []string{"a c"}, count: 2, run: func(t *testing.T, e *env) {
		tx := e.db.Begin()
		enq(t, tx, "a")
		must(t, tx.SavePoint("sp_a").Error)
		enq(t, tx, "b")
		must(t, tx.RollbackTo("sp_a").Error)
		enq(t, tx, "c")
		must(t, tx.Commit().Error)
	}},
	{name: "09 DisableNestedTransaction: inner error undoes nothing", cfg: &gorm.Config{DisableNestedTransaction: true},
		fires: []string{"a b"}, count: 2, run: func(t *testing.T, e *env) {
			must(t, e.db.Transaction(func(tx *gorm.DB) error {
				enq(t, tx, "a")
				_ = tx.Transaction(func(tx2 *gorm.DB) error {
					enq(t, tx2, "b")
					return errors.New("inner")
				})
				return nil
			}))
		}},
	{name: "10 Begin/Commit", fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		tx := e.db.Begin()
		enq(t, tx, "a")
		must(t, tx.Commit().Error)
	}},
	{name: "11 Begin/Rollback", count: 0, run: func(t *testing.T, e *env) {
		tx := e.db.Begin()
		enq(t, tx, "a")
		must(t, tx.Rollback().Error)
	}},
	{name: "12 Commit twice", fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		tx := e.db.Begin()
		enq(t, tx, "a")
		must(t, tx.Commit().Error)
		if err := tx.Commit().Error; err == nil {
			t.Error("second Commit: want an error")
		}
	}},
	{name: "13 outside a transaction: commits at once", fires: []string{"a b"}, count: 2, run: func(t *testing.T, e *env) {
		enq(t, e.db, "a", "b")
	}},
	{name: "14 two writes outside a transaction: one signal each", fires: []string{"a", "b"}, count: 2, run: func(t *testing.T, e *env) {
		enq(t, e.db, "a")
		enq(t, e.db, "b")
	}},
	{name: "15 failing write outside a transaction", count: 0, run: func(t *testing.T, e *env) {
		_, err := gormcapture.EnqueueMany(e.db, []envelope.Message{msg("a"), {Topic: "b", Payload: 1, Extra: map[string]any{"no_such_column": 1}}})
		if err == nil {
			t.Fatal("want an error for an unknown extra column")
		}
	}},
	{name: "16 Session SkipDefaultTransaction", fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		enq(t, e.db.Session(&gorm.Session{SkipDefaultTransaction: true}), "a")
	}},
	{name: "16b Config SkipDefaultTransaction", cfg: &gorm.Config{SkipDefaultTransaction: true}, fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		enq(t, e.db, "a")
	}},
	{name: "17 Session NewDB in a transaction: commit / rollback", fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx.Session(&gorm.Session{NewDB: true}), "a")
			return nil
		}))
		_ = e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx.Session(&gorm.Session{NewDB: true}), "b")
			return errors.New("rollback")
		})
	}},
	{name: "18 Session PrepareStmt in a transaction: rollback / nested rollback then commit", fires: []string{"c"}, count: 1, run: func(t *testing.T, e *env) {
		_ = e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx.Session(&gorm.Session{PrepareStmt: true}), "a")
			return errors.New("rollback")
		})
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			ps := tx.Session(&gorm.Session{PrepareStmt: true})
			_ = ps.Transaction(func(tx2 *gorm.DB) error {
				enq(t, tx2, "b")
				return errors.New("inner")
			})
			enq(t, ps, "c")
			return nil
		}))
	}},
	{name: "18b PrepareStmt DB: nested prepared sessions roll back a savepoint", cfg: &gorm.Config{PrepareStmt: true}, fires: []string{"a c"}, count: 2, run: func(t *testing.T, e *env) {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			ps := tx.Session(&gorm.Session{PrepareStmt: true})
			enq(t, ps, "a")
			_ = ps.Transaction(func(tx2 *gorm.DB) error {
				enq(t, tx2, "b")
				return errors.New("inner")
			})
			enq(t, ps, "c")
			return nil
		}))
	}},
	{name: "19 WithContext in a transaction", fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx.WithContext(context.Background()), "a")
			return nil
		}))
	}},
	{name: "24 context cancelled inside Transaction", count: 0, run: func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		err := e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a")
			cancel()
			return nil
		})
		if err == nil {
			t.Error("want the commit to fail")
		}
	}},
	{name: "26 tx.Exec INSERT is not recorded", count: 1, run: func(t *testing.T, e *env) {
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			return tx.Exec(`INSERT INTO herald_outbox (id, topic, payload, headers, created_at) VALUES (?, 'raw', '{}', '{}', ?)`,
				"0190f3f0-0000-7000-8000-000000000001", outbox.TimeArg(e.dialect, fixedTime)).Error
		}))
	}},
	{name: "27 db.Connection, write outside a transaction", fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		must(t, e.db.Connection(func(c *gorm.DB) error {
			enq(t, c, "a")
			return nil
		}))
	}},
	{name: "idempotent hit signals nothing", fires: []string{"a"}, count: 1, run: func(t *testing.T, e *env) {
		m := msg("a")
		m.IdempotencyKey = "k1"
		for range 2 {
			must(t, e.db.Transaction(func(tx *gorm.DB) error {
				_, err := gormcapture.Enqueue(tx, m)
				return err
			}))
		}
		_, err := gormcapture.Enqueue(e.db, m)
		must(t, err)
	}},
}

func enq(t *testing.T, db *gorm.DB, topics ...string) {
	t.Helper()
	ms := make([]envelope.Message, len(topics))
	for i, tp := range topics {
		ms[i] = msg(tp)
	}
	es, err := gormcapture.EnqueueMany(db, ms)
	if err != nil {
		t.Fatalf("enqueue %v: %v", topics, err)
	}
	if len(es) != len(topics) {
		t.Fatalf("enqueue: %d events for %d messages", len(es), len(topics))
	}
	for i, ev := range es {
		if ev.Topic != topics[i] || ev.Sequence == 0 {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
}

func TestAfterCommit(t *testing.T) {
	t.Parallel()
	for _, c := range afterCommitCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, d envelope.Dialect) {
				e := newEnv(t, d, c.cfg, gormcapture.Config{})
				c.run(t, e)
				if got := e.wake.take(); !slices.Equal(got, c.fires) {
					t.Errorf("fires = %q, want %q", got, c.fires)
				}
				if got := e.count(t); got != c.count {
					t.Errorf("%d events committed, want %d", got, c.count)
				}
			})
		})
	}
}

// Every signal is sent after the commit: an independent connection
// already sees the events.
func TestAfterCommitSeesCommittedRows(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{})
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a", "b")
			return nil
		}))
		tx := e.db.Begin()
		enq(t, tx, "c")
		must(t, tx.Commit().Error)
		if got := e.wake.seenCounts(); !slices.Equal(got, []int{2, 3}) {
			t.Errorf("events seen at each signal = %v, want [2 3]", got)
		}
	})
}

// Row 25: a failed statement the caller ignores. SQLite commits the rest
// (one signal); PostgreSQL's commit fails, nothing fires.
func TestAfterCommitIgnoredFailure(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{})
		err := e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a")
			_ = tx.Exec(`SELECT * FROM no_such_table`).Error
			return nil
		})
		want, n := []string{"a"}, 1
		if d == envelope.Postgres {
			want, n = nil, 0
			if err == nil {
				t.Error("PostgreSQL: want the commit to fail")
			}
		}
		if got := e.wake.take(); !slices.Equal(got, want) {
			t.Errorf("fires = %q, want %q", got, want)
		}
		if got := e.count(t); got != n {
			t.Errorf("%d events, want %d", got, n)
		}
	})
}

// Rows 28 and 32: transactions begun on a pool the plugin does not own
// cannot be seen to commit. The events commit with them; no signal is
// sent early (never before the commit), and a warning is logged once.
func TestAfterCommitForeignTransaction(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		db, other := openDB(t, d, nil)
		early := db.WithContext(context.Background()) // derived before db.Use
		var logs bytes.Buffer
		rec := &recorder{}
		p := gormcapture.New(gormcapture.Config{Wakeup: rec, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		must(t, db.Use(p))
		e := &env{db: db, sql: other, dialect: d, wake: rec}

		must(t, db.Connection(func(c *gorm.DB) error {
			return c.Transaction(func(tx *gorm.DB) error {
				enq(t, tx, "conn")
				return nil
			})
		}))
		must(t, early.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "early")
			return nil
		}))
		enq(t, early, "early-auto") // outside a transaction: the plugin's own, seen
		if got := rec.take(); !slices.Equal(got, []string{"early-auto"}) {
			t.Errorf("fires = %q, want only the autocommit one", got)
		}
		if got := e.count(t); got != 3 {
			t.Errorf("%d events, want 3", got)
		}
		if !bytes.Contains(logs.Bytes(), []byte("does not wrap")) || bytes.Count(logs.Bytes(), []byte("level=WARN")) != 1 {
			t.Errorf("want one warning, got %q", logs.String())
		}
	})
}

// Row 29: db.DB() still returns the *sql.DB.
func TestAfterCommitDBHandle(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{})
		root, err := e.db.DB()
		must(t, err)
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			for _, db := range []*gorm.DB{tx, tx.Session(&gorm.Session{PrepareStmt: true})} {
				got, err := db.DB()
				if err != nil || got != root {
					t.Errorf("DB() = %p, %v; want %p", got, err, root)
				}
			}
			return nil
		}))
	})
}

// Row 33: concurrent transactions, odd ones rolled back: one signal per
// commit, with only that transaction's topic.
func TestAfterCommitConcurrent(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{})
		const workers, each = 8, 10
		var wg sync.WaitGroup
		var mu sync.Mutex
		var committed []string
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					topic := fmt.Sprintf("w%d.%d", w, i)
					err := e.db.Transaction(func(tx *gorm.DB) error {
						if _, err := gormcapture.Enqueue(tx, msg(topic)); err != nil {
							return err
						}
						if i%2 == 1 {
							return errors.New("rollback")
						}
						return nil
					})
					if err == nil {
						mu.Lock()
						committed = append(committed, topic)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		got := e.wake.take()
		slices.Sort(got)
		slices.Sort(committed)
		if !slices.Equal(got, committed) {
			t.Errorf("fires = %v\nwant %v", got, committed)
		}
		if n := e.count(t); n != len(committed) {
			t.Errorf("%d events, want %d", n, len(committed))
		}
	})
}

// A TxSignaler (PostgreSQL NOTIFY) is signalled inside the transaction,
// once per topic per transaction, and never with Signal after it.
func TestAfterCommitTxSignaler(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		ts := &txSignaler{}
		e := newEnv(t, d, nil, gormcapture.Config{Wakeup: ts})
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			enq(t, tx, "a", "b")
			enq(t, tx, "a", "c")
			_ = tx.Transaction(func(tx2 *gorm.DB) error {
				enq(t, tx2, "d")
				return errors.New("inner")
			})
			enq(t, tx, "d")
			return nil
		}))
		enq(t, e.db, "e")
		ts.mu.Lock()
		defer ts.mu.Unlock()
		want := []string{"a b", "c", "d", "d", "e"}
		if !slices.Equal(ts.inTx, want) {
			t.Errorf("SignalTx calls = %q, want %q", ts.inTx, want)
		}
		if len(ts.after) != 0 {
			t.Errorf("Signal calls = %q, want none", ts.after)
		}
	})
}

type txSignaler struct {
	recorder
	mu          sync.Mutex
	inTx, after []string
}

func (s *txSignaler) SignalTx(ctx context.Context, q envelope.Querier, topics []string) error {
	// Prove it runs in the transaction: a statement through q works.
	rows, err := q.QueryContext(ctx, `SELECT 1`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	if err := rows.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := slices.Clone(topics)
	slices.Sort(ts)
	s.inTx = append(s.inTx, joinTopics(ts))
	return nil
}

func (s *txSignaler) Signal(_ context.Context, topics []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = append(s.after, joinTopics(topics))
	return nil
}

func joinTopics(ts []string) string {
	out := ""
	for i, s := range ts {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}

func TestEnqueueErrors(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		db, _ := openDB(t, d, nil)
		if _, err := gormcapture.Enqueue(db, msg("a")); !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("without the plugin: %v, want ErrConfiguration", err)
		}
		e := newEnv(t, d, nil, gormcapture.Config{})
		// A rejected message writes nothing, also inside a transaction,
		// and leaves the transaction usable.
		must(t, e.db.Transaction(func(tx *gorm.DB) error {
			_, err := gormcapture.EnqueueMany(tx, []envelope.Message{msg("a"), {Topic: ""}})
			if !errors.Is(err, envelope.ErrValidation) {
				t.Errorf("empty topic: %v, want ErrValidation", err)
			}
			_, err = gormcapture.Enqueue(tx, envelope.Message{Topic: "x", Payload: 1, Extra: map[string]any{"nope": 1}})
			if err == nil {
				t.Error("unknown extra column: want an error")
			}
			enq(t, tx, "after")
			return nil
		}))
		if got := e.count(t); got != 1 {
			t.Errorf("%d events, want 1", got)
		}
	})
}
