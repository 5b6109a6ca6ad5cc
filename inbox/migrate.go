package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// DefaultTable is the inbox table's name when none is given.
const DefaultTable = "herald_inbox"

// LatestVersion is the inbox table's current schema version: what Migrate
// brings it to, and what this release's Inbox expects.
const LatestVersion = 2

// The inbox's versions, oldest first. They are recorded in
// envelope.MigrationTable under the inbox table's name, beside the outbox
// table's own record, so `herald migrate status` reads both the same way.
//
// Version 1: the table of processed ids, one row per (consumer, message
// id). The primary key is what makes a repeat a duplicate: a second
// INSERT of the same pair does nothing, and while the first one's
// transaction is open, a second one waits for it (PostgreSQL's unique
// index; SQLite's database lock) and then does nothing, or inserts if the
// first rolled back. processed_at is what cleanup deletes by; result is
// what a handler chose to keep (webhookinbox keeps the first answer's
// status). On SQLite the table is WITHOUT ROWID: the primary key is the
// table, one B-tree instead of a rowid table and an index beside it.
//
// Version 2: the per-key high-water marks, {base}_keys: the highest
// sequence processed for each (consumer, ordering key), which OrderSkip
// and OrderFlag compare a message's sequence with.
//
// On MySQL and MariaDB (the same two versions): InnoDB, utf8mb4 with the
// binary collation utf8mb4_bin (ids compare byte for byte, as on the other
// dialects, whatever the server's default collation), times DATETIME(6) in
// UTC (UTC_TIMESTAMP(6), whatever the session's time_zone), and a column
// claim that the inbox table has on MySQL only: the token of the
// ClaimBatch that inserted the row, because MySQL has no RETURNING to say
// which of a batch's ids were new.
var migrationSources = []struct {
	name                         string
	pgUp, pgDown, liteUp, liteDn string
	myUp, myDown                 string
}{
	{
		name: "create the inbox table (processed message ids per consumer)",
		pgUp: `CREATE TABLE IF NOT EXISTS {table} (
    consumer     VARCHAR(255) NOT NULL,
    message_id   VARCHAR(255) NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    result       TEXT,
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS {base}_processed_idx ON {table} (processed_at)`,
		pgDown: `DROP TABLE IF EXISTS {table}`,
		liteUp: `CREATE TABLE IF NOT EXISTS {table} (
    consumer     TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    result       TEXT,
    PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {base}_processed_idx ON {table} (processed_at)`,
		liteDn: `DROP TABLE IF EXISTS {table}`,
		myUp: `CREATE TABLE IF NOT EXISTS {table} (
    consumer     VARCHAR(255) NOT NULL,
    message_id   VARCHAR(255) NOT NULL,
    processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    result       LONGTEXT,
    claim        BIGINT,
    PRIMARY KEY (consumer, message_id),
    KEY {base}_processed_idx (processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		myDown: `DROP TABLE IF EXISTS {table}`,
	},
	{
		name: "per-key high-water marks (consumer-side order)",
		pgUp: `CREATE TABLE IF NOT EXISTS {keys} (
    consumer     VARCHAR(255) NOT NULL,
    ordering_key VARCHAR(255) NOT NULL,
    sequence     BIGINT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, ordering_key)
)`,
		pgDown: `DROP TABLE IF EXISTS {keys}`,
		liteUp: `CREATE TABLE IF NOT EXISTS {keys} (
    consumer     TEXT NOT NULL,
    ordering_key TEXT NOT NULL,
    sequence     INTEGER NOT NULL,
    processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (consumer, ordering_key)
) WITHOUT ROWID`,
		liteDn: `DROP TABLE IF EXISTS {keys}`,
		myUp: `CREATE TABLE IF NOT EXISTS {keys} (
    consumer     VARCHAR(255) NOT NULL,
    ordering_key VARCHAR(255) NOT NULL,
    sequence     BIGINT NOT NULL,
    processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (consumer, ordering_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		myDown: `DROP TABLE IF EXISTS {keys}`,
	},
}

// table is a validated inbox table name and its keys table.
type table struct {
	envelope.Table
	keys string // {schema}"{base}_keys", quoted for SQL
}

func parseTable(d envelope.Dialect, name string) (table, error) {
	if err := d.Validate(); err != nil {
		return table{}, err
	}
	if d != envelope.Postgres && d != envelope.SQLite && d != envelope.MySQL {
		return table{}, &envelope.Error{Kind: envelope.ErrUnsupported, Where: "inbox",
			Msg: fmt.Sprintf("the inbox supports PostgreSQL, SQLite and MySQL; not %s", d)}
	}
	if name == "" {
		name = DefaultTable
	}
	t, err := envelope.ParseTable(d, name)
	if err != nil {
		return table{}, err
	}
	if t.Base == envelope.MigrationTable {
		return table{}, outbox.Configurationf("Table", "%q is herald's record of migrations; name the inbox table otherwise", t.Name)
	}
	return table{Table: t, keys: schemaPrefix(t) + d.QuoteIdent(t.Base+"_keys")}, nil
}

func schemaPrefix(t envelope.Table) string {
	if i := strings.LastIndex(t.Quoted, `"."`); i >= 0 {
		return t.Quoted[:i+2]
	}
	return ""
}

// Migrations returns every version of the inbox table's schema, oldest
// first, rendered for the dialect and table ("" means DefaultTable).
func Migrations(d envelope.Dialect, tableName string) ([]envelope.Migration, error) {
	t, err := parseTable(d, tableName)
	if err != nil {
		return nil, err
	}
	out := make([]envelope.Migration, len(migrationSources))
	for i, m := range migrationSources {
		up, down := m.liteUp, m.liteDn
		switch d {
		case envelope.Postgres:
			up, down = m.pgUp, m.pgDown
		case envelope.MySQL:
			up, down = m.myUp, m.myDown
		}
		out[i] = envelope.Migration{Version: i + 1, Name: m.name, Up: render(up, t), Down: render(down, t)}
	}
	return out, nil
}

func render(src string, t table) []string {
	src = strings.NewReplacer("{table}", t.Quoted, "{base}", t.Base, "{keys}", t.keys).Replace(src)
	var out []string
	for _, s := range strings.Split(src, ";\n") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// DDL returns the statements that create the inbox tables at
// LatestVersion (the version record left out; MigrationSQL keeps it).
func DDL(d envelope.Dialect, tableName string) ([]string, error) {
	ms, err := Migrations(d, tableName)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Up...)
	}
	return out, nil
}

