package envelope

import (
	"strconv"
	"strings"
)

// LatestMySQLVersion is the MySQL outbox table's current schema version.
// MySQL has a version history of its own: its first version is the table
// PostgreSQL and SQLite reached in five (LatestVersion), written for MySQL;
// version 2 is their version 6 (the tenant column); version 3 redefines
// {base}_pending_key_idx for the relay's lease.
const LatestMySQLVersion = 3

// LatestVersionFor is the current schema version of the dialect's outbox
// table: LatestMySQLVersion on MySQL, LatestVersion elsewhere.
func LatestVersionFor(d Dialect) int {
	if d == MySQL {
		return LatestMySQLVersion
	}
	return LatestVersion
}

// Version 1 of the MySQL (and MariaDB) table.
//
//   - InnoDB (row locks, SKIP LOCKED, transactional DDL is not needed),
//     utf8mb4 with the binary collation utf8mb4_bin: topics, ordering and
//     idempotency keys compare byte for byte, as on PostgreSQL and SQLite,
//     whatever the server's default collation (MySQL 8's
//     utf8mb4_0900_ai_ci, MariaDB's utf8mb4_general_ci, would make "A" and
//     "a" one idempotency key).
//   - payload and headers are LONGTEXT CHECK (JSON_VALID(…)), not the JSON
//     type: MySQL's JSON stores the value parsed and prints it back
//     normalised (keys sorted, a space after ':' and ','), so a receiver
//     would get other bytes than the writer produced and than PostgreSQL
//     and SQLite deliver — the reason PostgreSQL's version 2 left jsonb.
//     MariaDB's JSON type is this same LONGTEXT with the check.
//   - Times are DATETIME(6) in UTC: the writer binds UTC times and the
//     relay's statements use UTC_TIMESTAMP(6), whatever the session's
//     time_zone (TIMESTAMP would convert through it, and ends in 2038).
//   - MySQL has no partial indexes. (published_at, dead_lettered_at) stands
//     in for the pending index (InnoDB appends the primary key to every
//     secondary index, so "published_at IS NULL AND dead_lettered_at IS
//     NULL ORDER BY sequence" is one index range in sequence order) and
//     also serves cleanup's published_at range; (ordering_key,
//     published_at) for the pending events of a key (version 3 makes it
//     (published_at, ordering_key, sequence): mysqlV3); (dead_lettered_at) for
//     the dead letters. The idempotency key's unique index holds the NULLs
//     too (InnoDB allows any number of them in a unique index).
//   - {base}_keylock holds mysqlKeyLockBuckets rows the writer locks to
//     keep each key's sequence order its commit order (see
//     mysqlKeyLockBuckets); {base}_paused is the table of paused topics.
//
// Every statement is CREATE TABLE IF NOT EXISTS with its indexes inline
// (MySQL 8 has no CREATE INDEX IF NOT EXISTS), so running it again is
// harmless: MySQL's DDL commits implicitly and a migration cannot be rolled
// back, so a run that stopped halfway is finished by the next.
const mysqlV1 = `CREATE TABLE IF NOT EXISTS {table} (
    sequence         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id               CHAR(36) CHARACTER SET ascii NOT NULL,
    topic            VARCHAR(255) NOT NULL,
    payload          LONGTEXT NOT NULL CHECK (JSON_VALID(payload)),
    headers          LONGTEXT NOT NULL DEFAULT ('{}') CHECK (JSON_VALID(headers)),
    ordering_key     VARCHAR(255),
    idempotency_key  VARCHAR(255),
    created_at       DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    next_attempt_at  DATETIME(6),
    lease_until      DATETIME(6),
    leased_by        VARCHAR(255),
    published_at     DATETIME(6),
    dead_lettered_at DATETIME(6),
    UNIQUE KEY {base}_idempotency_key_idx (idempotency_key),
    KEY {base}_pending_idx (published_at, dead_lettered_at),
    KEY {base}_pending_key_idx (ordering_key, published_at),
    KEY {base}_dead_lettered_idx (dead_lettered_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS {paused} (
    topic     VARCHAR(255) NOT NULL PRIMARY KEY,
    paused_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    reason    TEXT NOT NULL DEFAULT ('')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS {keylock} (
    bucket SMALLINT NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
INSERT INTO {keylock} (bucket) VALUES {buckets} ON DUPLICATE KEY UPDATE bucket = bucket
`

