package main

import (
	"cmp"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/migrate"
)

func init() {
	commands["migrate"] = command{summary: "create or change the outbox table (or with --inbox the inbox table): up, down, status, print", run: runMigrate}
}

func runMigrate(ctx context.Context, args []string, out, errOut io.Writer) error {
	const sub = "up|down|status|print"
	if len(args) == 0 {
		return usagef("migrate: give a subcommand: %s", sub)
	}
	action := args[0]
	switch action {
	case "up", "down", "status", "print":
	case "-h", "-help", "--help", "help":
		fs := migrateFlags(errOut, "migrate "+sub, new(dbFlags), new(int), new(bool), new(string), new(bool))
		fs.Usage()
		return nil
	default:
		return usagef("migrate: unknown subcommand %q; give one of %s", action, sub)
	}
	var (
		db      dbFlags
		version int
		down    bool
		dialect string
		inboxT  bool
	)
	fs := migrateFlags(errOut, "migrate "+action, &db, &version, &down, &dialect, &inboxT)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	latest := envelope.LatestVersion
	if inboxT {
		latest = inbox.LatestVersion
	}
	if version < 0 || version > latest {
		return usagef("--version %d: versions are 1..%d", version, latest)
	}
	if action == "print" {
		d := envelope.Dialect(dialect)
		if dialect == "" && db.dsn != "" {
			d = dialectOf(db.dsn)
		}
		if d == "" {
			return usagef("migrate print: give --dialect postgres|sqlite|mysql (or a --dsn to tell it from)")
		}
		if err := d.Validate(); err != nil {
			return usagef("--dialect: %v", err)
		}
		if inboxT {
			return printInbox(out, d, db.table, version, down)
		}
		return migrate.Print(out, d, db.table, version, down)
	}
	if down && action != "print" {
		return usagef("--down is for migrate print; use migrate down")
	}
	d, err := db.dialect()
	if err != nil {
		return err
	}
	sqlDB, err := migrate.Open(d, db.dsn)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	ctx, cancel := context.WithTimeout(ctx, ctxTimeout)
	defer cancel()
	if inboxT {
		return migrateInbox(ctx, out, sqlDB, d, db.table, action, version)
	}
	switch action {
	case "status":
		return migrate.Status(ctx, out, sqlDB, d, db.table)
	case "down":
		if version == 0 {
			cur, err := envelope.Version(ctx, sqlDB, d, db.table)
			if err != nil {
				return err
			}
			if cur <= 1 {
				return usagef("migrate down: the table is at version %d; nothing below it (drop the table to remove it)", cur)
			}
			version = cur - 1
		}
		return migrate.To(ctx, out, sqlDB, d, db.table, version)
	default: // up
		return migrate.To(ctx, out, sqlDB, d, db.table, version)
	}
}

// printInbox is migrate print --inbox.
func printInbox(out io.Writer, d envelope.Dialect, table string, version int, down bool) error {
	from, to := 1, inbox.LatestVersion
	if version != 0 || down {
		from = cmp.Or(version, inbox.LatestVersion)
		to = from
	}
	for v := from; v <= to; v++ {
		s, err := inbox.MigrationSQL(d, table, v, down)
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

// migrateInbox is migrate up|down|status --inbox.
func migrateInbox(ctx context.Context, out io.Writer, sqlDB *sql.DB, d envelope.Dialect, table, action string, version int) error {
	name := cmp.Or(table, inbox.DefaultTable)
	cur, err := inbox.Version(ctx, sqlDB, d, table)
	if err != nil {
		return err
	}
	switch action {
	case "status":
		fmt.Fprintf(out, "version %d (latest %d)\n", cur, inbox.LatestVersion)
		return nil
	case "down":
		if version == 0 {
			if cur <= 1 {
				return usagef("migrate down --inbox: the table is at version %d; nothing below it (drop the table to remove it)", cur)
			}
			version = cur - 1
		}
	default:
		version = cmp.Or(version, inbox.LatestVersion)
	}
	if err := inbox.MigrateTo(ctx, sqlDB, d, table, version); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s at version %d\n", name, version)
	return nil
}

func migrateFlags(errOut io.Writer, name string, db *dbFlags, version *int, down *bool, dialect *string, inboxT *bool) *flag.FlagSet {
	fs := flagSet(name, errOut)
	db.register(fs)
	fs.IntVar(version, "version", 0, "up/down: the version to migrate to (up: default the latest; down: default one below the current); print: only this version")
	fs.BoolVar(down, "down", false, "print: the down script of --version (default the latest)")
	fs.StringVar(dialect, "dialect", "", `print: "postgres", "sqlite" or "mysql" (default: told from --dsn)`)
	fs.BoolVar(inboxT, "inbox", false, "the inbox table (herald_inbox; --table names another) instead of the outbox table")
	return fs
}
