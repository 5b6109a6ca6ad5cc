package envelope_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capturedjson"
	"github.com/heraldgo/herald/internal/testkit"
)

func mysqlOutbox(t *testing.T) (*sql.DB, *envelope.Writer) {
	t.Helper()
	db, _ := testkit.MySQL(t)
	if err := envelope.Migrate(context.Background(), db, envelope.MySQL, ""); err != nil {
		t.Fatal(err)
	}
	w, err := envelope.NewWriter(envelope.MySQL, "")
	if err != nil {
		t.Fatal(err)
	}
	return db, w
}

// The writer skips a stored idempotency key with ON DUPLICATE KEY UPDATE,
// not INSERT IGNORE, which would turn every other error of the statement
// into a warning and store a truncated value.
func TestMySQLIdempotencyNotIgnore(t *testing.T) {
	t.Parallel()
	db, w := mysqlOutbox(t)
	ctx := context.Background()
	if _, err := db.Exec("ALTER TABLE herald_outbox ADD COLUMN region VARCHAR(3)"); err != nil {
		t.Fatal(err)
	}
	first, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 1, IdempotencyKey: "k1"}})
	if err != nil {
		t.Fatal(err)
	}
	// A stored key first, then new ones: the new events' sequences are read
	// back right, the stored one is the stored event.
	res, err := w.Write(ctx, db, []envelope.Message{
		{Topic: "t", Payload: 2, IdempotencyKey: "k1"},
		{Topic: "t", Payload: 3, IdempotencyKey: "k2"},
		{Topic: "t", Payload: 4, IdempotencyKey: "k3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Events[0].Sequence != first.Events[0].Sequence || string(res.Events[0].Payload) != "1" {
		t.Fatalf("stored key: %+v, want event %d", res.Events[0], first.Events[0].Sequence)
	}
	for _, e := range res.Events[1:] {
		var payload string
		if err := db.QueryRow("SELECT payload FROM herald_outbox WHERE sequence = ? AND id = ?", e.Sequence, e.ID.String()).Scan(&payload); err != nil {
			t.Fatalf("event %d (%s) not stored under its sequence: %v", e.Sequence, e.ID, err)
		}
		if payload != string(e.Payload) {
			t.Fatalf("sequence %d holds %s, want %s", e.Sequence, payload, e.Payload)
		}
	}
	if n := count(t, db, ""); n != 3 {
		t.Fatalf("%d events stored, want 3", n)
	}
	// Every key stored: nothing inserted, every event the stored one.
	again, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 9, IdempotencyKey: "k2"}, {Topic: "t", Payload: 9, IdempotencyKey: "k3"}})
	if err != nil || again.Events[0].Sequence != res.Events[1].Sequence || again.Events[1].Sequence != res.Events[2].Sequence || len(again.Topics) != 0 {
		t.Fatalf("all stored: %+v, %v", again, err)
	}
	// A value too long for its column is an error (1406), with or without
	// an idempotency key, and nothing is stored.
	_, err = w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 5, IdempotencyKey: "k4", Extra: map[string]any{"region": "toolong"}}})
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1406 {
		t.Fatalf("value too long with an idempotency key: %v, want error 1406", err)
	}
	if n := count(t, db, "WHERE idempotency_key = 'k4'"); n != 0 {
		t.Fatalf("%d events stored under k4, want 0", n)
	}
}

// Writers of one ordering key that no row lock serializes (Enqueue-like
// writes of a shared key) commit in sequence order: a reader that polls
// the key's events never sees a sequence appear below one it saw before.
// Fails at once without the key-lock rows (envelope.SkipMySQLKeyLocks).
func TestMySQLSharedKeyCommitOrder(t *testing.T) {
	t.Parallel()
	db, w := mysqlOutbox(t)
	testMySQLCommitOrder(t, db, w)
}

func testMySQLCommitOrder(t *testing.T, db *sql.DB, w *envelope.Writer) {
	t.Helper()
	ctx := context.Background()
	db.SetMaxOpenConns(16)
	const writers, each = 6, 25
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					errc <- err
					return
				}
				if _, err := w.Write(ctx, tx, []envelope.Message{{Topic: "t", Payload: g*1000 + i, OrderingKey: "shared"}}); err != nil {
					_ = tx.Rollback()
					errc <- err
					return
				}
				// Work after the event's insert, before the commit: the
				// window in which a later sequence could commit first.
				if _, err := tx.ExecContext(ctx, "DO SLEEP(0.001)"); err != nil {
					_ = tx.Rollback()
					errc <- err
					return
				}
				if err := tx.Commit(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var high int64
	seen := map[int64]bool{}
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true // one last read below
		default:
		}
		var fresh []int64
		for _, s := range sharedKeySequences(ctx, t, db) {
			if !seen[s] {
				fresh = append(fresh, s)
			}
		}
		for _, s := range fresh {
			if s < high {
				<-done
				t.Fatalf("sequence %d appeared after %d: a key's sequence order is not its commit order", s, high)
			}
			seen[s] = true
			high = max(high, s)
		}
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if len(seen) != writers*each {
		t.Fatalf("%d events, want %d", len(seen), writers*each)
	}
}