var mysqlMigrationSources = []migrationSource{
	{
		version: 1, name: "create the outbox table, its key-lock rows and the table of paused topics",
		pgUp:   mysqlV1,
		pgDown: "DROP TABLE IF EXISTS {keylock};\nDROP TABLE IF EXISTS {paused};\nDROP TABLE IF EXISTS {table}",
	},
	{
		// Version 6 of the other dialects (migrationSources): one ALTER,
		// atomic in InnoDB. MySQL has no partial index, so the tenant
		// index holds every event.
		version: 2, name: "tenant column; idempotency keys unique per tenant",
		pgUp: `ALTER TABLE {table} ADD COLUMN tenant VARCHAR(255) NOT NULL DEFAULT '',
    ADD UNIQUE KEY {base}_tenant_idempotency_key_idx (tenant, idempotency_key),
    DROP INDEX {base}_idempotency_key_idx,
    ADD KEY {base}_pending_tenant_idx (tenant, published_at, dead_lettered_at)`,
		pgDown: `ALTER TABLE {table} DROP INDEX {base}_pending_tenant_idx,
    ADD UNIQUE KEY {base}_idempotency_key_idx (idempotency_key),
    DROP INDEX {base}_tenant_idempotency_key_idx,
    DROP COLUMN tenant`,
	},
	{
		version: 3, name: "pending-key index as (published_at, ordering_key, sequence): the relay's key walk, head test and runs",
		pgUp: mysqlV3,
		pgDown: `ALTER TABLE {table} DROP INDEX {base}_pending_key_idx,
    ADD KEY {base}_pending_key_idx (ordering_key, published_at)`,
	},
}

// mysqlV3 redefines {base}_pending_key_idx from (ordering_key,
// published_at) to (published_at, ordering_key, sequence), in one ALTER
// (atomic in InnoDB; run again, it builds the same index again).
//
// MySQL has no partial indexes; leading with published_at makes the
// index's NULL section — the unpublished events, dead ones included —
// a partial index of its own, ordered by key and then sequence, which the
// published history (published_at set, further on) never enters. It gives
// the relay's lease what PostgreSQL's {base}_pending_key_idx and
// {base}_pending_unordered_idx give it (relay/sql_mysql.go):
//
//   - a key's head, "published_at IS NULL AND ordering_key = k ORDER BY
//     sequence LIMIT 1": one descent, however many events the key holds;
//   - the walk over the keys with unpublished events, "SELECT DISTINCT
//     published_at, ordering_key … LIMIT n": a loose index scan, one
//     descent per key (MySQL's and MariaDB's "Using index for group-by");
//   - a key's next events (a run), the same range read on from the head;
//   - the unordered pending events in sequence order ("ordering_key IS
//     NULL", the section's start).
//
// The old (ordering_key, published_at) answered the head test too (the
// primary key is appended to every InnoDB index) but not the walk: "the
// next key after k with an unpublished event" stepped over every
// published event of the keys between.
const mysqlV3 = `ALTER TABLE {table} DROP INDEX {base}_pending_key_idx,
    ADD KEY {base}_pending_key_idx (published_at, ordering_key, sequence)`

// mysqlBucketRows is the VALUES list of every key-lock bucket.
var mysqlBucketRows = func() string {
	var b strings.Builder
	for i := range mysqlKeyLockBuckets {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		b.WriteString(strconv.Itoa(i))
		b.WriteByte(')')
	}
	return b.String()
}()
