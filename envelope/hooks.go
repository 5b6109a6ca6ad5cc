package envelope

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/envhook"
)

// The plumbing herald's own packages call (through internal/outbox) and
// users do not.
func init() {
	envhook.ScanEvent = func(s interface{ Scan(dest ...any) error }, extra []string) (any, error) {
		return scanEvent(s, extra)
	}
	envhook.Placeholder = func(d any, n int) string { return d.(Dialect).placeholder(n) }
	envhook.MaxBindParams = func(d any) int { return d.(Dialect).maxBindParams() }
	envhook.TimeArg = func(d any, t time.Time) any { return d.(Dialect).timeArg(t) }
	envhook.KeyLockSQL = func(w any, keyExpr string, rowKeyed bool) string {
		return w.(*Writer).keyLockSQL(keyExpr, rowKeyed)
	}
	envhook.KeyLocksSQL = func(w any, keysQuery string, rowKeyed bool) string {
		return w.(*Writer).keyLocksSQL(keysQuery, rowKeyed)
	}
	envhook.WriteArrays = func(w any) any { return w.(*Writer).writeCapturedArrays }
	envhook.Unmigrated = func(w any, err error) error { return w.(*Writer).unmigrated(err) }
	envhook.PausedTable = func(t any) string { return t.(Table).pausedTable() }
	envhook.LikePattern = func(p any) string { return p.(TopicPattern).likePattern() }
	envhook.MigrateTable = func(ctx context.Context, db *sql.DB, d, t, ms any, version int) error {
		return migrateTableTo(ctx, db, d.(Dialect), t.(Table), ms.([]Migration), version)
	}
	envhook.TableVersion = func(ctx context.Context, db *sql.DB, d, t any) (int, error) {
		return tableVersionOf(ctx, db, d.(Dialect), t.(Table))
	}
	envhook.TableMigrationSQL = func(d, t any, what string, ms any, version int, down bool) (string, error) {
		return tableMigrationSQL(d.(Dialect), t.(Table), what, ms.([]Migration), version, down)
	}
}
