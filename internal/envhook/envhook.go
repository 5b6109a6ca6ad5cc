// Package envhook lets internal/outbox reach envelope's table-migration
// machinery (for the inbox's tables) without making it part of envelope's
// public API. envelope sets these variables in its init; internal/outbox
// wraps them with envelope's types. Nothing else should use this package:
// call internal/outbox. (The rest of the plumbing internal/outbox offers is
// internal/outboxsql's, which envelope imports, and needs no hook.)
package envhook

import (
	"context"
	"database/sql"
)

// Set by envelope's init. d is an envelope.Dialect, t an envelope.Table,
// ms an []envelope.Migration; internal/outbox gives them their types.
var (
	MigrateTable      func(ctx context.Context, db *sql.DB, d, t, ms any, version int) error
	TableVersion      func(ctx context.Context, db *sql.DB, d, t any) (int, error)
	TableMigrationSQL func(d, t any, what string, ms any, version int, down bool) (string, error)
)
