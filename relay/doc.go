// Package relay delivers outbox events: it leases them from the outbox
// table, hands them to a delivery.Delivery outside any transaction, and
// marks them published — or, when a delivery fails, backs them off and in
// the end dead-letters them. It also owns the operations on the table that
// follow from that: RetryDeadLettered, CleanupPublished,
// CleanupDeadLettered (also on a schedule: Config.RetainPublished,
// Config.RetainDeadLettered) and Backlog (BacklogByTopic,
// BacklogByTenant), and the Observer hooks.
//
// One poll (ARCHITECTURE.md at the repository's root, "The poll cycle";
// the statements, with the interleavings they are safe against, are in
// sql.go):
//
//  1. Lease: one statement leases the next batch — events not published,
//     not dead, due, not under a live lease — in sequence order (PostgreSQL:
//     UPDATE … WHERE sequence = ANY(ARRAY(SELECT … ORDER BY sequence LIMIT n
//     FOR UPDATE SKIP LOCKED)) RETURNING …; SQLite: UPDATE … WHERE sequence
//     IN (SELECT …) RETURNING … under its single writer; MySQL: one READ
//     COMMITTED transaction — the candidates by a plain read, the first
//     BatchSize of them locked by primary key FOR UPDATE SKIP LOCKED and
//     checked again, then one UPDATE, as sql_mysql.go explains; a
//     deadlock (1213) or lock wait timeout (1205) runs the transaction
//     again, and is never an event's failure). The conditions are
//     checked on a bounded set of candidates — the first BatchSize
//     pending events, the first BatchSize unordered ones and, after a
//     short lease, the heads of up to BatchSize keys walked through the
//     pending-key index (on MySQL, whose indexes cannot be
//     partial, its section of unpublished events: MySQL schema version 3;
//     and the walk goes on from the last key of a walk that visited
//     BatchSize keys) — so a lease costs the same however large a backlog
//     waits behind a few keys. Where PostgreSQL can JIT-compile (JIT
//     available and jit on, as the relay's connections see it when it
//     checks its table), each lease runs in a transaction of its own that
//     first says SET LOCAL jit = off: a large outbox's statistics push the
//     lease's estimate past jit_above_cost, and JIT would then cost tens of
//     milliseconds a poll for a statement that reads a few hundred index
//     entries.
//  2. Order: an event with an ordering key is not leased while an earlier
//     event of its key is unpublished (pending, failed or dead) — unless
//     the same lease takes that earlier event too: on PostgreSQL, the lease
//     after one that held keyed events takes, behind each key's head, the
//     events that follow it (a run, cut at the first one not leasable;
//     the runs share BatchSize), so a backlog of few keys drains a batch
//     per poll, not one event per key. A runs lease that finds no
//     followers turns runs off until a key is leased twice in a row, so a
//     trickle of one event per key keeps the cheaper plain lease. MySQL
//     does the same, a run read by one index range per key and locked
//     SKIP LOCKED, cut where an event is not leasable or is locked by
//     another transaction. On SQLite a batch holds one event per key. A
//     failure holds back only its key. Topics listed in the table of paused topics ({base}_paused,
//     schema version 5, written by the admin package's Pause) are not
//     leased: their events, and the later events of their keys, wait in
//     order, unattempted, until the topic is resumed.
//  3. Hold: the lease runs Lease from the database's now during the
//     statement, so by the relay's own clock it ends no earlier than
//     Lease after the statement was sent. When the statement returned later
//     than a renewal would be due (a lock, SQLite's busy timeout), the
//     relay renews the lease before delivering anything and keeps only the
//     events it still holds: a relay never delivers under a lease that has
//     run out, which another relay may have taken.
//  4. Deliver: a BatchDelivery gets the batch, a plain Delivery up to
//     Concurrency events at once, each within DeliveryTimeout; a panic is
//     that event's failure. A batch with runs goes out in waves — the
//     first event of each key (and the unordered ones), then the second,
//     and so on — so a BatchDelivery still gets at most one event per key
//     per call and no two events of a key are in flight at once; the
//     events behind a failure in their key are not delivered and are
//     released (not counted as failures). The lease is renewed every
//     Lease/3 while the batch is out.
//  5. Mark: one statement marks the delivered events published, one
//     records the failures (attempts, last_error, next_attempt_at = the
//     database's now + min(RetryBase·2^(attempts−1), RetryMax) ±10%),
//     dead-lettering those out of attempts or failed permanently
//     (delivery.ErrPermanent). Marks are guarded by leased_by,
//     so a relay that lost its lease cannot undo another's work, and are
//     written even while the relay stops.
//     With Config.DeleteOnPublish the delivered events are deleted in
//     that statement instead (same guards): no published history is kept,
//     and a delivered event's idempotency key is free again. With
//     Config.AsyncCommit (PostgreSQL) the marks and releases commit with
//     synchronous_commit off, set inside each statement; the leases still
//     wait for the WAL flush, which also writes the marks before them.
//     Otherwise, on PostgreSQL, when a batch was delivered whole and the
//     loop polls again at once (a full batch, or keyed events), its mark
//     runs as the first statement of the next lease's transaction: one
//     commit per batch in a drain (pending.go argues at-least-once and
//     per-key order); a failed lease or a stop writes it on its own.
//
// A row the relay cannot decode — headers that are not an object of
// strings, a payload that is not JSON, a time or id that does not parse,
// as a hand-written INSERT or another tool may leave — is that event's own
// failure (a *DecodeError naming the column, recorded and dead-lettered
// like a failed delivery, its key held back); the rest of the batch is
// delivered.
//
// Clocks: every time the relay stores or compares — lease expiry, due
// times, published_at, dead_lettered_at, cleanup cutoffs, Backlog's oldest
// age — is the database's clock (PostgreSQL's now(); for SQLite, the clock
// of the machine that holds the file), never the relay host's, so relays
// whose clocks disagree still agree on who holds a lease and what is due.
// The relay's own clock only measures durations (the lease reckoning of
// step 3) and schedules its own waits.
//
// A full batch polls again at once, and so does one that delivered events
// with an ordering key (their keys' next events just became due); otherwise the wait grows from
// MinPollInterval by PollMultiplier up to MaxPollInterval, and a Wakeup
// signal for one of the relay's topics cuts it short. While the wakeup is
// not subscribed (still connecting, or lost — which also cuts the running
// wait short) the wait is capped as without one. Topics and ExcludeTopics
// let relays of different topics, each with its own settings, share one
// table; Tenants does the same for tenants (the outbox's tenant column,
// schema version 6; MySQL 2). A leased event's Tenant is that column,
// which the transports send as delivery.HeaderTenant; New therefore needs
// the table at version 6 (MySQL 2) and refuses an older one with an
// envelope.ErrConfiguration naming envelope.Migrate. With a schema per
// tenant, give each schema's outbox its own relay (Config.Table
// "acme.herald_outbox").
//
// Lifecycle: New validates and checks the table, Start starts the loop,
// Stop finishes the batch in hand, Run is the blocking form; Start and Stop
// are safe to call twice, and Stop before Start. How long a stop takes: a
// relay waiting between polls stops at once; one with a batch in hand
// stops when that batch is delivered or has failed — at most
// DeliveryTimeout (30 s by default) plus writing its marks — and Run gives
// up waiting after Lease (60 s), cancelling the deliveries. With a broker
// down the batch fails within seconds (herald's transports fail a refused
// connection at once — Redis after go-redis's dial retries, about 3 s —
// and Kafka once no broker could be reached for kafka.UnreachableAfter,
// 2 s), so SIGTERM stops the relay within seconds;
// only a broker that accepts connections and never answers holds it for
// DeliveryTimeout. The database may be down
// when New and Start run: they log, the loop keeps trying (its wait growing
// to MaxPollInterval) and delivers once the database answers; an
// unreachable database is never an envelope.ErrConfiguration error, a
// missing table always is (from New, or from Run when the database first
// answers after New). So is a connection the database refuses, which
// waiting will not change: a DSN that does not parse, a database that does
// not exist (SQLSTATE 3D000), a wrong password (28P01), a login refused
// (28000: no such role, no pg_hba.conf entry), a SQLite file that cannot
// be opened.
//
// Connections: on a pgx pool in pgx's default mode (the statement cache)
// the relay runs its own statements in pgx's cache-describe mode, so that
// PostgreSQL plans them at each execution for the table as it is — a
// generic plan made once on an empty outbox would read the whole table as
// it grows — and so that they need no server-side prepared statement;
// other modes are left as configured. Behind a connection pooler in
// transaction mode (PgBouncer pool_mode=transaction) pgx's statement cache
// fails with SQLSTATE 26000 or 42P05 for the writers' statements (and the
// relay's, through a wrapper driver the relay cannot see into); the errors
// then say so: open the database with default_query_exec_mode=exec (or
// simple_protocol, or cache_describe) in the pgx DSN. database/sql keeps
// two idle connections by default; the relay logs a WARN when its pool
// closes and reopens connections for lack of idle room
// (db.SetMaxIdleConns).
//
// Guarantee: every event whose transaction committed is delivered at least
// once — a relay that dies mid-batch lets its lease expire and the batch is
// delivered again — and the events of one ordering key are delivered in
// sequence order, each only after the one before it was delivered.
package relay
