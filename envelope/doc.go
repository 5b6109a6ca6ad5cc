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
// fault.
//
// Guarantee: an event is written in the caller's transaction or not at all —
// a rejected message writes nothing, and an idempotency key yields at most
// one event however often and however concurrently it is enqueued.
package envelope
