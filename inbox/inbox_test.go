package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/relay"
)

func TestMigrateVersions(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		if v, err := inbox.Version(ctx, db, d, ""); err != nil || v != inbox.LatestVersion {
			t.Fatalf("Version = %d, %v; want %d", v, err, inbox.LatestVersion)
		}
		if err := inbox.Migrate(ctx, db, d, ""); err != nil { // again: nothing to do
			t.Fatal(err)
		}
		if err := inbox.MigrateTo(ctx, db, d, "", 1); err != nil {
			t.Fatal(err)
		}
		if v, _ := inbox.Version(ctx, db, d, ""); v != 1 {
			t.Fatalf("after MigrateTo(1): version %d", v)
		}
		if _, err := db.ExecContext(ctx, `SELECT count(*) FROM herald_inbox_keys`); err == nil {
			t.Fatal("herald_inbox_keys survived the way down to version 1")
		}
		if _, err := inbox.New(ctx, db, inbox.Config{Consumer: "c", Dialect: d}); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "inbox.Migrate") {
			t.Fatalf("New on a version-1 table: %v; want ErrConfiguration telling to migrate", err)
		}
		if err := inbox.MigrateTo(ctx, db, d, "", 0); err != nil {
			t.Fatal(err)
		}
		if v, _ := inbox.Version(ctx, db, d, ""); v != 0 {
			t.Fatalf("after MigrateTo(0): version %d", v)
		}
		if err := inbox.Migrate(ctx, db, d, "other_inbox"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM herald_migration WHERE table_name = 'other_inbox'`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("herald_migration records %d versions of other_inbox (%v); want 2", n, err)
		}
	})
}

func TestMigrationSQL(t *testing.T) {
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite, envelope.MySQL} {
		s, err := inbox.MigrationSQL(d, "", 1, false)
		if err != nil {
			t.Fatal(err)
		}
		q := d.QuoteIdent
		for _, want := range []string{"-- herald inbox herald_inbox, version 1", `CREATE TABLE IF NOT EXISTS ` + q("herald_inbox"), q("herald_migration"), "('herald_inbox', 1)"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s: MigrationSQL(1) lacks %q:\n%s", d, want, s)
			}
		}
		if d == envelope.SQLite && !strings.Contains(s, "WITHOUT ROWID") {
			t.Errorf("sqlite: the inbox table is not WITHOUT ROWID:\n%s", s)
		}
		if d == envelope.MySQL && !strings.Contains(s, "COLLATE=utf8mb4_bin") {
			t.Errorf("mysql: the inbox table does not compare ids byte for byte:\n%s", s)
		}
		if _, err := inbox.MigrationSQL(d, "", 3, false); !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("%s: version 3: %v; want ErrConfiguration", d, err)
		}
		want := 3 // two tables and the index on processed_at
		if d == envelope.MySQL {
			want = 2 // the index is inside its CREATE TABLE
		}
		ddl, err := inbox.DDL(d, "")
		if err != nil || len(ddl) != want {
			t.Errorf("%s: DDL = %d statements, %v; want %d", d, len(ddl), err, want)
		}
	}
	if _, err := inbox.Migrations(envelope.Postgres, "herald_migration"); !errors.Is(err, envelope.ErrConfiguration) {
		t.Errorf("herald_migration as the inbox table: %v", err)
	}
	if _, err := inbox.Migrations(envelope.SQLite, "a.b"); !errors.Is(err, envelope.ErrConfiguration) {
		t.Errorf("a schema on SQLite: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		for _, c := range []struct {
			cfg   inbox.Config
			where string
		}{
			{inbox.Config{Dialect: d}, "Consumer"},
			{inbox.Config{Consumer: strings.Repeat("c", 256), Dialect: d}, "Consumer"},
			{inbox.Config{Consumer: "c", Dialect: d, TTL: time.Hour, CacheTTL: 2 * time.Hour}, "CacheTTL"},
			{inbox.Config{Consumer: "c", Dialect: d, TTL: time.Hour, RedeliveryWindow: 2 * time.Hour}, "TTL"},
			{inbox.Config{Consumer: "c", Dialect: d, TTL: -1}, "TTL"},
			{inbox.Config{Consumer: "c", Dialect: d, Order: 7}, "Order"},
			{inbox.Config{Consumer: "c", Dialect: d, Table: "no such-table"}, "Table"},
		} {
			_, err := inbox.New(ctx, db, c.cfg)
			if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), c.where) {
				t.Errorf("%+v: %v; want ErrConfiguration naming %s", c.cfg, err, c.where)
			}
		}
		if _, err := inbox.New(ctx, db, inbox.Config{Consumer: "c", Dialect: d, Table: "not_migrated"}); !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("a missing table: %v", err)
		}
	})
}

func TestRelayRetrySpanMatchesTheRelay(t *testing.T) {
	got := inbox.RelayRetrySpan(0, 0, 0)
	want := inbox.RelayRetrySpan(relay.DefaultMaxAttempts, relay.DefaultRetryBase, relay.DefaultRetryMax)
	if got != want {
		t.Fatalf("the inbox's copy of the relay's defaults is out of date: %s, want %s", got, want)
	}
	// 1s, 2s, 4s, 8s between five attempts, each +10%.
	if got != 16500*time.Millisecond {
		t.Fatalf("RelayRetrySpan(defaults) = %s; want 16.5s", got)
	}
	if s := inbox.RelayRetrySpan(20, time.Second, time.Minute); s != (1+2+4+8+16+32+60*13)*1100*time.Millisecond {
		t.Fatalf("RelayRetrySpan(20, 1s, 1m) = %s", s)
	}
}

func TestHandleOnceForEachID(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		in := newInbox(t, db, d, nil)
		other := newInbox(t, db, d, func(c *inbox.Config) { c.Consumer = "mailer" })
		run := func(in *inbox.Inbox, id string) inbox.Outcome {
			out, err := in.Handle(ctx, inbox.Message{ID: id}, func(ctx context.Context, tx *sql.Tx) error {
				inbox.SetResult(ctx, "ok "+id)
				return effect(ctx, tx, d, in.Consumer()+":"+id)
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		if got := run(in, "a"); got != inbox.Processed {
			t.Fatalf("first a: %s", got)
		}
		if got := run(in, "a"); got != inbox.Duplicate {
			t.Fatalf("second a: %s", got)
		}
		if got := run(other, "a"); got != inbox.Processed {
			t.Fatalf("a for another consumer: %s", got)
		}
		if got := run(in, "b"); got != inbox.Processed {
			t.Fatalf("b: %s", got)
		}
		want := map[string]int{"projector:a": 1, "mailer:a": 1, "projector:b": 1}
		if got := effects(t, db); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("effects %v; want %v", got, want)
		}
		r, ok, err := in.Lookup(ctx, "a")
		if err != nil || !ok || r.Result != "ok a" || !r.HasResult || r.ProcessedAt.IsZero() {
			t.Fatalf("Lookup(a) = %+v, %v, %v", r, ok, err)
		}
		if _, ok, _ := in.Lookup(ctx, "zzz"); ok {
			t.Fatal("Lookup finds an id never processed")
		}
		if _, err := in.Handle(ctx, inbox.Message{}, nil); !errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("an empty id: %v", err)
		}
	})
}

func TestHandleErrorAndPanicRollBack(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		in := newInbox(t, db, d, nil)
		boom := errors.New("boom")
		out, err := in.Handle(ctx, inbox.Message{ID: "x"}, func(ctx context.Context, tx *sql.Tx) error {
			if err := effect(ctx, tx, d, "x"); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) || out != inbox.Processed {
			t.Fatalf("Handle = %s, %v; want the handler's error", out, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic was swallowed")
				}
			}()
			_, _ = in.Handle(ctx, inbox.Message{ID: "x"}, func(ctx context.Context, tx *sql.Tx) error {
				if err := effect(ctx, tx, d, "x"); err != nil {
					return err
				}
				panic("handler panics")
			})
		}()
		if got := effects(t, db); len(got) != 0 {
			t.Fatalf("effects after an error and a panic: %v", got)
		}
		if seen, _ := in.Seen(ctx, []string{"x"}); seen["x"] {
			t.Fatal("the id of a failed handler is recorded")
		}
		out, err = in.Handle(ctx, inbox.Message{ID: "x"}, func(ctx context.Context, tx *sql.Tx) error { return effect(ctx, tx, d, "x") })
		if err != nil || out != inbox.Processed {
			t.Fatalf("the redelivery: %s, %v", out, err)
		}
		if got := effects(t, db); got["x"] != 1 {
			t.Fatalf("effects %v", got)
		}
	})
}

func TestHandleWithinCallersTransaction(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		in := newInbox(t, db, d, nil)
		for i, commit := range []bool{false, true, true} {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := in.HandleWithin(ctx, tx, inbox.Message{ID: "w"}, func(ctx context.Context) error { return effect(ctx, tx, d, "w") })
			if err != nil {
				t.Fatal(err)
			}
			want := []inbox.Outcome{inbox.Processed, inbox.Processed, inbox.Duplicate}[i]
			if out != want {
				t.Fatalf("round %d: %s; want %s", i, out, want)
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := effects(t, db); got["w"] != 1 {
			t.Fatalf("effects %v", got)
		}
	})
}

func TestHandleOnceNonTransactional(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		for _, cache := range []inbox.Cache{nil, &inbox.MemoryCache{}} {
			in := newInbox(t, db, d, func(c *inbox.Config) { c.Cache = cache; c.Consumer = fmt.Sprintf("mailer-%T", cache) })
			sent := 0
			fail := errors.New("smtp down")
			send := func(err error) func(context.Context) error {
				return func(ctx context.Context) error {
					// The id is committed before the effect runs.
					if seen, _ := in.Seen(ctx, []string{"m"}); !seen["m"] {
						t.Error("the effect runs before its id is committed")
					}
					if err == nil {
						sent++
					}
					return err
				}
			}
			if _, err := in.HandleOnce(ctx, inbox.Message{ID: "m"}, send(fail)); !errors.Is(err, fail) {
				t.Fatalf("a failed effect: %v", err)
			}
			for i, want := range []inbox.Outcome{inbox.Processed, inbox.Duplicate, inbox.Duplicate} {
				out, err := in.HandleOnce(ctx, inbox.Message{ID: "m"}, send(nil))
				if err != nil || out != want {
					t.Fatalf("%T round %d: %s, %v; want %s", cache, i, out, err, want)
				}
			}
			if sent != 1 {
				t.Fatalf("%T: sent %d times", cache, sent)
			}
		}
	})
}

func TestOrderSkipAndFlag(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		skip := newInbox(t, db, d, func(c *inbox.Config) { c.Order = inbox.OrderSkip; c.Consumer = "skip" })
		flag := newInbox(t, db, d, func(c *inbox.Config) { c.Order = inbox.OrderFlag; c.Consumer = "flag" })
		headers := func(id string, seq int) map[string]string {
			return map[string]string{"Herald-Event-Id": id, "herald-ordering-key": "order:1", "herald-sequence": fmt.Sprint(seq)}
		}
		for _, c := range []struct {
			id       string
			seq      int
			skipWant inbox.Outcome
			stale    bool
		}{
			{"e5", 5, inbox.Processed, false},
			{"e3", 3, inbox.Stale, true}, // redelivered old event
			{"e7", 7, inbox.Processed, false},
			{"e6", 6, inbox.Stale, true},
			{"e7", 7, inbox.Duplicate, false},
		} {
			m, err := inbox.FromHeaders(headers(c.id, c.seq))
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			out, err := skip.Handle(ctx, m, func(ctx context.Context, tx *sql.Tx) error { ran = true; return nil })
			if err != nil || out != c.skipWant || ran != (c.skipWant == inbox.Processed) {
				t.Fatalf("OrderSkip %s@%d: %s, %v, ran %v; want %s", c.id, c.seq, out, err, ran, c.skipWant)
			}
			var stale bool
			ran = false
			out, err = flag.Handle(ctx, m, func(ctx context.Context, tx *sql.Tx) error { ran, stale = true, inbox.IsStale(ctx); return nil })
			wantOut := inbox.Processed
			if c.skipWant == inbox.Duplicate {
				wantOut = inbox.Duplicate
			}
			if err != nil || out != wantOut || stale != c.stale || ran != (wantOut == inbox.Processed) {
				t.Fatalf("OrderFlag %s@%d: %s, %v, stale %v; want %s, stale %v", c.id, c.seq, out, err, stale, wantOut, c.stale)
			}
		}
		if _, err := inbox.FromHeaders(map[string]string{"herald-sequence": "1"}); !errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("no event id: %v", err)
		}
		if _, err := inbox.FromHeaders(map[string]string{"herald-event-id": "a", "herald-sequence": "x"}); !errors.Is(err, envelope.ErrValidation) {
			t.Fatalf("a bad sequence: %v", err)
		}
	})
}

func TestHandleBatchFiltersInOneStatement(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		in := newInbox(t, db, d, nil)
		batch := func(ids ...string) []string {
			ms := make([]inbox.Message, len(ids))
			for i, id := range ids {
				ms[i] = inbox.Message{ID: id}
			}
			fresh, err := in.HandleBatch(ctx, ms, func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
				for _, m := range fresh {
					if err := effect(ctx, tx, d, m.ID); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, m := range fresh {
				out = append(out, m.ID)
			}
			return out
		}
		if got := batch("z", "b", "z", "a"); !slices.Equal(got, []string{"z", "b", "a"}) {
			t.Fatalf("first batch: %v; want the batch's order, z once", got)
		}
		if got := batch("c", "a", "d", "b"); !slices.Equal(got, []string{"c", "d"}) {
			t.Fatalf("second batch: %v; want c d", got)
		}
		if got := batch("a", "d"); got != nil {
			t.Fatalf("a batch of duplicates: %v", got)
		}
		seen, err := in.Seen(ctx, []string{"a", "q", "d"})
		if err != nil || !seen["a"] || seen["q"] || !seen["d"] {
			t.Fatalf("Seen = %v, %v", seen, err)
		}
		boom := errors.New("boom")
		if _, err := in.HandleBatch(ctx, []inbox.Message{{ID: "e"}, {ID: "f"}}, func(ctx context.Context, tx *sql.Tx, _ []inbox.Message) error {
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if seen, _ := in.Seen(ctx, []string{"e", "f"}); len(seen) != 0 {
			t.Fatalf("a failed batch left ids: %v", seen)
		}
		for id, n := range effects(t, db) {
			if n != 1 {
				t.Errorf("%s: %d effects", id, n)
			}
		}
	})
}

// TestConcurrentConsumersOneEffect: two instances of one consumer (one
// name) get the same messages at once, one by one and in batches; every
// id takes effect once.
func TestConcurrentConsumersOneEffect(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		a, b := newInbox(t, db, d, nil), newInbox(t, db, d, nil)
		const n = 200
		var wg sync.WaitGroup
		errs := make(chan error, 4*n)
		for _, in := range []*inbox.Inbox{a, b} {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i := range n {
					id := fmt.Sprint("single-", i)
					_, err := in.Handle(ctx, inbox.Message{ID: id}, func(ctx context.Context, tx *sql.Tx) error { return effect(ctx, tx, d, id) })
					if err != nil {
						errs <- err
					}
				}
			}()
			go func() {
				defer wg.Done()
				for i := 0; i < n; i += 10 {
					var ms []inbox.Message
					for j := i; j < i+10; j++ {
						ms = append(ms, inbox.Message{ID: fmt.Sprint("batch-", j)})
					}
					_, err := in.HandleBatch(ctx, ms, func(ctx context.Context, tx *sql.Tx, fresh []inbox.Message) error {
						for _, m := range fresh {
							if err := effect(ctx, tx, d, m.ID); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := effects(t, db)
		if len(got) != 2*n {
			t.Fatalf("%d ids took effect; want %d", len(got), 2*n)
		}
		for id, c := range got {
			if c != 1 {
				t.Fatalf("%s took effect %d times", id, c)
			}
		}
	})
}

// brokenCache is down: every call fails.
type brokenCache struct{}

func (brokenCache) Contains(context.Context, string) (bool, error) {
	return false, errors.New("cache down")
}
func (brokenCache) Add(context.Context, string, time.Duration) error {
	return errors.New("cache down")
}

// staleCache never remembers anything (an evicting or lagging replica).
type staleCache struct{}

func (staleCache) Contains(context.Context, string) (bool, error)   { return false, nil }
func (staleCache) Add(context.Context, string, time.Duration) error { return nil }

// TestCacheNeverDoubles: whatever the cache says when it does not know —
// stale, flushed, down — a repeat is a Duplicate and takes no effect.
func TestCacheNeverDoubles(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		mem := &inbox.MemoryCache{}
		for _, c := range []struct {
			name  string
			cache inbox.Cache
			reset func()
		}{
			{"memory", mem, func() {}},
			{"flushed", mem, mem.Flush},
			{"stale", staleCache{}, func() {}},
			{"down", brokenCache{}, func() {}},
		} {
			in := newInbox(t, db, d, func(cfg *inbox.Config) { cfg.Cache = c.cache; cfg.Consumer = c.name })
			for i := range 3 {
				c.reset()
				for _, id := range []string{"p", "q"} {
					out, err := in.Handle(ctx, inbox.Message{ID: id}, func(ctx context.Context, tx *sql.Tx) error {
						return effect(ctx, tx, d, c.name+":"+id)
					})
					if err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
					if want := map[bool]inbox.Outcome{true: inbox.Processed, false: inbox.Duplicate}[i == 0]; out != want {
						t.Fatalf("%s round %d %s: %s; want %s", c.name, i, id, out, want)
					}
				}
			}
			// A transaction that rolls back is never cached.
			_, _ = in.Handle(ctx, inbox.Message{ID: "r"}, func(ctx context.Context, tx *sql.Tx) error { return errors.New("no") })
			out, err := in.Handle(ctx, inbox.Message{ID: "r"}, func(ctx context.Context, tx *sql.Tx) error { return effect(ctx, tx, d, c.name+":r") })
			if err != nil || out != inbox.Processed {
				t.Fatalf("%s: after a rollback: %s, %v", c.name, out, err)
			}
		}
		for id, n := range effects(t, db) {
			if n != 1 {
				t.Errorf("%s took effect %d times", id, n)
			}
		}
		if len(effects(t, db)) != 12 {
			t.Errorf("effects %v", effects(t, db))
		}
	})
}

func TestCleanupDeletesExpiredInBatches(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect) {
		ctx := deadline(t)
		in := newInbox(t, db, d, func(c *inbox.Config) { c.TTL = time.Hour; c.CleanupBatch = 7; c.Order = inbox.OrderSkip })
		other := newInbox(t, db, d, func(c *inbox.Config) { c.Consumer = "other"; c.TTL = time.Hour })
		var ms []inbox.Message
		for i := range 30 {
			ms = append(ms, inbox.Message{ID: fmt.Sprint(i)})
		}
		for _, x := range []*inbox.Inbox{in, other} {
			if _, err := x.HandleBatch(ctx, ms, func(context.Context, *sql.Tx, []inbox.Message) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := in.Handle(ctx, inbox.Message{ID: "k", OrderingKey: "key", Sequence: 9}, func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		// Age 25 of the projector's ids, its key mark and all of other's.
		old := outbox.TimeArg(d, time.Now().Add(-2*time.Hour))
		p := func(n int) string { return outbox.Placeholder(d, n) }
		if _, err := db.ExecContext(ctx, `UPDATE herald_inbox SET processed_at = `+p(1)+` WHERE consumer = 'other' OR (message_id <> '0' AND message_id < '5')`, old); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `UPDATE herald_inbox_keys SET processed_at = `+p(1), old); err != nil {
			t.Fatal(err)
		}
		n, err := in.Cleanup(ctx)
		if err != nil || n != 24 {
			t.Fatalf("Cleanup = %d, %v; want 24", n, err)
		}
		var left, keys int
		_ = db.QueryRowContext(ctx, `SELECT count(*) FROM herald_inbox WHERE consumer = 'projector'`).Scan(&left)
		_ = db.QueryRowContext(ctx, `SELECT count(*) FROM herald_inbox_keys`).Scan(&keys)
		if left != 7 || keys != 0 {
			t.Fatalf("left %d ids and %d key marks; want 7 and 0", left, keys)
		}
		if n, _ := other.Cleanup(ctx); n != 30 {
			t.Fatalf("other's Cleanup deleted %d; want 30", n)
		}
		// Start runs it in the background; Stop ends it, twice is fine.
		if err := in.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := in.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := in.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
