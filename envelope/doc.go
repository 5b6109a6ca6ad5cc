// Package envelope is herald's data model and its one way into the outbox
// table: [Message] (what you enqueue), [Event] (an outbox row), [Change]
// (one captured row change), [Options] (how a model is captured), the
// table's versioned schema, and the [Writer].
//
// Most services meet it through gormcapture or entcapture (Options,
// Message, Change) and the relay (Event). Used alone:
//
//	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil { // herald_outbox, up to date
//		return err
//	}
//	w, err := envelope.NewWriter(envelope.Postgres, "")
//	if err != nil {
//		return err
//	}
//	_, err = w.Write(ctx, tx, []envelope.Message{{Topic: "library.loan.created", OrderingKey: "loan:7", Payload: loan}})
//
// # Guarantee
//
// An event is written in the caller's transaction or not at all. A
// rejected message writes nothing, and an idempotency key yields at most
// one event however often and however concurrently it is enqueued.
//
// # Migrations
//
// The outbox table is the same for GORM, ent and the relay. [Migrate]
// creates it, or brings a table of an older herald version up to date, in
// one transaction under a lock: safe to run from every process at
// start-up. [MigrateTo] goes up or down to one version, and [Version]
// reads a table's. Versions are recorded in the table [MigrationTable].
//
// To run migrations with your own tool (goose, atlas, golang-migrate),
// take each version's script from [MigrationSQL], or print them with
// `herald migrate print` (cmd/herald). Each script records its version, so
// a Migrate run later on the same table agrees. The table's layout, and
// why, is in ARCHITECTURE.md at the repository's root.
//
// # Errors
//
// Errors match [ErrValidation] (a bad argument or value),
// [ErrConfiguration] (a bad declaration) or [ErrUnsupported] with
// errors.Is, and an [*Error] names what is at fault.
//
// The Writer checks every message before its first statement, so a
// rejected message never reaches the database (and never aborts the
// caller's PostgreSQL transaction): an empty or over-long topic; a topic,
// key or header that is not valid UTF-8 or holds a NUL byte; a payload
// with no JSON form, or whose JSON holds \u0000 or a lone UTF-16
// surrogate; a DeliverAt outside the years 1 to 9999; an Extra column the
// table does not have.
//
// # Ordering
//
// A key's sequence order is its commit order, whatever wrote the events:
// Write, Enqueue, or a captured change. A consumer may keep a per-key
// high-water mark.
//
// On PostgreSQL every statement that inserts keyed events first takes a
// transaction-scoped advisory lock per key, before it draws any sequence
// value, so two transactions writing one key are serialized. The locks
// are per bucket of keys (hashtextextended(key) mod 1024, in a lock space
// of the table's own): a write of any number of keys takes at most 1024
// locks.
//
// A captured change keyed by its own row (the default "{label}:{pk}")
// takes its lock shared, since the row's lock already orders its writers:
// captured writes of different rows never wait on each other. Every other
// writer takes it exclusive. Two exclusive writers of different keys in
// one bucket (1 in 1024) wait for each other, and a write of many keys
// holds many buckets until it commits.
//
// A transaction that makes a captured row-keyed write and then enqueues
// an event with a key in the same bucket upgrades its shared lock; two
// such transactions at once deadlock, and PostgreSQL aborts one (SQLSTATE
// 40P01, retryable). It is rare for a single row (1 in 1024 pairs), likely
// after a bulk captured write that holds most buckets.
//
// SQLite has one writer at a time, which orders every key already. MySQL
// has no transaction-scoped advisory lock, so a write locks rows instead:
// one of 1024 in {table}_keylock per bucket (CRC32(key) MOD 1024), FOR
// UPDATE, or LOCK IN SHARE MODE for a change keyed by its row, in bucket
// order, before its INSERT. The costs and the upgrade hazard are the same
// (error 1213, retryable).
//
// # MySQL and MariaDB
//
// [MySQL] is the third dialect, with a version history of its own
// ([LatestMySQLVersion], [LatestVersionFor]). The repository's README
// ("MySQL and MariaDB") lists how it differs and what does not run on it
// yet.
//
// # Tenants
//
// Options.Tenant names a captured model's tenant column. Its value is
// Change.Tenant, the envelope's "tenant" key and the event's
// Message.Tenant; the outbox holds it in its tenant column (schema version
// 6, MySQL 2: NOT NULL, empty for none), and idempotency keys are unique
// per tenant. A relay may be limited to tenants (relay.Config.Tenants),
// and every transport sends the tenant as the herald-tenant header. The
// README's "Tenants" section has the rest, schema-per-tenant included.
//
// # Context headers
//
// [SetContextHeaders] installs a process-wide hook that gives headers
// from a write's context (otelherald.RecordTraceContext: the W3C trace
// context). Every write, captured ones included, adds them to its events
// where the message does not set them. envelope itself imports no
// OpenTelemetry.
package envelope