// The bucket rows exist once Migrate has run, and a key's bucket is
// MySQL's own CRC32(key) MOD 1024, so SQL that writes events can lock the
// same row.
func TestMySQLKeyLockRows(t *testing.T) {
	t.Parallel()
	db, _ := mysqlOutbox(t)
	var n, lo, hi int
	if err := db.QueryRow("SELECT count(*), min(bucket), max(bucket) FROM herald_outbox_keylock").Scan(&n, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if n != 1024 || lo != 0 || hi != 1023 {
		t.Fatalf("key-lock rows: %d from %d to %d, want 1024 from 0 to 1023", n, lo, hi)
	}
	for _, k := range []string{"shared", "library.Loan:1", "ключ", ""} {
		var b int
		if err := db.QueryRow("SELECT CRC32(?) % 1024", k).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if got := envelope.MySQLKeyBucket(k); got != b {
			t.Errorf("bucket of %q: %d, MySQL says %d", k, got, b)
		}
	}
	// Without its rows a keyed write says what to do.
	if _, err := db.Exec("DELETE FROM herald_outbox_keylock"); err != nil {
		t.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.MySQL, "")
	_, err := w.Write(context.Background(), db, []envelope.Message{{Topic: "t", Payload: 1, OrderingKey: "k"}})
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "envelope.Migrate") {
		t.Fatalf("write without key-lock rows: %v, want ErrConfiguration naming envelope.Migrate", err)
	}
}

// The migration's GET_LOCK is released on success and on failure: a lock
// left on a pooled session would block every later migration.
func TestMySQLMigrateLockReleased(t *testing.T) {
	t.Parallel()
	db, _ := testkit.MySQL(t)
	ctx := context.Background()
	free := func() bool {
		var f sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT IS_FREE_LOCK('herald:migrate')").Scan(&f); err != nil {
			t.Fatal(err)
		}
		// Another test's migration may hold it for a moment; mine never
		// keeps it: ask until it is free.
		return f.Int64 == 1
	}
	if err := envelope.Migrate(ctx, db, envelope.MySQL, "ok_outbox"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, free, "GET_LOCK held after a migration that succeeded")
	// A key-lock table of another shape makes version 1 fail halfway.
	if _, err := db.ExecContext(ctx, "CREATE TABLE bad_outbox_keylock (other INT)"); err != nil {
		t.Fatal(err)
	}
	if err := envelope.Migrate(ctx, db, envelope.MySQL, "bad_outbox"); err == nil {
		t.Fatal("Migrate over a foreign bad_outbox_keylock succeeded")
	}
	testkit.Eventually(t, 30*time.Second, free, "GET_LOCK held after a migration that failed")
	// Many at once: one creates, the others find it done.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = envelope.Migrate(ctx, db, envelope.MySQL, "") }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if v, err := envelope.Version(ctx, db, envelope.MySQL, ""); err != nil || v != envelope.LatestMySQLVersion {
		t.Fatalf("Version %d, %v; want %d", v, err, envelope.LatestMySQLVersion)
	}
	if err := envelope.MigrateTo(ctx, db, envelope.MySQL, "", 0); err != nil {
		t.Fatal(err)
	}
	if v, err := envelope.Version(ctx, db, envelope.MySQL, ""); err != nil || v != 0 {
		t.Fatalf("after MigrateTo 0: version %d, %v", v, err)
	}
	err := envelope.MigrateTo(ctx, db, envelope.MySQL, "", envelope.LatestMySQLVersion+1)
	if !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("MigrateTo past the latest on MySQL: %v, want ErrConfiguration", err)
	}
}

// The wrong dialect for the database is a configuration error naming the
// right one, in both directions.
func TestMySQLWrongDialect(t *testing.T) {
	t.Parallel()
	db, _ := testkit.MySQL(t)
	err := envelope.Migrate(context.Background(), db, envelope.Postgres, "")
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "envelope.MySQL") {
		t.Fatalf("Postgres on MariaDB: %v", err)
	}
	pg, _ := testkit.Postgres(t)
	err = envelope.Migrate(context.Background(), pg, envelope.MySQL, "")
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "envelope.Postgres") {
		t.Fatalf("MySQL on PostgreSQL: %v", err)
	}
}