// MigrationSQL returns the SQL script of one inbox version for migration
// tools (goose, atlas, golang-migrate): its Up statements (with down, its
// Down statements) and the statements that keep envelope.MigrationTable's
// record, so Migrate, run later, finds the version applied.
func MigrationSQL(d envelope.Dialect, tableName string, version int, down bool) (string, error) {
	ms, err := Migrations(d, tableName)
	if err != nil {
		return "", err
	}
	t, _ := parseTable(d, tableName)
	return outbox.TableMigrationSQL(d, t.Table, "inbox", ms, version, down)
}

// Migrate brings the inbox tables to LatestVersion, creating them when
// they do not exist, in one transaction under herald's migration lock:
// any number of processes may call it at once. tableName "" means
// DefaultTable.
func Migrate(ctx context.Context, db *sql.DB, d envelope.Dialect, tableName string) error {
	return MigrateTo(ctx, db, d, tableName, LatestVersion)
}

// MigrateTo brings the inbox tables up or down to version; 0 drops them.
func MigrateTo(ctx context.Context, db *sql.DB, d envelope.Dialect, tableName string, version int) error {
	ms, err := Migrations(d, tableName)
	if err != nil {
		return err
	}
	t, _ := parseTable(d, tableName)
	return outbox.MigrateTable(ctx, db, d, t.Table, ms, version)
}

// Version returns the inbox table's schema version: 0 when it does not
// exist, LatestVersion when it is up to date.
func Version(ctx context.Context, db *sql.DB, d envelope.Dialect, tableName string) (int, error) {
	t, err := parseTable(d, tableName)
	if err != nil {
		return 0, err
	}
	return outbox.TableVersion(ctx, db, d, t.Table)
}
