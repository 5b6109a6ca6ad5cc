package envelope

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/heraldgo/herald/internal/tablemigrate"
)

// The outbox table's schema is versioned, as River's rivermigrate versions
// its tables: each version is a Migration with the statements that bring
// the table from the version before it (Up) and back (Down), and the
// versions applied to a table are recorded in the table MigrationTable, in
// the outbox table's schema, one row per (table_name, version).
//
// Migrate brings a table of any older version (or none) to LatestVersion in
// one transaction, under a lock (a PostgreSQL advisory lock; on SQLite a
// BEGIN IMMEDIATE transaction, which holds the database's write lock), so
// any number of processes may call it at once: the first applies what is
// missing, the others find it applied. A table created by a herald release
// before versioning has no record; Migrate recognises its layout and records
// the version it has before going on.
//
// Teams that run goose, atlas or golang-migrate take the SQL of each
// version from MigrationSQL (or `go run
// github.com/heraldgo/herald/cmd/herald-migrate -dialect postgres -print`):
// each script records its version in MigrationTable too, so a table
// migrated by scripts and one migrated by Migrate stay interchangeable.

// MigrationTable records the versions applied to each outbox table of a
// schema (PostgreSQL) or database (SQLite).
const MigrationTable = "herald_migration"

// LatestVersion is the outbox table's current schema version: what Migrate
// brings every table to, and what the writer and the relay of this release
// expect.
const LatestVersion = 6

// Migration is one version of the outbox table's schema, its statements
// rendered for a dialect and table.
type Migration struct {
	Version int
	Name    string   // what the version changes, in a few words
	Up      []string // the statements from Version-1 to Version
	Down    []string // the statements from Version back to Version-1
}

// migrationSource is a version's statements before rendering; "" for a
// dialect means the version changes nothing there (it is still recorded).
type migrationSource struct {
	version                      int
	name                         string
	pgUp, pgDown, liteUp, liteDn string
}