// The payload's bytes are stored and read back as written: LONGTEXT, not
// MySQL's JSON type, which reorders keys and adds spaces.
func TestMySQLPayloadBytes(t *testing.T) {
	t.Parallel()
	db, w := mysqlOutbox(t)
	raw := `{"z":1,"a":{"y":[1,2],"b":"x"}}`
	res, err := w.Write(context.Background(), db, []envelope.Message{{Topic: "t", Payload: capturedjson.JSON(raw)}})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := db.QueryRow("SELECT payload FROM herald_outbox WHERE sequence = ?", res.Events[0].Sequence).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != raw {
		t.Fatalf("payload stored as %s, want %s", got, raw)
	}
	_, err = db.Exec("INSERT INTO herald_outbox (id, topic, payload) VALUES (?, 't', '{not json')", "00000000-0000-7000-8000-000000000000")
	if err == nil {
		t.Fatal("a payload that is not JSON was stored")
	}
}

// sharedKeySequences reads the sequences of key 'shared', in order.
func sharedKeySequences(ctx context.Context, t *testing.T, db *sql.DB) []int64 {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT sequence FROM herald_outbox WHERE ordering_key = 'shared' ORDER BY sequence")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// Version 3 redefines {base}_pending_key_idx as (published_at,
// ordering_key, sequence), and its down migration restores version 2's
// (ordering_key, published_at).
func TestMySQLPendingKeyIndexVersion3(t *testing.T) {
	t.Parallel()
	db, _ := testkit.MySQL(t)
	ctx := context.Background()
	columns := func() string {
		t.Helper()
		var cols string
		if err := db.QueryRowContext(ctx, `SELECT GROUP_CONCAT(column_name ORDER BY seq_in_index) FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = 'herald_outbox' AND index_name = 'herald_outbox_pending_key_idx'`).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		return cols
	}
	if err := envelope.MigrateTo(ctx, db, envelope.MySQL, "", 2); err != nil {
		t.Fatal(err)
	}
	if got := columns(); got != "ordering_key,published_at" {
		t.Fatalf("version 2: pending_key_idx on %s", got)
	}
	if err := envelope.Migrate(ctx, db, envelope.MySQL, ""); err != nil {
		t.Fatal(err)
	}
	if got := columns(); got != "published_at,ordering_key,sequence" {
		t.Fatalf("version 3: pending_key_idx on %s, want published_at,ordering_key,sequence", got)
	}
	if err := envelope.MigrateTo(ctx, db, envelope.MySQL, "", 2); err != nil {
		t.Fatal(err)
	}
	if got := columns(); got != "ordering_key,published_at" {
		t.Fatalf("down to version 2: pending_key_idx on %s", got)
	}
}

// TestMySQLReadBackScales: the statement that reads back a chunk's
// sequences looks the rows of its sequence range up in the materialized
// ids. With the ids' JSON_TABLE column declared utf8mb4 against the
// table's ascii id column, MariaDB joined them by a block nested loop
// over the JSON document instead — quadratic in the chunk: a write of
// 5,000 events took 4.7 s, one of 65,545 (TestResendManyIdempotencyKeys)
// 97 s. The plan, not a time, is asserted: no join buffer, no FirstMatch.
func TestMySQLReadBackScales(t *testing.T) {
	t.Parallel()
	db, w := mysqlOutbox(t)
	ctx := context.Background()
	ms := make([]envelope.Message, 3000)
	for i := range ms {
		ms[i] = envelope.Message{Topic: "t", Payload: i}
	}
	res, err := w.Write(ctx, db, ms)
	if err != nil {
		t.Fatal(err)
	}
	var ids strings.Builder
	ids.WriteByte('[')
	for i, e := range res.Events {
		if i > 0 {
			ids.WriteByte(',')
		}
		fmt.Fprintf(&ids, "%q", e.ID.String())
	}
	ids.WriteByte(']')
	plan := testkit.QueryText(t, db, "EXPLAIN "+envelope.MySQLReadBack("herald_outbox"), res.Events[0].Sequence, ids.String())
	if strings.Contains(plan, "join buffer") || strings.Contains(plan, "FirstMatch") {
		t.Fatalf("the read-back joins the sequence range to the ids by a nested loop:\n%s", plan)
	}
	if strings.Count(plan, "\n") < 2 {
		t.Fatalf("EXPLAIN returned no plan:\n%s", plan)
	}
}
