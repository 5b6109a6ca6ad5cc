package envelope_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// migrateDialects runs f on a fresh PostgreSQL schema and a fresh SQLite
// file; open returns another handle on the same database, as a second
// process would have.
func migrateDialects(t *testing.T, f func(t *testing.T, d envelope.Dialect, db *sql.DB, open func() *sql.DB)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db, dsn := testkit.Postgres(t)
		f(t, envelope.Postgres, db, func() *sql.DB {
			o, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = o.Close() })
			return o
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dsn := testkit.MattnDSN(testkit.SQLitePath(t))
		open := func() *sql.DB {
			o, err := sql.Open("sqlite3", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = o.Close() })
			return o
		}
		f(t, envelope.SQLite, open(), open)
	})
}

func execScript(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
	}
}

func version(t *testing.T, db *sql.DB, d envelope.Dialect) int {
	t.Helper()
	v, err := envelope.Version(context.Background(), db, d, "")
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	return v
}

// outboxRow is every column of an outbox row, as text, for comparing a
// table before and after a migration.
type outboxRow [15]sql.NullString

func dumpOutbox(t *testing.T, db *sql.DB) []outboxRow {
	t.Helper()
	var cols []string
	for _, c := range envelope.OwnColumns {
		if c != "tenant" { // version 6 adds it
			cols = append(cols, "CAST("+c+" AS TEXT)")
		}
	}
	rows, err := db.Query(`SELECT ` + strings.Join(cols, ", ") + ` FROM herald_outbox ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		dst := make([]any, len(r))
		for i := range r {
			dst[i] = &r[i]
		}
		if err := rows.Scan(dst...); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A table made by the release before versioned migrations (version 1's
// DDL, no record) holding pending, leased, failed, published and
// dead-lettered events is brought to the latest version with nothing
// lost, and a relay then delivers its pending events in order.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, _ func() *sql.DB) {
		ctx := context.Background()
		ms, err := envelope.Migrations(d, "")
		if err != nil {
			t.Fatal(err)
		}
		execScript(t, db, ms[0].Up...)
		if v := version(t, db, d); v != 1 {
			t.Fatalf("a table of version 1's DDL without a record: Version = %d, want 1", v)
		}

		ts := func(offset time.Duration) any {
			return outbox.TimeArg(d, time.Now().Add(offset).UTC().Truncate(time.Microsecond))
		}
		p := func(n int) string { return outbox.Placeholder(d, n) }
		ins := `INSERT INTO herald_outbox (id, topic, payload, headers, ordering_key, idempotency_key, created_at,
    attempts, last_error, next_attempt_at, lease_until, leased_by, published_at, dead_lettered_at)
VALUES (` + p(1) + `, ` + p(2) + `, ` + p(3) + `, ` + p(4) + `, ` + p(5) + `, ` + p(6) + `, ` + p(7) + `, ` + p(8) + `, ` + p(9) + `, ` + p(10) + `, ` + p(11) + `, ` + p(12) + `, ` + p(13) + `, ` + p(14) + `)`
		type row struct {
			topic, key                   string
			attempts                     int
			lastErr                      any
			next, lease, published, dead any
			leasedBy                     any
			idem                         any
		}
		rows := []row{
			{topic: "pub", key: "k1", published: ts(-time.Hour), leasedBy: "old-relay"},       // published
			{topic: "dead", key: "k2", attempts: 25, lastErr: "boom", dead: ts(-time.Minute)}, // dead-lettered: holds k2
			{topic: "p1", key: "k1"}, // pending
			{topic: "leased", key: "k3", lease: ts(-time.Second), leasedBy: "crashed-relay"},      // leased by a relay that died
			{topic: "p2", key: "k1", idem: "once"},                                                // pending
			{topic: "failed", key: "k3", attempts: 2, lastErr: "timeout", next: ts(-time.Second)}, // failed, due again
			{topic: "p3"},              // unordered
			{topic: "held", key: "k2"}, // behind the dead k2
			{topic: "p4", key: "k1"},
		}
		nullable := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		for i, r := range rows {
			id := fmt.Sprintf("0190a5b2-0000-7000-8000-%012d", i)
			payload := fmt.Sprintf(`{"n": %d, "b": "x", "a": [1, 2]}`, i)
			if _, err := db.Exec(ins, id, r.topic, payload, `{"trace": "t`+fmt.Sprint(i)+`"}`, nullable(r.key), r.idem,
				ts(-2*time.Hour), r.attempts, r.lastErr, r.next, r.lease, r.leasedBy, r.published, r.dead); err != nil {
				t.Fatal(err)
			}
		}
		before := dumpOutbox(t, db)

		if err := envelope.Migrate(ctx, db, d, ""); err != nil {
			t.Fatal(err)
		}
		if v := version(t, db, d); v != envelope.LatestVersion {
			t.Fatalf("after Migrate: Version = %d, want %d", v, envelope.LatestVersion)
		}
		if after := dumpOutbox(t, db); !reflect.DeepEqual(before, after) {
			t.Fatalf("rows changed by the migration:\nbefore %v\nafter  %v", before, after)
		}
		if err := envelope.Migrate(ctx, db, d, ""); err != nil { // idempotent
			t.Fatal(err)
		}
		var nrec int
		if err := db.QueryRow(`SELECT count(*) FROM herald_migration WHERE table_name = 'herald_outbox'`).Scan(&nrec); err != nil {
			t.Fatal(err)
		}
		if nrec != envelope.LatestVersion {
			t.Fatalf("herald_migration holds %d versions, want %d", nrec, envelope.LatestVersion)
		}
		// Version 5: the table of paused topics, empty.
		var npaused int
		if err := db.QueryRow(`SELECT count(*) FROM herald_outbox_paused`).Scan(&npaused); err != nil || npaused != 0 {
			t.Fatalf("herald_outbox_paused after Migrate: %d rows, %v; want an empty table", npaused, err)
		}

		var mu sync.Mutex
		var got []string
		payloads := map[string]string{}
		r, err := relay.New(db, delivery.Func(func(_ context.Context, e *envelope.Event) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, e.Topic)
			payloads[e.Topic] = string(e.Payload)
			return nil
		}), relay.Config{MinPollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= 6
		}, "the migrated table's 6 deliverable events delivered")
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		pos := map[string]int{}
		for i, topic := range got {
			if _, dup := pos[topic]; !dup {
				pos[topic] = i
			}
		}
		for _, want := range []string{"p1", "p2", "p3", "p4", "leased", "failed"} {
			if _, ok := pos[want]; !ok {
				t.Errorf("event %q not delivered (got %v)", want, got)
			}
		}
		for _, not := range []string{"pub", "dead", "held"} {
			if _, ok := pos[not]; ok {
				t.Errorf("event %q delivered (got %v)", not, got)
			}
		}
		if pos["p1"] > pos["p2"] || pos["p2"] > pos["p4"] || pos["leased"] > pos["failed"] {
			t.Errorf("per-key order broken: %v", got)
		}
		// The payload is delivered as the table held it before the
		// migration (on PostgreSQL, as version 1's jsonb printed it).
		for i, r := range rows {
			if p, ok := payloads[r.topic]; ok && p != before[i][3].String {
				t.Errorf("event %q delivered payload %s, the table held %s", r.topic, p, before[i][3].String)
			}
		}
	})
}

// Several processes migrating one database at once: each succeeds, the
// table is created once, and every version is recorded once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, open func() *sql.DB) {
		const n = 6
		dbs := make([]*sql.DB, n)
		for i := range dbs {
			dbs[i] = open()
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range dbs {
			wg.Go(func() { errs[i] = envelope.Migrate(context.Background(), dbs[i], d, "") })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("Migrate %d: %v", i, err)
			}
		}
		if v := version(t, db, d); v != envelope.LatestVersion {
			t.Fatalf("Version = %d, want %d", v, envelope.LatestVersion)
		}
		var nrec int
		if err := db.QueryRow(`SELECT count(*) FROM herald_migration`).Scan(&nrec); err != nil {
			t.Fatal(err)
		}
		if nrec != envelope.LatestVersion {
			t.Fatalf("herald_migration holds %d rows, want %d", nrec, envelope.LatestVersion)
		}
	})
}

// MigrateTo goes down a version and up again; the PostgreSQL payload
// column is jsonb at version 1 and json at version 2, rows survive both
// ways, and version 0 drops the table.
func TestMigrateDownAndUp(t *testing.T) {
	t.Parallel()
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, _ func() *sql.DB) {
		ctx := context.Background()
		if err := envelope.Migrate(ctx, db, d, ""); err != nil {
			t.Fatal(err)
		}
		w, err := envelope.NewWriter(d, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: map[string]any{"z": 1, "a": "b"}}}); err != nil {
			t.Fatal(err)
		}
		payloadType := func() string {
			if d != envelope.Postgres {
				return ""
			}
			var typ string
			if err := db.QueryRow(`SELECT pg_typeof(payload)::text FROM herald_outbox`).Scan(&typ); err != nil {
				t.Fatal(err)
			}
			return typ
		}
		if typ := payloadType(); d == envelope.Postgres && typ != "json" {
			t.Fatalf("payload is %s at version 2, want json", typ)
		}
		if err := envelope.MigrateTo(ctx, db, d, "", 1); err != nil {
			t.Fatal(err)
		}
		if v := version(t, db, d); v != 1 {
			t.Fatalf("after MigrateTo 1: Version = %d", v)
		}
		if typ := payloadType(); d == envelope.Postgres && typ != "jsonb" {
			t.Fatalf("payload is %s at version 1, want jsonb", typ)
		}
		if err := envelope.Migrate(ctx, db, d, ""); err != nil {
			t.Fatal(err)
		}
		if v := version(t, db, d); v != envelope.LatestVersion {
			t.Fatalf("after Migrate: Version = %d", v)
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM herald_outbox`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("rows after down and up: %d, %v", n, err)
		}
		if err := envelope.MigrateTo(ctx, db, d, "", 0); err != nil {
			t.Fatal(err)
		}
		if v := version(t, db, d); v != 0 {
			t.Fatalf("after MigrateTo 0: Version = %d", v)
		}
		if err := envelope.MigrateTo(ctx, db, d, "", envelope.LatestVersion+1); !errors.Is(err, envelope.ErrConfiguration) {
			t.Fatalf("MigrateTo %d: %v, want ErrConfiguration", envelope.LatestVersion+1, err)
		}
	})
}

