package main

import (
	"context"
	"flag"
	"io"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
)

func init() {
	commands["migrate"] = command{summary: "create or change the outbox table: up, down, status, print", run: runMigrate}
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
		fs := migrateFlags(errOut, "migrate "+sub, new(dbFlags), new(int), new(bool), new(string))
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
	)
	fs := migrateFlags(errOut, "migrate "+action, &db, &version, &down, &dialect)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if version < 0 || version > envelope.LatestVersion {
		return usagef("--version %d: versions are 1..%d", version, envelope.LatestVersion)
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

func migrateFlags(errOut io.Writer, name string, db *dbFlags, version *int, down *bool, dialect *string) *flag.FlagSet {
	fs := flagSet(name, errOut)
	db.register(fs)
	fs.IntVar(version, "version", 0, "up/down: the version to migrate to (up: default the latest; down: default one below the current); print: only this version")
	fs.BoolVar(down, "down", false, "print: the down script of --version (default the latest)")
	fs.StringVar(dialect, "dialect", "", `print: "postgres", "sqlite" or "mysql" (default: told from --dsn)`)
	return fs
}
