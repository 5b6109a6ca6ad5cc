package relay

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"

	"github.com/heraldgo/herald/envelope"
)

// driverDialects maps the package paths of known database/sql drivers to
// their dialect.
var driverDialects = []struct {
	pkg string
	d   envelope.Dialect
}{
	{"github.com/jackc/pgx/", envelope.Postgres}, // pgx v4 and v5 stdlib
	{"github.com/lib/pq", envelope.Postgres},
	{"github.com/mattn/go-sqlite3", envelope.SQLite},
	{"modernc.org/sqlite", envelope.SQLite},
	{"github.com/glebarez/go-sqlite", envelope.SQLite},
	{"github.com/ncruces/go-sqlite3", envelope.SQLite},
	{"github.com/go-sql-driver/mysql", envelope.MySQL}, // MySQL and MariaDB
}

// detectDialect tells the dialect from db's driver, or, for a driver it
// does not know (a wrapper such as otelsql), by asking the database.
func detectDialect(ctx context.Context, db *sql.DB) (envelope.Dialect, error) {
	t := reflect.TypeOf(db.Driver())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	for _, k := range driverDialects {
		if strings.HasPrefix(pkg, k.pkg) {
			return k.d, nil
		}
	}
	var v string
	if err := db.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&v); err == nil {
		return envelope.SQLite, nil
	}
	if err := db.QueryRowContext(ctx, `SELECT current_setting('server_version_num')`).Scan(&v); err == nil {
		return envelope.Postgres, nil
	}
	if err := db.QueryRowContext(ctx, `SELECT @@version_comment`).Scan(&v); err == nil {
		return envelope.MySQL, nil
	}
	if err := db.PingContext(ctx); err != nil {
		// Not a configuration error: the database may come back.
		return "", fmt.Errorf("herald/relay: cannot tell the dialect of driver %s.%s while the database does not answer (set Config.Dialect to envelope.Postgres, envelope.SQLite or envelope.MySQL to create the relay without it): %w", pkg, t.Name(), err)
	}
	return "", cfgErr("Dialect", "cannot tell the dialect of driver %s.%s; set Config.Dialect to envelope.Postgres, envelope.SQLite or envelope.MySQL", pkg, t.Name())
}
