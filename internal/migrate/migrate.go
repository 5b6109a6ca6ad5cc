// Package migrate holds the migration commands shared by `herald migrate`
// and the older `herald-migrate`: print the SQL of herald's outbox table
// versions, apply them, report the table's version.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	_ "modernc.org/sqlite"             // "sqlite", pure Go

	"github.com/heraldgo/herald/envelope"
)

// Print writes the up script of every version (from 1 to the latest), or
// with version != 0 or down the script of that one version (0 = the
// latest), its down script when down is set.
func Print(out io.Writer, d envelope.Dialect, table string, version int, down bool) error {
	if err := d.Validate(); err != nil {
		return err
	}
	from, to := 1, envelope.LatestVersionFor(d)
	if version != 0 || down {
		from = version
		if from == 0 {
			from = envelope.LatestVersionFor(d)
		}
		to = from
	}
	for v := from; v <= to; v++ {
		s, err := envelope.MigrationSQL(d, table, v, down)
		if err != nil {
			return err
		}
		if v > from {
			fmt.Fprintln(out)
		}
		fmt.Fprint(out, s)
	}
	return nil
}

// Open opens dsn with the driver of d: pgx for PostgreSQL, the pure-Go
// modernc.org/sqlite for SQLite, go-sql-driver/mysql for MySQL (dsn
// "mysql://" followed by that driver's DSN; parseTime is set).
func Open(d envelope.Dialect, dsn string) (*sql.DB, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	driver := "pgx"
	switch d {
	case envelope.SQLite:
		driver = "sqlite"
	case envelope.MySQL:
		driver = "mysql"
		if len(dsn) >= len("mysql://") && strings.EqualFold(dsn[:len("mysql://")], "mysql://") {
			dsn = dsn[len("mysql://"):]
		}
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		cfg.ParseTime = true
		dsn = cfg.FormatDSN()
	}
	return sql.Open(driver, dsn)
}

// To migrates the table up or down to version (0 = the latest) and writes
// "<table> at version N".
func To(ctx context.Context, out io.Writer, db *sql.DB, d envelope.Dialect, table string, version int) error {
	if version == 0 {
		version = envelope.LatestVersionFor(d)
	}
	if err := envelope.MigrateTo(ctx, db, d, table, version); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s at version %d\n", strings.TrimSpace(TableName(table)), version)
	return nil
}

// Status writes "version N (latest M)".
func Status(ctx context.Context, out io.Writer, db *sql.DB, d envelope.Dialect, table string) error {
	v, err := envelope.Version(ctx, db, d, table)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "version %d (latest %d)\n", v, envelope.LatestVersionFor(d))
	return nil
}

// TableName is table, or envelope.DefaultTable when it is "".
func TableName(t string) string {
	if t == "" {
		return envelope.DefaultTable
	}
	return t
}
