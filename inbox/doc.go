// Package inbox is the consumer's half of the outbox: it records the
// messages a consumer processed, in the consumer's own database, so each
// herald event takes effect once although herald delivers it at least
// once.
//
// The guarantee, in transactional mode (Handle, HandleTx, HandleWithin,
// HandleBatch, gorminbox.Handle): a message's effect on the database
// commits exactly once per message id and consumer — the handler's writes
// and the id commit in one transaction, a repeat finds the id and is a
// Duplicate, an error or a panic rolls both back so a redelivery runs the
// handler again. The handler may write captured GORM or ent models and
// enqueue events in that transaction: consume → change → publish, atomic.
//
// In non-transactional mode (HandleOnce), for effects outside the
// database, the id commits first and the effect runs after: never twice,
// and a crash between the two loses that one effect.
//
// The table, herald_inbox by default, holds one row per (consumer, message
// id) and is versioned like the outbox (Migrate, MigrationSQL, `herald
// migrate up --inbox`); ids older than Config.TTL are deleted by Cleanup
// (Start runs it on a schedule). Keep TTL above the longest time a message
// can be redelivered — the broker's retention plus the relay's retry span
// (RelayRetrySpan) — and say so in Config.RedeliveryWindow to have it
// checked. A Cache in front (MemoryCache, redisinbox.Cache) saves the
// database a query per repeat; it is written only after a commit, so it
// never causes a second effect.
//
// The adapters feed it from each herald transport, one package each so a
// service compiles only the clients it imports: kafkainbox (franz-go),
// redisinbox (Redis Streams), amqpinbox (RabbitMQ) and webhookinbox (an
// HTTP middleware that verifies herald's signature).
package inbox
