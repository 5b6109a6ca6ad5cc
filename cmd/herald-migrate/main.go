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
//
// It is kept for existing scripts; `herald migrate` (cmd/herald) does the
// same with subcommands and reads the dialect from the DSN.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
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
		return migrate.Print(out, d, *table, *version, *down)
	case *dsn != "":
		db, err := migrate.Open(d, *dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		if *status {
			return migrate.Status(ctx, out, db, d, *table)
		}
		return migrate.To(ctx, out, db, d, *table, *version)
	}
	return errors.New("give -print, or -dsn to migrate a database (-h for help)")
}
