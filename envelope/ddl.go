package envelope

// OwnColumns are the outbox table's own columns, in table order. A
// service's extra columns must not reuse these names.
var OwnColumns = []string{
	"sequence", "id", "topic", "payload", "headers", "ordering_key", "idempotency_key",
	"created_at", "attempts", "last_error", "next_attempt_at", "lease_until", "leased_by",
	"published_at", "dead_lettered_at", "tenant",
}

// IsOwnColumn reports whether c is one of the outbox table's own columns.
func isOwnColumn(c string) bool {
	for _, o := range OwnColumns {
		if o == c {
			return true
		}
	}
	return false
}

// Version 1 of the PostgreSQL table, exactly as the first release created
// it (its payload and headers were JSONB; version 2 makes them JSON). Every
// event is written three times: inserted,
// leased, marked. The lease sets only lease_until and leased_by, which no
// index covers, so it can be a HOT update — a new row version on the same
// page and no new index entries — provided the page has room for it.
// fillfactor 50 keeps half of each page free at insert, room for every row
// on a page to be leased once in place, whatever the rows' size (large
// payloads are TOASTed, and a lease does not copy them). Measured with
// integration/cmd/relaybench (BENCHMARKS.md, "WAL per event"): with the
// first DDL (fillfactor 85, full indexes) only ~8% of leases were HOT and
// lease+mark wrote 14.2 WAL records per event; at 50 every lease is HOT
// and, with the partial indexes below, it writes 5.3.
// The mark sets published_at, which the partial indexes' predicates name,
// so it is never HOT: it adds entries only to the indexes whose predicate
// the published row satisfies — the "to deliver" indexes and the topic
// index are partial on published_at IS NULL, so they stay as small as the
// backlog however much published history the table keeps, and the mark
// adds nothing to them.
//
// Inserts are the capture's cost, paid inside the caller's transaction, so
// an insert touches as few indexes as it can: the idempotency key's unique
// index is partial (most events have no key, and a NULL would still be an
// index entry), and id has no index — UUID v7 ids are unique by
// construction and every lookup by id (RetryDeadLettered) runs among the
// dead-lettered events, through their own index. Measured with
// gormcapture's BenchmarkCreate: about 0.2× less per captured row on
// SQLite than with both as full unique constraints.
const postgresV1 = `CREATE TABLE IF NOT EXISTS {table} (
    sequence         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id               UUID NOT NULL,
    topic            VARCHAR(255) NOT NULL,
    payload          JSONB NOT NULL,
    headers          JSONB NOT NULL DEFAULT '{}',
    ordering_key     VARCHAR(255),
    idempotency_key  VARCHAR(255),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    next_attempt_at  TIMESTAMPTZ,
    lease_until      TIMESTAMPTZ,
    leased_by        VARCHAR(255),
    published_at     TIMESTAMPTZ,
    dead_lettered_at TIMESTAMPTZ
) WITH (fillfactor = 50);
CREATE UNIQUE INDEX IF NOT EXISTS {base}_idempotency_key_idx ON {table} (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS {base}_pending_idx ON {table} (sequence)
    WHERE published_at IS NULL AND dead_lettered_at IS NULL;
CREATE INDEX IF NOT EXISTS {base}_pending_key_idx ON {table} (ordering_key, sequence)
    WHERE published_at IS NULL AND ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS {base}_published_idx ON {table} (published_at)
    WHERE published_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS {base}_dead_lettered_idx ON {table} (dead_lettered_at)
    WHERE dead_lettered_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS {base}_topic_idx ON {table} (topic, sequence)
    WHERE published_at IS NULL;
`

// Version 1 of the SQLite table. Times are fixed-width UTC text (see Dialect.timeArg);
// AUTOINCREMENT keeps a sequence from ever being reused after cleanup.
const sqliteV1 = `CREATE TABLE IF NOT EXISTS {table} (
    sequence         INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL,
    topic            TEXT NOT NULL,
    payload          TEXT NOT NULL,
    headers          TEXT NOT NULL DEFAULT '{}',
    ordering_key     TEXT,
    idempotency_key  TEXT,
    created_at       TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    next_attempt_at  TEXT,
    lease_until      TEXT,
    leased_by        TEXT,
    published_at     TEXT,
    dead_lettered_at TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS {base}_idempotency_key_idx ON {table} (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS {base}_pending_idx ON {table} (sequence)
    WHERE published_at IS NULL AND dead_lettered_at IS NULL;
CREATE INDEX IF NOT EXISTS {base}_pending_key_idx ON {table} (ordering_key, sequence)
    WHERE published_at IS NULL AND ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS {base}_published_idx ON {table} (published_at)
    WHERE published_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS {base}_dead_lettered_idx ON {table} (dead_lettered_at)
    WHERE dead_lettered_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS {base}_topic_idx ON {table} (topic, sequence)
    WHERE published_at IS NULL;
`
