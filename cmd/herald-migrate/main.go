// Command herald-migrate prints the SQL of herald's outbox table versions
// for migration tools (goose, atlas, golang-migrate), or applies them.
//
//	go run github.com/heraldgo/herald/cmd/herald-migrate -dialect postgres -print
//	go run github.com/heraldgo/herald/cmd/herald-migrate -dialect postgres -print -version 2
//	go run github.com/heraldgo/herald/cmd/herald-migrate -dialect postgres -print -version 2 -down
//	go run github.com/heraldgo/herald/cmd/herald-migrate -dialect postgres -dsn "$DATABASE_URL"
//	go run github.com/heraldgo/herald/cmd/herald-migrate -dialect sqlite -dsn app.db -status
//
// -print writes the up script of every version (or of -version, or its
// down script with -down); each script also keeps herald's record of
// applied versions (envelope.MigrationTable), so envelope.Migrate run later
// finds them applied. -dsn applies envelope.MigrateTo(-version, default the
// latest) to the database (PostgreSQL through pgx, SQLite through the
// pure-Go modernc.org/sqlite driver); -status prints the table's version.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	_ "modernc.org/sqlite"             // "sqlite", pure Go

	"github.com/heraldgo/herald/envelope"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "herald-migrate:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("herald-migrate", flag.ContinueOnError)
	fs.SetOutput(out)
	dialect := fs.String("dialect", "", `"postgres" or "sqlite" (required)`)
	table := fs.String("table", "", "outbox table, schema.table on PostgreSQL (default herald_outbox)")
	printSQL := fs.Bool("print", false, "print the SQL instead of applying it")
	version := fs.Int("version", 0, "with -print: only this version; with -dsn: migrate to it (default: latest)")
	down := fs.Bool("down", false, "with -print: the down script of -version (default: the latest)")
	dsn := fs.String("dsn", "", "database to migrate (PostgreSQL URL or SQLite file)")
	status := fs.Bool("status", false, "with -dsn: print the table's version and change nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	d := envelope.Dialect(*dialect)
	if err := d.Validate(); err != nil {
		return err
	}
	switch {
	case *printSQL:
		from, to := 1, envelope.LatestVersion
		if *version != 0 || *down {
			from = *version
			if from == 0 {
				from = envelope.LatestVersion
			}
			to = from
		}
		for v := from; v <= to; v++ {
			s, err := envelope.MigrationSQL(d, *table, v, *down)
			if err != nil {
				return err
			}
			if v > from {
				fmt.Fprintln(out)
			}
			fmt.Fprint(out, s)
		}
		return nil
	case *dsn != "":
		driver := "pgx"
		if d == envelope.SQLite {
			driver = "sqlite"
		}
		db, err := sql.Open(driver, *dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		if *status {
			v, err := envelope.Version(ctx, db, d, *table)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "version %d (latest %d)\n", v, envelope.LatestVersion)
			return nil
		}
		to := *version
		if to == 0 {
			to = envelope.LatestVersion
		}
		if err := envelope.MigrateTo(ctx, db, d, *table, to); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s at version %d\n", strings.TrimSpace(tableName(*table)), to)
		return nil
	}
	return errors.New("give -print, or -dsn to migrate a database (-h for help)")
}

func tableName(t string) string {
	if t == "" {
		return envelope.DefaultTable
	}
	return t
}
