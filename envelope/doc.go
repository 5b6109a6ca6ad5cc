// Package envelope is herald's shared data model and its one way into the
// outbox table.
//
// It owns: Event (an outbox row), Message (what callers enqueue), Change (one
// captured row change), Extension, the capture declaration Options and its
// compiled form Spec (validation, topic and ordering-key templates, the
// envelope JSON), topic patterns, the table's versioned schema per dialect,
// and the Writer that inserts events through any Querier (*sql.Tx, *sql.DB,
// *sql.Conn).
//
// The outbox table is the same for GORM, ent and the relay. Migrate creates
// it, or brings a table of an older herald version up to date, in one
// transaction under a lock, safe to run from every process at start-up:
//
//	err := envelope.Migrate(ctx, db, envelope.Postgres, "") // herald_outbox at envelope.LatestVersion
//
// Its versions are recorded in MigrationTable; Version reads a table's,
// MigrateTo goes up or down to one, and MigrationSQL gives each version's
// script for goose, atlas or golang-migrate (also printed by
// `go run github.com/heraldgo/herald/cmd/herald-migrate -dialect postgres -print`).
// The table's layout, and why, is in ARCHITECTURE.md at the repository's
// root.
//
// Errors match ErrValidation (a bad argument or value), ErrConfiguration (a
// bad declaration) or ErrUnsupported with errors.Is, and name what is at
// fault. The Writer checks every message before its first statement, on
// both dialects alike, so a rejected message never reaches the database
// (and never aborts the caller's PostgreSQL transaction): an empty or
// over-long topic; a topic, ordering key, idempotency key or header that
// is not valid UTF-8 or holds a NUL byte; a payload with no JSON form, or
// whose JSON holds \u0000 or a lone UTF-16 surrogate escape ("\ud800" in
// a json.RawMessage); a DeliverAt outside the years 1 to 9999 (UTC); an
// Extra column the table does not have (the table's columns are read once,
// the first time Extra is used) or a string value of it that is not valid
// UTF-8 or holds NUL.
//
// Per-key order: on PostgreSQL every statement that inserts events with
// an ordering key first takes a transaction-scoped advisory lock for each
// key, before it draws any sequence value, so two transactions writing one
// key are serialized and a key's sequence order is its commit order —
// whatever wrote the events: Write, Enqueue, a captured change keyed by
// its row, by a template without {pk} ("{label}") or by an
// OrderingKeyFunc. A consumer may keep a per-key high-water mark. The
// locks are per bucket of keys (hashtextextended(key) mod 1024, in a lock
// space of the table's own), so a write of any number of keys takes at
// most 1024 locks; a captured change keyed by its own row (the default
// "{label}:{pk}") takes its lock shared — the row's lock already orders
// its writers — so captured writes of different rows never wait on each
// other, while every other writer takes it exclusive. Two exclusive
// writers of different keys in one bucket (1 in 1024) wait for each other,
// and a write of many keys holds many buckets until it commits. A
// transaction that makes a captured row-keyed write and then enqueues an
// event with a key in the same bucket upgrades its shared lock; two such
// transactions at once deadlock, and PostgreSQL aborts one (SQLSTATE
// 40P01, retryable): rare for a single row (1 in 1024 pairs), likely after
// a bulk captured write that holds most buckets. SQLite has one writer at
// a time, which orders every key already.
// MySQL has no transaction-scoped advisory lock (GET_LOCK's locks are the
// session's): there a write locks rows instead, one of 1024 in
// {table}_keylock per bucket (CRC32(key) MOD 1024), FOR UPDATE or, for a
// captured change keyed by its row, LOCK IN SHARE MODE, in bucket order,
// before its INSERT; the same costs and the same upgrade hazard (error
// 1213, retryable).
//
// MySQL (and MariaDB) is the third dialect, envelope.MySQL, with a
// version history of its own (LatestMySQLVersion, LatestVersionFor); the
// repository's README ("MySQL and MariaDB") lists how it differs and what
// does not run on it yet.
//
// Tenants: Options.Tenant names a captured model's tenant column, whose
// value is Change.Tenant, the envelope's "tenant" key and the event's
// Message.Tenant; the outbox holds it in its tenant column (schema
// version 6, MySQL 2: NOT NULL, empty for none), and idempotency keys are
// unique per tenant — the key's unique index is (tenant,
// idempotency_key). A relay may be limited to tenants
// (relay.Config.Tenants); its leased Event.Tenant is the column, sent by
// every transport as the herald-tenant header, and it counts a backlog
// per tenant (Relay.BacklogByTenant). The README's "Tenants" section has
// the rest, schema-per-tenant included.
//
// SetContextHeaders installs a process-wide hook that gives headers from
// a write's context (otelherald.RecordTraceContext: the W3C trace
// context); every write — Write, WriteCaptured, WriteCapturedArrays and
// the statements gormcapture and entcapture fuse with their row
// (internal/ctxhdr) — adds them to its events where the message
// does not set them. envelope itself imports no OpenTelemetry.
//
// Guarantee: an event is written in the caller's transaction or not at all —
// a rejected message writes nothing, and an idempotency key yields at most
// one event however often and however concurrently it is enqueued.
package envelope
