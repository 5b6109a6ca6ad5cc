package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/heraldgo/herald/envelope"
)

// command is one subcommand of herald, each in a file of its own
// (migrate.go, backlog.go, relay.go); a new one adds itself to commands
// in its file's init.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, out, errOut io.Writer) error
}

var commands = map[string]command{}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// exitError ends the command with its own exit status: 130 for an
// interrupted batch job, 1 for a question answered no.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

func exitCode(err error, errOut io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if msg := err.Error(); strings.HasPrefix(msg, "herald") {
		fmt.Fprintln(errOut, msg)
	} else {
		fmt.Fprintln(errOut, "herald:", msg)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue *usageError
	if errors.As(err, &ue) || errors.Is(err, envelope.ErrConfiguration) {
		return 2
	}
	return 1
}

func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		usage(errOut)
		return usagef("no command given (herald help lists them)")
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(ctx, []string{"-h"}, out, out)
			}
			return usagef("help: unknown command %q", args[1])
		}
		usage(out)
		return nil
	}
	c, ok := commands[name]
	if !ok {
		return usagef("unknown command %q (herald help lists them)", name)
	}
	return c.run(ctx, args[1:], out, errOut)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "herald operates a herald transactional outbox.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: herald <command> [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "herald help <command> shows its flags; every flag --x-y can also be given as HERALD_X_Y (the flag wins).")
}

// flagSet is a command's flags, with the HERALD_* environment behind them.
func flagSet(name string, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("herald "+name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(errOut, "Usage: herald %s [flags]\n\nFlags (each also HERALD_<NAME>, dashes as underscores):\n", name)
		fs.PrintDefaults()
	}
	return fs
}

// envName is the environment variable of a flag: HERALD_ and its name in
// upper case, dashes as underscores.
func envName(flagName string) string {
	return "HERALD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse parses args, then sets each flag the command line left unset from
// its HERALD_* variable when that is set. A bad value is a usage error
// naming the flag or the variable.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{msg: err.Error()}
	}
	return fromEnv(fs)
}

// parseMixed is parse for commands with positional arguments, which may
// come before, between or after the flags (herald pause TOPIC --reason x).
// It returns the positional arguments.
func parseMixed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, fromEnv(fs)
}

// noEnv are the flags only the command line gives: a variable left in an
// environment must not approve a destructive command.
var noEnv = map[string]bool{"yes": true, "all": true}

// fromEnv sets each flag the command line left unset from its HERALD_*
// variable when that is set.
func fromEnv(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil || noEnv[f.Name] {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok || (v == "" && f.Name == "tenant") { // --tenant '' narrows: an empty HERALD_TENANT does not
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = usagef("%s=%q (for --%s): %v", envName(f.Name), v, f.Name, e)
		}
	})
	if err != nil {
		return err
	}
	return nil
}

// dbFlags are the flags every command that opens the table shares.
type dbFlags struct {
	dsn   string
	table string
}

func (f *dbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dsn, "dsn", "", "the database: a PostgreSQL URL (postgres://…) or key=value string, mysql:// and a go-sql-driver/mysql DSN (mysql://root@tcp(127.0.0.1:3306)/test), or a SQLite file path or file: URI")
	fs.StringVar(&f.table, "table", "", "outbox table, schema.table on PostgreSQL (default herald_outbox)")
}

// dialect tells the dialect from the DSN.
func (f *dbFlags) dialect() (envelope.Dialect, error) {
	if f.dsn == "" {
		return "", usagef("--dsn (or HERALD_DSN) is required")
	}
	return dialectOf(f.dsn), nil
}

// dialectOf: postgres:// and postgresql:// URLs and key=value strings
// (host=… dbname=…) are PostgreSQL; mysql://<go-sql-driver/mysql DSN>
// (mysql://user:pass@tcp(host:3306)/db) is MySQL or MariaDB; anything else
// is a SQLite path or file: URI.
func dialectOf(dsn string) envelope.Dialect {
	l := strings.ToLower(dsn)
	if strings.HasPrefix(l, "mysql://") {
		return envelope.MySQL
	}
	if strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://") {
		return envelope.Postgres
	}
	if !strings.HasPrefix(l, "file:") && strings.Contains(l, "=") && (strings.Contains(l, "host=") || strings.Contains(l, "dbname=") || strings.Contains(l, "user=")) {
		return envelope.Postgres
	}
	return envelope.SQLite
}

// noArgs rejects positional arguments a command does not take.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// ctxTimeout bounds the one-shot commands' database work.
const ctxTimeout = 5 * time.Minute
