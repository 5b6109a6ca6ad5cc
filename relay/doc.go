// Package relay delivers outbox events: it leases them from the outbox
// table, hands them to a delivery.Delivery outside any transaction, and
// marks them published — or, when a delivery fails, backs them off and in
// the end dead-letters them. It also owns the operations on the table that
// follow from that: RetryDeadLettered, CleanupPublished,
// CleanupDeadLettered and Backlog, and the Observer hooks.
//
// One poll (ARCHITECTURE.md at the repository's root, "The poll cycle";
// the statements, with the interleavings they are safe against, are in
// sql.go):
//
//  1. Lease: one statement leases the next batch — events not published,
//     not dead, due, not under a live lease — in sequence order (PostgreSQL:
//     UPDATE … WHERE sequence = ANY(ARRAY(SELECT … ORDER BY sequence LIMIT n
//     FOR UPDATE SKIP LOCKED)) RETURNING …, the candidates an InitPlan run
//     once; SQLite: UPDATE … WHERE sequence IN (SELECT …) RETURNING …
//     under its single writer).
//  2. Order: an event with an ordering key is not leased while an earlier
//     event of its key is unpublished (pending, failed or dead), so a batch
//     holds at most one event per key; a failure holds back only its key.
//  3. Deliver: a BatchDelivery gets the batch, a plain Delivery up to
//     Concurrency events at once, each within DeliveryTimeout; a panic is
//     that event's failure. The lease is renewed three times per Lease
//     while the batch is out.
//  4. Mark: one statement marks the delivered events published, one
//     records the failures (attempts, last_error, next_attempt_at =
//     now + min(RetryBase·2^(attempts−1), RetryMax) ±10%), dead-lettering
//     those out of attempts. Marks are guarded by leased_by, so a relay
//     that lost its lease cannot undo another's work, and are written even
//     while the relay stops.
//
// A full batch polls again at once, and so does one that delivered events
// with an ordering key (their keys' next events just became due; a backlog
// of few keys never fills a batch); otherwise the wait grows from
// MinPollInterval by PollMultiplier up to MaxPollInterval, and a Wakeup
// signal for one of the relay's topics cuts it short. Topics and
// ExcludeTopics let relays of different topics, each with its own settings,
// share one table.
//
// Lifecycle: New validates and checks the table, Start starts the loop,
// Stop finishes the batch in hand, Run is the blocking form; Start and Stop
// are safe to call twice, and Stop before Start.
//
// Guarantee: every event whose transaction committed is delivered at least
// once — a relay that dies mid-batch lets its lease expire and the batch is
// delivered again — and the events of one ordering key are delivered in
// sequence order, each only after the one before it was delivered.
package relay
