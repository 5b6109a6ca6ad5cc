// Package envhook lets internal/outbox reach envelope's unexported
// plumbing without making it part of envelope's public API. envelope sets
// these variables in its init; internal/outbox wraps them with envelope's
// types. Nothing else should use this package: call internal/outbox.
package envhook

import (
	"context"
	"database/sql"
	"time"
)

// Set by envelope's init. The any arguments and results are envelope types
// (*envelope.Writer, *envelope.Event, envelope.Dialect); internal/outbox
// gives them their types.
var (
	ScanEvent     func(s interface{ Scan(dest ...any) error }, extra []string) (any, error)
	Placeholder   func(d any, n int) string
	MaxBindParams func(d any) int
	TimeArg       func(d any, t time.Time) any
	KeyLockSQL    func(w any, keyExpr string, rowKeyed bool) string
	KeyLocksSQL   func(w any, keysQuery string, rowKeyed bool) string
	WriteArrays   func(w any) any // the method value (*Writer).writeCapturedArrays

	Unmigrated  func(w any, err error) error
	PausedTable func(t any) string
	LikePattern func(p any) string

	// d is an envelope.Dialect, t an envelope.Table, ms an []envelope.Migration.
	MigrateTable      func(ctx context.Context, db *sql.DB, d, t, ms any, version int) error
	TableVersion      func(ctx context.Context, db *sql.DB, d, t any) (int, error)
	TableMigrationSQL func(d, t any, what string, ms any, version int, down bool) (string, error)
)
