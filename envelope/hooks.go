package envelope

import (
	"context"
	"database/sql"

	"github.com/heraldgo/herald/internal/envhook"
)

// The table migrations herald's inbox runs with the outbox's machinery
// (through internal/outbox) and users do not.
func init() {
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