// The scripts of MigrationSQL, run by a migration tool, leave the table
// as Migrate does: Migrate finds every version applied, and the down
// script of the latest version brings it back to the one before.
func TestMigrationSQLScripts(t *testing.T) {
	t.Parallel()
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, _ func() *sql.DB) {
		ctx := context.Background()
		for v := 1; v <= envelope.LatestVersion; v++ {
			s, err := envelope.MigrationSQL(d, "", v, false)
			if err != nil {
				t.Fatal(err)
			}
			execScript(t, db, s)
		}
		if v := version(t, db, d); v != envelope.LatestVersion {
			t.Fatalf("after the up scripts: Version = %d", v)
		}
		if err := envelope.Migrate(ctx, db, d, ""); err != nil {
			t.Fatal(err)
		}
		down, err := envelope.MigrationSQL(d, "", envelope.LatestVersion, true)
		if err != nil {
			t.Fatal(err)
		}
		execScript(t, db, down)
		if v := version(t, db, d); v != envelope.LatestVersion-1 {
			t.Fatalf("after the down script: Version = %d", v)
		}
		if _, err := envelope.MigrationSQL(d, "", 0, false); !errors.Is(err, envelope.ErrConfiguration) {
			t.Fatalf("MigrationSQL version 0: %v", err)
		}
	})
}

