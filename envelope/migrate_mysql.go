package envelope

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// mysqlMigrateLock is the name of the GET_LOCK lock every MySQL migration
// runs under. GET_LOCK names are server-wide, so migrations of every
// database of the server take turns: they are rare and short.
const mysqlMigrateLock = "herald:migrate"

// mysqlMigrateWait is how long a migration waits for another's lock
// (shorter when ctx ends first).
const mysqlMigrateWait = time.Hour

// inMySQLMigrationLock runs f on conn under GET_LOCK(mysqlMigrateLock).
//
// MySQL commits DDL implicitly, so a migration cannot run in one
// transaction as on PostgreSQL and SQLite; the lock serializes
// migrations instead (every statement of a version is IF NOT EXISTS or IF
// EXISTS, so a migration cut short is finished by the next run). A
// GET_LOCK lock belongs to the session, not to a transaction: it outlives
// anything f does, and on a pooled connection it would outlive the
// migration. It is released on every path — f's error, a panic, ctx's end
// (released with a context of its own) — and when the release itself fails
// the connection is discarded, not returned to the pool holding it: a
// session that ends releases its locks.
func inMySQLMigrationLock(ctx context.Context, conn *sql.Conn, f func() error, fail func(error) error) (err error) {
	wait := mysqlMigrateWait
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Until(dl), 0)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, mysqlMigrateLock, int64(wait/time.Second)).Scan(&got); err != nil {
		return fail(err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fail(fmt.Errorf("GET_LOCK(%q) not granted within %s: another migration holds it", mysqlMigrateLock, wait))
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var released sql.NullInt64
		rerr := conn.QueryRowContext(rctx, `SELECT RELEASE_LOCK(?)`, mysqlMigrateLock).Scan(&released)
		if rerr == nil && released.Int64 == 1 {
			return
		}
		// Not released: close the session rather than pool it with the lock.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			if rerr == nil {
				rerr = errors.New("RELEASE_LOCK did not release the lock")
			}
			err = fail(rerr)
		}
	}()
	if err := f(); err != nil {
		return fail(err)
	}
	return nil
}
