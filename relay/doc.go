// Package relay delivers outbox events. It leases them from the outbox
// table, hands them to a [delivery.Delivery] outside any transaction, and
// marks them published; a failed delivery is backed off, and in the end
// dead-lettered.
//
//	r, err := relay.New(db, d, relay.Config{}) // the dialect is detected from db
//	if err != nil {
//		return err // a bad option or a missing table: envelope.ErrConfiguration
//	}
//	if err := r.Start(ctx); err != nil {
//		return err
//	}
//	defer r.Stop(context.Background())
//
// New checks the configuration and the table, Start runs the poll loop,
// Stop finishes the batch in hand. Run is the blocking form. The Example
// shows a whole program on SQLite.
//
// # Guarantee
//
// Every event whose transaction committed is delivered at least once. A
// relay that dies mid-batch lets its lease expire, and the batch is
// delivered again. The events of one ordering key are delivered in
// sequence order, each only after the one before it was delivered.
//
// # The poll cycle
//
// ARCHITECTURE.md, at the repository's root, walks through it with the
// statements and the interleavings they are safe against.
//
//  1. Lease: one statement takes the next batch in sequence order: events
//     not published, not dead-lettered, due, and not under a live lease.
//     It reads a bounded set of candidates among the events the relay
//     takes (its topics and tenants, no paused topic): the first
//     2 × BatchSize pending events, the first 2 × BatchSize unordered
//     ones, the heads of up to BatchSize keys. So a lease costs the same
//     however large the backlog behind a few keys, and looks past any
//     number of events it does not take. While a backlog drains
//     (PostgreSQL), the lease takes unordered events in one locking scan
//     of their index instead, and keyed events as the next events of the
//     keys of the batch just delivered, found in one window of the
//     pending events after it, with no head test; every 16th lease, and
//     any after a short one, is the full form again, from the start of
//     the table, so an event outside those keys waits at most 16 leases
//     or 19 times that scan's last duration, whichever is longer (the
//     latter at most a second): on a large table whose published events
//     nothing has vacuumed yet the scan grows dear, and paced so it takes
//     at most about a twentieth of a drain. On PostgreSQL the rows locked are
//     updated by their ctid, so New refuses a partitioned outbox table,
//     or one with inheritance children (ErrConfiguration).
//  2. Hold: the lease runs Config.Lease from the database's now. When the
//     statement returned later than a renewal would be due, the relay
//     renews before delivering and keeps only the events it still holds:
//     it never delivers under a lease another relay may have taken.
//  3. Deliver: a [delivery.BatchDelivery] gets the batch, a plain Delivery
//     up to Concurrency events at once, each within DeliveryTimeout. A
//     panic is that event's failure. The lease is renewed every Lease/3
//     while the batch is out.
//  4. Mark: one statement marks the delivered events published (or deletes
//     them, with Config.DeleteOnPublish), one records the failures. A
//     failure's next attempt is at the database's now +
//     min(RetryBase·2^(attempts−1), RetryMax) ±10%; an event out of
//     attempts, or failed with [delivery.ErrPermanent], is dead-lettered.
//     Marks are guarded by the lease's owner, so a relay that lost its
//     lease cannot undo another's work, and are written even while the
//     relay stops.
//
// A full batch polls again at once, and so does one that delivered keyed
// events (their keys' next events just became due), and so does a drain
// whose periodic lease from the start of the table came back short (with
// other relays draining beside it, its candidates may all have been
// taken meanwhile): it leases again from where its batches had reached.
// Otherwise the wait grows from MinPollInterval by PollMultiplier up to
// MaxPollInterval. A
// Config.Wakeup signal for one of the relay's topics cuts the wait short;
// while the wakeup is not subscribed the wait is capped as without one.
// So do the retries the relay scheduled: it wakes when the first and the
// last of each poll's failures fall due (the jitter spreads them), counted
// from the end of the statement that recorded them, so that the database
// has them due when the relay looks, and rounded up to a multiple of
// MinPollInterval.
//
// # Ordering
//
// An event with an ordering key is not leased while an earlier event of
// its key is unpublished (pending, failed or dead-lettered). A failure
// holds back only its key.
//
// On PostgreSQL and MySQL a lease after one that held keyed events also
// takes, behind each key's head, the events that follow it (a run, cut at
// the first one not leasable), so a backlog of few keys drains a batch per
// poll, not one event per key. A batch with runs goes out in waves (the
// first event of each key, then the second, …): a BatchDelivery gets at
// most one event per key per call, and no two events of a key are in
// flight at once. Events behind a failure in their key are released
// unattempted. On SQLite a batch holds one event per key.
//
// Topics paused with the admin package's Pause are not leased: their
// events, and the later events of their keys, wait in order until the
// topic is resumed.
//
// # Topics and tenants
//
// Config.Topics and Config.ExcludeTopics let relays of different topics,
// each with its own settings, share one table; Config.Tenants does the
// same for tenants (the outbox's tenant column, schema version 6; on
// MySQL 2). A leased event's Tenant is that column, which the transports
// send as [delivery.HeaderTenant]; New refuses an older table with an
// [envelope.ErrConfiguration] naming [envelope.Migrate]. With a schema per
// tenant, give each schema's outbox its own relay (Config.Table
// "acme.herald_outbox").
//
// # Rows that do not decode
//
// A row the relay cannot decode (headers that are not an object of
// strings, a payload that is not JSON, a time or id that does not parse,
// as a hand-written INSERT may leave) is that event's own failure: a
// [*DecodeError] naming the column, recorded and dead-lettered like a
// failed delivery, its key held back. The rest of the batch is delivered.
//
// # Clocks
//
// Every time the relay stores or compares (lease expiry, due times,
// published_at, dead_lettered_at, cleanup cutoffs, Backlog's oldest age)
// is the database's clock, never the relay host's: relays whose clocks
// disagree still agree on who holds a lease and what is due. On SQLite it
// is the clock of the machine that holds the file. The relay's own clock
// only measures durations and schedules its waits.
//
// # Stopping
//
// Start and Stop are safe to call twice, and Stop before Start. A relay
// waiting between polls stops at once; one with a batch in hand stops
// when that batch is delivered or has failed: at most DeliveryTimeout
// (30 s by default) plus writing its marks. Run gives up waiting after
// Lease (60 s) and cancels the deliveries.
//
// herald's transports fail a refused connection within seconds (Redis
// after go-redis's dial retries, about 3 s; Kafka after
// kafka.UnreachableAfter, 2 s), so SIGTERM stops a relay within seconds
// while a broker is down. Only a broker that accepts connections and never
// answers holds it for DeliveryTimeout.
//
// # When the database is down or refuses
//
// The database may be down when New and Start run: they log, the loop
// keeps trying (its wait growing to MaxPollInterval) and delivers once the
// database answers. An unreachable database is never an
// [envelope.ErrConfiguration]. A missing table always is, from New or from
// Run when the database first answers. So is a connection the database
// refuses, which waiting will not change: a DSN that does not parse, a
// database that does not exist (SQLSTATE 3D000), a wrong password
// (28P01), a login refused (28000), a SQLite file that cannot be opened.
//
// # Connections
//
// On a pgx pool in pgx's default mode (the statement cache) the relay runs
// its own statements in pgx's cache-describe mode, so that PostgreSQL
// plans them at each execution for the table as it is, and they need no
// server-side prepared statement — but for the lease a drain runs once per
// batch (of unordered events, after a full batch of them): from 8 MB of
// outbox table on, that lease runs prepared on the pool's own mode, with
// the plan PostgreSQL keeps, and is prepared anew when the table has
// doubled or halved, every five minutes and after a slow lease. Parsing
// and planning it was a fifth of a poll at BatchSize 100; a plan kept
// from a small table would read the whole table, which the 8 MB floor
// rules out. Where PostgreSQL can JIT-compile, a
// lease whose estimated cost nears jit_above_cost runs with SET LOCAL jit
// = off in a transaction of its own: a large outbox's statistics would
// otherwise make a lease that reads a few hundred index entries pay tens
// of milliseconds of compilation. The relay reads each lease form's
// estimate with EXPLAIN every 10 seconds (and after a slow lease, when the
// estimate is a second old), so a relay on a small table leases in one
// round trip.
//
// Behind a pooler in transaction mode (PgBouncer pool_mode=transaction)
// pgx's statement cache fails with SQLSTATE 26000 or 42P05, and the errors
// say what to change: default_query_exec_mode=exec (or simple_protocol, or
// cache_describe) in the pgx DSN. database/sql keeps two idle connections
// by default; the relay logs a WARN when its pool closes and reopens
// connections for lack of idle room (db.SetMaxIdleConns).
//
// # Throughput options
//
// With Config.AsyncCommit (PostgreSQL) the marks commit with
// synchronous_commit off; the leases still wait for the WAL flush, which
// also writes the marks before them. Otherwise, on PostgreSQL, when a
// batch was delivered whole and the loop polls again at once, its mark
// runs as the first statement of the next lease's transaction — or, while
// a backlog drains, inside the lease's own statement: one commit per batch
// in a drain. With Config.DeleteOnPublish no published history is
// kept, and a delivered event's idempotency key is free again.
//
// With Config.LeaseByLock (PostgreSQL) a drain's batches of unordered
// events are leased by the row locks of a transaction held open through
// their delivery, and marked in it: each event is written once (its mark)
// instead of twice (its lease, then its mark). The transaction's
// idle_in_transaction_session_timeout is the Lease, so a relay that stops
// answering loses the batch after one Lease, as it would lose a lease.
// Keyed events are leased as always. The transaction holds a pooled
// connection while the batch is out: a delivery that writes through the
// same *sql.DB needs another.
//
// # Operations
//
// A Relay also owns the operations on its table: [Relay.RetryDeadLettered],
// [Relay.CleanupPublished] and [Relay.CleanupDeadLettered] (also on a
// schedule: Config.RetainPublished, Config.RetainDeadLettered),
// [Relay.Backlog], [Relay.BacklogByTopic] and [Relay.BacklogByTenant]. An
// [Observer] hears of every delivery, failure and dead letter.
package relay