// The versions, oldest first.
//
// Version 2: payload and headers JSON instead of JSONB on PostgreSQL. A
// jsonb value is stored parsed and printed back normalised — keys sorted
// by length then bytes, duplicates dropped, a space after ':' and ','
// — so a receiver that signs, hashes or compares the payload got other
// bytes from PostgreSQL than from SQLite, and other bytes than the writer
// produced. json stores the text as given (checked valid on insert), so
// the relay delivers exactly the writer's bytes on both dialects. It also
// inserts faster: no conversion to the binary form (BENCHMARKS.md, "Payload
// column"). What is lost: jsonb's operators and GIN indexing on payload
// (payload @> '{…}', ? and ?| and jsonb_path_*), which herald never uses;
// a query of the table that needs them casts (payload::jsonb). The ALTER
// rewrites the table under an ACCESS EXCLUSIVE lock: on a large table run
// it at a quiet moment, after cleaning up published events. SQLite keeps
// JSON as TEXT in both versions, so the version changes nothing there.
//
// Version 3: a partial index of the pending unordered events. The relay's
// lease takes its candidates from bounded sources so that its cost does
// not grow with a backlog held back behind few ordering keys (the relay
// package documentation); one source is "the first BatchSize pending
// unordered events", which without this index walks every pending keyed
// event before it — and whose estimated cost, on a large table, is enough
// to make PostgreSQL JIT-compile every lease (measured: 63 ms of a 72 ms
// lease). The index holds unordered pending rows only, so keyed inserts
// pay nothing for it. CREATE INDEX (not CONCURRENTLY: Migrate runs in a
// transaction) blocks writes to the table while it builds; on a large
// table run it after cleaning up published events.
//
// Version 4: no topic index, and headers' default json. The index
// (topic, sequence) of pending events was one of the four an event's insert
// updates (with the primary key, the pending index and the pending-key
// index), and nothing reads it: the relay's topic filter is checked on the
// lease's candidates, which come from the pending indexes, and its backlog
// count walks the pending index. Dropping it makes every insert cheaper —
// a bulk capture's 10,000 events measurably (BENCHMARKS.md, "Capture
// (GORM)", bulk rows). headers kept version 1's jsonb default through
// version 2's change of type, a jsonb-to-json cast per inserted row that
// does not give its headers; the default is now '{}' as json. Both are
// catalog changes: no rewrite, no lock held for long.
//
// Version 5: the table of paused topics, {base}_paused (Table.PausedTable).
// An operator pauses a topic during an incident at its receiver (the admin
// package); the relay's lease skips the events of a paused topic (NOT
// EXISTS, one primary-key probe per candidate), so they wait, undelivered
// and not dead-lettered, until the topic is resumed. Kept in the database,
// so every relay of the table obeys it. A new, empty table: nothing is
// rewritten.
//
// Version 6: the tenant column (Message.Tenant, Options.Tenant), NOT NULL
// DEFAULT the empty string (no tenant), on every table: adding a column with a
// constant default is a catalog change on PostgreSQL (11+) and SQLite, and
// an event without a tenant costs nothing more. The idempotency key's
// unique index becomes (tenant, idempotency_key) — keys unique per tenant,
// which for a service without tenants (empty everywhere) is the old rule —
// and {base}_pending_tenant_idx, partial on a non-empty tenant, serves relays
// limited to tenants (relay.Config.Tenants) and is not touched by events
// without one. Down fails if two tenants hold one key.
var migrationSources = []migrationSource{
	{
		version: 1, name: "create the outbox table",
		pgUp: postgresV1, pgDown: `DROP TABLE IF EXISTS {table}`,
		liteUp: sqliteV1, liteDn: `DROP TABLE IF EXISTS {table}`,
	},
	{
		version: 2, name: "payload and headers as json, not jsonb (the writer's bytes, unchanged)",
		pgUp: `ALTER TABLE {table} ALTER COLUMN payload TYPE JSON USING payload::json,
    ALTER COLUMN headers TYPE JSON USING headers::json`,
		pgDown: `ALTER TABLE {table} ALTER COLUMN payload TYPE JSONB USING payload::jsonb,
    ALTER COLUMN headers TYPE JSONB USING headers::jsonb`,
	},
	{
		version: 3, name: "index of pending unordered events (the relay's lease)",
		pgUp: `CREATE INDEX IF NOT EXISTS {base}_pending_unordered_idx ON {table} (sequence)
    WHERE published_at IS NULL AND ordering_key IS NULL`,
		pgDown: `DROP INDEX IF EXISTS {schema}{base}_pending_unordered_idx`,
		liteUp: `CREATE INDEX IF NOT EXISTS {base}_pending_unordered_idx ON {table} (sequence)
    WHERE published_at IS NULL AND ordering_key IS NULL`,
		liteDn: `DROP INDEX IF EXISTS {base}_pending_unordered_idx`,
	},
	{
		version: 4, name: "no topic index (nothing reads it; every insert paid for it), headers default '{}' as json",
		pgUp: `DROP INDEX IF EXISTS {schema}{base}_topic_idx;
ALTER TABLE {table} ALTER COLUMN headers SET DEFAULT '{}'::json`,
		pgDown: `CREATE INDEX IF NOT EXISTS {base}_topic_idx ON {table} (topic, sequence)
    WHERE published_at IS NULL;
ALTER TABLE {table} ALTER COLUMN headers SET DEFAULT '{}'::jsonb`,
		liteUp: `DROP INDEX IF EXISTS {base}_topic_idx`,
		liteDn: `CREATE INDEX IF NOT EXISTS {base}_topic_idx ON {table} (topic, sequence)
    WHERE published_at IS NULL`,
	},
	{
		version: 5, name: "table of paused topics (the relay leases none of their events)",
		pgUp: `CREATE TABLE IF NOT EXISTS {paused} (
    topic     VARCHAR(255) PRIMARY KEY,
    paused_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    reason    TEXT NOT NULL DEFAULT ''
)`,
		pgDown: `DROP TABLE IF EXISTS {paused}`,
		liteUp: `CREATE TABLE IF NOT EXISTS {paused} (
    topic     TEXT PRIMARY KEY,
    paused_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    reason    TEXT NOT NULL DEFAULT ''
)`,
		liteDn: `DROP TABLE IF EXISTS {paused}`,
	},
	{
		version: 6, name: "tenant column; idempotency keys unique per tenant",
		pgUp: `ALTER TABLE {table} ADD COLUMN IF NOT EXISTS tenant VARCHAR(255) NOT NULL DEFAULT '';
CREATE UNIQUE INDEX IF NOT EXISTS {base}_tenant_idempotency_key_idx ON {table} (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS {schema}{base}_idempotency_key_idx;
CREATE INDEX IF NOT EXISTS {base}_pending_tenant_idx ON {table} (tenant, sequence)
    WHERE published_at IS NULL AND tenant <> ''`,
		pgDown: `DROP INDEX IF EXISTS {schema}{base}_pending_tenant_idx;
CREATE UNIQUE INDEX IF NOT EXISTS {base}_idempotency_key_idx ON {table} (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS {schema}{base}_tenant_idempotency_key_idx;
ALTER TABLE {table} DROP COLUMN IF EXISTS tenant`,
		liteUp: `ALTER TABLE {table} ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX IF NOT EXISTS {base}_tenant_idempotency_key_idx ON {table} (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS {base}_idempotency_key_idx;
CREATE INDEX IF NOT EXISTS {base}_pending_tenant_idx ON {table} (tenant, sequence)
    WHERE published_at IS NULL AND tenant <> ''`,
		liteDn: `DROP INDEX IF EXISTS {base}_pending_tenant_idx;
CREATE UNIQUE INDEX IF NOT EXISTS {base}_idempotency_key_idx ON {table} (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS {base}_tenant_idempotency_key_idx;
ALTER TABLE {table} DROP COLUMN tenant`,
	},
}

