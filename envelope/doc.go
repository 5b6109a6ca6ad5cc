// Package envelope is herald's shared data model and its one way into the
// outbox table.
//
// It owns: Event (an outbox row), Message (what callers enqueue), Change (one
// captured row change), Extension, the capture declaration Options and its
// compiled form Spec (validation, topic and ordering-key templates, the
// envelope JSON), topic patterns, the table's DDL per dialect with an
// idempotent Migrate, and the Writer that inserts events through any
// Querier (*sql.Tx, *sql.DB, *sql.Conn).
//
// The outbox table is the same for GORM, ent and the relay:
//
//	err := envelope.Migrate(ctx, db, envelope.Postgres, "") // herald_outbox
//
// Errors match ErrValidation (a bad argument or value), ErrConfiguration (a
// bad declaration) or ErrUnsupported with errors.Is, and name what is at
// fault.
//
// Guarantee: an event is written in the caller's transaction or not at all —
// a rejected message writes nothing, and an idempotency key yields at most
// one event however often and however concurrently it is enqueued.
package envelope