// Migrate with the other dialect than the database's says which to pass.
func TestMigrateWrongDialect(t *testing.T) {
	t.Parallel()
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, _ func() *sql.DB) {
		wrong, want := envelope.SQLite, "envelope.Postgres"
		if d == envelope.SQLite {
			wrong, want = envelope.Postgres, "envelope.SQLite"
		}
		err := envelope.Migrate(context.Background(), db, wrong, "")
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "pass "+want) {
			t.Fatalf("Migrate(%s) on %s: %v, want ErrConfiguration saying to pass %s", wrong, d, err, want)
		}
		if _, err := envelope.Version(context.Background(), db, wrong, ""); !errors.Is(err, envelope.ErrConfiguration) {
			t.Fatalf("Version(%s) on %s: %v", wrong, d, err)
		}
	})
}

// The record table's name cannot be the outbox's.
func TestMigrateRejectsRecordTableName(t *testing.T) {
	t.Parallel()
	if _, err := envelope.Migrations(envelope.Postgres, "app.herald_migration"); !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("Migrations(herald_migration): %v", err)
	}
}

// Version 3 adds the relay's index of pending unordered events, and its
// down migration drops it, on both dialects.
func TestMigrateVersion3Index(t *testing.T) {
	t.Parallel()
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, _ func() *sql.DB) {
		ctx := context.Background()
		has := func() bool {
			q := `SELECT count(*) FROM pg_indexes WHERE indexname = 'herald_outbox_pending_unordered_idx' AND schemaname = current_schema()`
			if d == envelope.SQLite {
				q = `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'herald_outbox_pending_unordered_idx'`
			}
			var n int
			if err := db.QueryRow(q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		if err := envelope.MigrateTo(ctx, db, d, "", 2); err != nil {
			t.Fatal(err)
		}
		if has() {
			t.Fatal("the unordered index exists at version 2")
		}
		if err := envelope.Migrate(ctx, db, d, ""); err != nil {
			t.Fatal(err)
		}
		if !has() {
			t.Fatal("no unordered index at version 3")
		}
		if err := envelope.MigrateTo(ctx, db, d, "", 2); err != nil {
			t.Fatal(err)
		}
		if has() {
			t.Fatal("the unordered index survived the down migration to version 2")
		}
	})
}