// migrations returns every version of the outbox table's schema, oldest
// first, rendered for the dialect and table ("" means DefaultTable).
func migrations(d Dialect, table string) ([]Migration, error) {
	t, err := parseOutbox(d, table)
	if err != nil {
		return nil, err
	}
	sources := migrationSources
	if d == MySQL {
		sources = mysqlMigrationSources // pgUp and pgDown hold MySQL's statements
	}
	out := make([]Migration, len(sources))
	for i, m := range sources {
		up, down := m.liteUp, m.liteDn
		if d == Postgres || d == MySQL {
			up, down = m.pgUp, m.pgDown
		}
		out[i] = Migration{Version: m.version, Name: m.name, Up: render(up, t), Down: render(down, t)}
	}
	return out, nil
}

func parseOutbox(d Dialect, table string) (Table, error) {
	if err := d.Validate(); err != nil {
		return Table{}, err
	}
	t, err := ParseTable(d, table)
	if err != nil {
		return Table{}, err
	}
	if t.Base == MigrationTable || strings.HasSuffix(t.Name, "."+MigrationTable) {
		return Table{}, configurationf("Table", "%q is herald's record of migrations; name the outbox table otherwise", t.Name)
	}
	return t, nil
}

// render fills a statement template and splits it into statements.
func render(src string, t Table) []string {
	schema := "" // the quoted schema and a dot, for a schema-qualified table
	if i := strings.LastIndex(t.Quoted, `"."`); i >= 0 {
		schema = t.Quoted[:i+2]
	}
	src = strings.NewReplacer("{table}", t.Quoted, "{base}", t.Base, "{schema}", schema, "{paused}", t.pausedTable(),
		"{keylock}", t.keyLockTable(), "{buckets}", mysqlBucketRows).Replace(src)
	var out []string
	for _, s := range strings.Split(src, ";\n") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// MigrationSQL returns the SQL script of one version for migration tools
// (goose, atlas, golang-migrate): its Up statements (or, with down, its
// Down statements) and the statements that keep MigrationTable's record,
// so that Migrate, run later on the same table, finds the version applied.
func MigrationSQL(d Dialect, table string, version int, down bool) (string, error) {
	ms, err := migrations(d, table)
	if err != nil {
		return "", err
	}
	if version < 1 || version > len(ms) {
		return "", configurationf("version", "%d: herald's %s outbox versions are 1 to %d", version, d, LatestVersionFor(d))
	}
	t, _ := ParseTable(d, table)
	return tablemigrate.Script(string(d), tablemigrate.Table(t), "outbox", tablemigrate.Migration(ms[version-1]), down), nil
}

// Migrate brings the outbox table to LatestVersion, creating it when it
// does not exist, in one transaction under a lock; see MigrateTo. table ""
// means DefaultTable.
//
// It checks the table against MigrationTable's record: a table dropped
// without MigrateTo(0) (by hand, by a test, left out of a restore) while
// its record stayed is created again at LatestVersion and its record
// rewritten, instead of being trusted to exist.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	return MigrateTo(ctx, db, d, table, LatestVersionFor(d))
}