// Version 4 drops the topic index (and, on PostgreSQL, gives headers a
// json default); its down migration brings both back, on both dialects.
func TestMigrateVersion4TopicIndex(t *testing.T) {
	t.Parallel()
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, _ func() *sql.DB) {
		ctx := context.Background()
		has := func() bool {
			q := `SELECT count(*) FROM pg_indexes WHERE indexname = 'herald_outbox_topic_idx' AND schemaname = current_schema()`
			if d == envelope.SQLite {
				q = `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'herald_outbox_topic_idx'`
			}
			var n int
			if err := db.QueryRow(q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		headersDefault := func() string {
			if d == envelope.SQLite {
				return ""
			}
			var def string
			if err := db.QueryRow(`SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef
WHERE adrelid = to_regclass('herald_outbox') AND adnum = (SELECT attnum FROM pg_attribute WHERE attrelid = adrelid AND attname = 'headers')`).Scan(&def); err != nil {
				t.Fatal(err)
			}
			return def
		}
		if err := envelope.MigrateTo(ctx, db, d, "", 3); err != nil {
			t.Fatal(err)
		}
		if !has() {
			t.Fatal("no topic index at version 3")
		}
		if d == envelope.Postgres && headersDefault() != "'{}'::jsonb" {
			t.Fatalf("headers default at version 3: %s", headersDefault())
		}
		if err := envelope.Migrate(ctx, db, d, ""); err != nil {
			t.Fatal(err)
		}
		if has() {
			t.Fatal("the topic index survived version 4")
		}
		if d == envelope.Postgres && headersDefault() != "'{}'::json" {
			t.Fatalf("headers default at version 4: %s, want '{}'::json", headersDefault())
		}
		if err := envelope.MigrateTo(ctx, db, d, "", 3); err != nil {
			t.Fatal(err)
		}
		if !has() {
			t.Fatal("the down migration to version 3 did not bring the topic index back")
		}
	})
}