// MigrateTo brings the outbox table to version: up through every version
// it lacks, or down (version < the applied one) through each version's
// Down statements; version 0 drops the table. All of it runs in one
// transaction under a lock — a PostgreSQL transaction-level advisory lock,
// an IMMEDIATE transaction on SQLite — so it is idempotent and safe to run
// from several processes at once.
//
// A d that is not the database's dialect is an ErrConfiguration naming
// both; a database that cannot be reached is returned as it is.
func MigrateTo(ctx context.Context, db *sql.DB, d Dialect, table string, version int) error {
	t, err := parseOutbox(d, table)
	if err != nil {
		return err
	}
	if version < 0 || version > LatestVersionFor(d) {
		return configurationf("version", "%d: herald's %s outbox versions are 0 (no table) to %d", version, d, LatestVersionFor(d))
	}
	ms, _ := migrations(d, table)
	return migrateErr(tablemigrate.Migrate(ctx, db, string(d), tablemigrate.Table(t), toMigrations(ms), version, unrecordedVersion))
}

// Version returns the schema version of the outbox table: 0 when it does
// not exist (whatever MigrationTable records), LatestVersion when it is up
// to date. A table created before
// versions were recorded is recognised by its layout.
func Version(ctx context.Context, db *sql.DB, d Dialect, table string) (int, error) {
	t, err := parseOutbox(d, table)
	if err != nil {
		return 0, err
	}
	v, err := tablemigrate.Version(ctx, db, string(d), tablemigrate.Table(t), unrecordedVersion)
	return v, migrateErr(err)
}

// unrecordedVersion tells the version of a table no record describes: 0
// when it does not exist; on PostgreSQL 2 when its payload is json (the
// scripts of version 2 applied by hand without their record), else 1; on
// SQLite 1 (version 2 changes nothing there). Version 1's statements are
// all IF NOT EXISTS, so running them again on a table made by a
// development build before the first release adds what it lacks.
func unrecordedVersion(ctx context.Context, conn *sql.Conn, d string, t tablemigrate.Table) (int, error) {
	exists, err := tablemigrate.TableExists(ctx, conn, d, t.Quoted, t.Name)
	if err != nil || !exists {
		return 0, err
	}
	if d != string(Postgres) {
		return 1, nil
	}
	var typ string
	err = conn.QueryRowContext(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname = 'payload' AND NOT attisdropped`, t.Quoted).Scan(&typ)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, configurationf("Table", "%s exists but has no payload column: it is not a herald outbox table", t.Name)
	}
	if err != nil {
		return 0, err
	}
	if typ == "json" {
		return 2, nil
	}
	return 1, nil
}

// toMigrations is ms as tablemigrate's.
func toMigrations(ms []Migration) []tablemigrate.Migration {
	out := make([]tablemigrate.Migration, len(ms))
	for i, m := range ms {
		out[i] = tablemigrate.Migration(m)
	}
	return out
}

// migrateErr makes a migration's wrong-dialect answer an ErrConfiguration
// about "Dialect"; any other error is returned as it is.
func migrateErr(err error) error {
	var de *tablemigrate.DialectError
	if errors.As(err, &de) {
		return &Error{Kind: ErrConfiguration, Where: "Dialect", Msg: de.Msg, Err: de.Err}
	}
	return err
}
