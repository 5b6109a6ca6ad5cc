package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
)

func init() {
	commands["dead"] = command{summary: "dead letters: list, show, retry, discard", run: runDead}
	commands["events"] = command{summary: "events in any state: list, show", run: runEvents}
	commands["tail"] = command{summary: "follow the events written from now on", run: runTail}
	commands["pause"] = command{summary: "stop every relay of the table leasing a topic's events", run: runPause}
	commands["resume"] = command{summary: "let the relays lease a paused topic again", run: runResume}
}

// stdin is where retry and discard read their answer; a test may swap it.
var stdin = os.Stdin

// queryFlags are the filters of the listing and batch commands.
type queryFlags struct {
	topics  listFlag
	tenants tenantFlag
	key     string
	since   string
	until   string
	errTxt  string
}

func (f *queryFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.topics, "topics", "only these topics (comma-separated names or prefix patterns ending in *)")
	fs.StringVar(&f.key, "key", "", "only this ordering key")
	fs.Var(&f.tenants, "tenant", tenantUsage)
	fs.StringVar(&f.since, "since", "", `only events created at or after this: RFC 3339, "2006-01-02[ 15:04:05]" (UTC) or "24h ago", "7d ago"`)
	fs.StringVar(&f.until, "until", "", "only events created before this (the same forms)")
	fs.StringVar(&f.errTxt, "error", "", "only events whose last error contains this text")
}

// set reports whether any filter is given.
func (f *queryFlags) set() bool {
	return len(f.topics) > 0 || len(f.tenants) > 0 || f.key != "" || f.since != "" || f.until != "" || f.errTxt != ""
}

func (f *queryFlags) query(now time.Time) (admin.Query, error) {
	q := admin.Query{OrderingKey: f.key, ErrorContains: f.errTxt}
	if len(f.topics) > 0 {
		q.Topics = f.topics
	}
	if len(f.tenants) > 0 {
		q.Tenants = f.tenants
	}
	var err error
	if f.since != "" {
		if q.Since, err = parseWhen(f.since, now); err != nil {
			return q, usagef("--since %q: %v", f.since, err)
		}
	}
	if f.until != "" {
		if q.Until, err = parseWhen(f.until, now); err != nil {
			return q, usagef("--until %q: %v", f.until, err)
		}
	}
	return q, nil
}

var agoRE = regexp.MustCompile(`^(\d+)d$`)

// parseWhen reads a point in time: "now", "<duration> ago" (a Go duration
// such as 90m or 1h30m, or whole days as 7d), RFC 3339, or a date with an
// optional time of day, in UTC.
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "now" {
		return now, nil
	}
	if d, ok := strings.CutSuffix(s, " ago"); ok {
		d = strings.TrimSpace(d)
		if m := agoRE.FindStringSubmatch(d); m != nil {
			n, err := strconv.Atoi(m[1])
			if err != nil || n > 100000 {
				return time.Time{}, fmt.Errorf("%s days is out of range", m[1])
			}
			return now.AddDate(0, 0, -n), nil
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur < 0 {
			return time.Time{}, fmt.Errorf(`want a duration before "ago", such as 24h, 90m or 7d`)
		}
		return now.Add(-dur), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New(`want RFC 3339 (2006-01-02T15:04:05Z), "2006-01-02[ 15:04:05]" in UTC, "now" or "<duration> ago" (24h ago, 7d ago)`)
}

// openAdmin opens the table of db's flags; its changes are logged to
// errOut.
func openAdmin(db dbFlags, errOut io.Writer) (*admin.Admin, *sql.DB, error) {
	d, err := db.dialect()
	if err != nil {
		return nil, nil, err
	}
	sqlDB, err := migrate.Open(d, db.dsn)
	if err != nil {
		return nil, nil, err
	}
	a, err := admin.New(admin.Config{DB: sqlDB, Dialect: d, Table: db.table,
		Logger: slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		_ = sqlDB.Close()
		return nil, nil, err
	}
	return a, sqlDB, nil
}

// subcommand dispatches "herald NAME SUB …".
func subcommand(ctx context.Context, name string, subs map[string]func(context.Context, []string, io.Writer, io.Writer) error,
	order string, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return usagef("%s: give a subcommand: %s", name, order)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(out, "Usage: herald %s %s [flags]\n\nherald %s SUB -h shows a subcommand's flags.\n", name, order, name)
		return nil
	}
	f, ok := subs[args[0]]
	if !ok {
		return usagef("%s: unknown subcommand %q; give one of %s", name, args[0], order)
	}
	return f(ctx, args[1:], out, errOut)
}

func runDead(ctx context.Context, args []string, out, errOut io.Writer) error {
	return subcommand(ctx, "dead", map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"list": func(ctx context.Context, a []string, o, e io.Writer) error {
			return runList(ctx, "dead list", true, a, o, e)
		},
		"show":    func(ctx context.Context, a []string, o, e io.Writer) error { return runShow(ctx, "dead show", a, o, e) },
		"retry":   func(ctx context.Context, a []string, o, e io.Writer) error { return runBatch(ctx, "retry", a, o, e) },
		"discard": func(ctx context.Context, a []string, o, e io.Writer) error { return runBatch(ctx, "discard", a, o, e) },
	}, "list|show|retry|discard", args, out, errOut)
}

func runEvents(ctx context.Context, args []string, out, errOut io.Writer) error {
	return subcommand(ctx, "events", map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"list": func(ctx context.Context, a []string, o, e io.Writer) error {
			return runList(ctx, "events list", false, a, o, e)
		},
		"show": func(ctx context.Context, a []string, o, e io.Writer) error {
			return runShow(ctx, "events show", a, o, e)
		},
	}, "list|show", args, out, errOut)
}

// runList is dead list (deadOnly) and events list.
func runList(ctx context.Context, name string, deadOnly bool, args []string, out, errOut io.Writer) error {
	var (
		db     dbFlags
		qf     queryFlags
		asJSON bool
		limit  int
		after  int64
		state  string
	)
	fs := flagSet(name, errOut)
	db.register(fs)
	qf.register(fs)
	fs.BoolVar(&asJSON, "json", false, `write the page as JSON: {"events": […], "next": N}`)
	fs.IntVar(&limit, "limit", admin.DefaultLimit, fmt.Sprintf("events per page (1..%d)", admin.MaxLimit))
	fs.Int64Var(&after, "after", 0, "the page after this sequence (the next page's --after is printed under a full page)")
	if !deadOnly {
		fs.StringVar(&state, "state", "all", "all, pending, failed (pending after a failed attempt) or dead")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	q, err := qf.query(time.Now())
	if err != nil {
		return err
	}
	if limit < 1 || limit > admin.MaxLimit {
		return usagef("--limit %d: want 1 to %d", limit, admin.MaxLimit)
	}
	q.Limit, q.After = limit, after
	q.State = admin.StateDead
	if !deadOnly {
		switch admin.State(state) {
		case admin.StateAll, admin.StatePending, admin.StateFailed, admin.StateDead:
			q.State = admin.State(state)
		default:
			return usagef("--state %q: want all, pending, failed or dead", state)
		}
	}
	a, sqlDB, err := openAdmin(db, errOut)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	ctx, cancel := context.WithTimeout(ctx, ctxTimeout)
	defer cancel()
	p, err := a.List(ctx, q)
	if err != nil {
		return asUsage(err)
	}
	if asJSON {
		return writeJSON(out, p)
	}
	if len(p.Events) == 0 {
		if deadOnly {
			fmt.Fprintln(out, "no dead letters")
		} else {
			fmt.Fprintln(out, "no events")
		}
		return nil
	}
	if err := eventTable(out, p.Events); err != nil {
		return err
	}
	if p.Next != 0 {
		fmt.Fprintf(errOut, "more: herald %s --after %d\n", name, p.Next)
	}
	return nil
}

// asUsage makes an admin validation error (a bad filter) a usage error.
func asUsage(err error) error {
	if errors.Is(err, envelope.ErrValidation) {
		return &usageError{msg: err.Error()}
	}
	return err
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// eventTable writes events as a table, with a TENANT column when one of
// them has a tenant.
func eventTable(out io.Writer, evs []admin.Event) error {
	tenants := slices.ContainsFunc(evs, func(e admin.Event) bool { return e.Tenant != "" })
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if tenants {
		fmt.Fprintln(tw, "SEQUENCE\tID\tSTATE\tTOPIC\tKEY\tTENANT\tATTEMPTS\tCREATED\tLAST ERROR")
	} else {
		fmt.Fprintln(tw, "SEQUENCE\tID\tSTATE\tTOPIC\tKEY\tATTEMPTS\tCREATED\tLAST ERROR")
	}
	for _, e := range evs {
		tenant := ""
		if tenants {
			tenant = orDash(clean(e.Tenant, 40)) + "\t"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s%d\t%s\t%s\n", e.Sequence, e.ID, e.State, clean(e.Topic, 60), orDash(clean(e.OrderingKey, 40)),
			tenant, e.Attempts, e.CreatedAt.UTC().Format(time.DateTime), orDash(clean(e.LastError, 60)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clean makes s safe and short for a terminal: control characters (an
// escape sequence in an error or a topic) become U+FFFD and tabs and
// newlines spaces, and it is cut to limit runes with "…".
func clean(s string, limit int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == limit {
			b.WriteString("…")
			break
		}
		switch {
		case r == '\n' || r == '\t' || r == '\r':
			r = ' '
		case unicode.IsControl(r) || r == utf8.RuneError:
			r = utf8.RuneError
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

func runShow(ctx context.Context, name string, args []string, out, errOut io.Writer) error {
	var (
		db     dbFlags
		asJSON bool
	)
	fs := flagSet(name+" ID", errOut)
	db.register(fs)
	fs.BoolVar(&asJSON, "json", false, "write the event as JSON, with held_back and held_back_first")
	pos, err := parseMixed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s: give one event id", name)
	}
	id, err := uuid.Parse(pos[0])
	if err != nil {
		return usagef("%s: %q is not an event id (a UUID)", name, pos[0])
	}
	a, sqlDB, err := openAdmin(db, errOut)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	ctx, cancel := context.WithTimeout(ctx, ctxTimeout)
	defer cancel()
	d, err := a.Get(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, d)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	row("id", d.ID.String())
	row("sequence", strconv.FormatInt(d.Sequence, 10))
	row("state", string(d.State))
	row("topic", clean(d.Topic, 1000))
	row("ordering key", orDash(clean(d.OrderingKey, 1000)))
	row("idempotency key", orDash(clean(d.IdempotencyKey, 1000)))
	row("tenant", orDash(clean(d.Tenant, 1000)))
	row("created", d.CreatedAt.UTC().Format(time.RFC3339Nano))
	row("attempts", strconv.Itoa(d.Attempts))
	row("last error", orDash(clean(d.LastError, 4000)))
	row("next attempt", when(d.NextAttemptAt))
	row("dead-lettered", when(d.DeadLetteredAt))
	row("published", when(d.PublishedAt))
	if len(d.Headers) > 0 {
		var hs []string
		for k, v := range d.Headers {
			hs = append(hs, clean(k, 200)+"="+clean(v, 1000))
		}
		sort.Strings(hs)
		row("headers", strings.Join(hs, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	payload, err := json.MarshalIndent(d.Payload, "  ", "  ")
	if err != nil {
		payload = d.Payload
	}
	fmt.Fprintf(out, "payload:\n  %s\n", cleanBlock(string(payload)))
	if d.HeldBack > 0 {
		fmt.Fprintf(out, "holds back %d later undelivered event(s) of key %q; the first:\n", d.HeldBack, clean(d.OrderingKey, 1000))
		return eventTable(out, d.HeldBackFirst)
	}
	return nil
}

// cleanBlock is clean for multi-line text: newlines kept.
func cleanBlock(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = clean(l, 1<<20)
	}
	return strings.Join(lines, "\n")
}

// runBatch is dead retry and dead discard.
func runBatch(ctx context.Context, op string, args []string, out, errOut io.Writer) error {
	name := "dead " + op
	var (
		db        dbFlags
		qf        queryFlags
		all, yes  bool
		asJSON    bool
		batchSize int
	)
	fs := flagSet(name+" [ID…]", errOut)
	db.register(fs)
	qf.register(fs)
	fs.BoolVar(&all, "all", false, "every dead letter of the table (instead of ids or a filter)")
	fs.BoolVar(&yes, "yes", false, "go ahead without asking (required when stdin is not a terminal)")
	fs.BoolVar(&asJSON, "json", false, `write the result as JSON: {"matched": N, "`+pastTense(op)+`": N}`)
	fs.IntVar(&batchSize, "batch-size", admin.DefaultBatchSize, fmt.Sprintf("events per committed batch (1..%d)", admin.MaxBatchSize))
	pos, err := parseMixed(fs, args)
	if err != nil {
		return err
	}
	if batchSize < 1 || batchSize > admin.MaxBatchSize {
		return usagef("--batch-size %d: want 1 to %d", batchSize, admin.MaxBatchSize)
	}
	q, err := qf.query(time.Now())
	if err != nil {
		return err
	}
	for _, p := range pos {
		id, err := uuid.Parse(p)
		if err != nil {
			return usagef("%s: %q is not an event id (a UUID)", name, p)
		}
		q.IDs = append(q.IDs, id)
	}
	switch {
	case all && (len(pos) > 0 || qf.set()):
		return usagef("%s: --all takes every dead letter; give it without ids or filters", name)
	case !all && len(pos) == 0 && !qf.set():
		return usagef("%s: give event ids, a filter (--topics, --key, --since, --until, --error) or --all", name)
	}
	a, sqlDB, err := openAdmin(db, errOut)
	if err != nil {
		return err
	}
	defer sqlDB.Close()

	// What it will touch: the count, the filter, the first rows.
	matched, err := a.Count(ctx, q)
	if err != nil {
		return asUsage(err)
	}
	desc := q.String()
	if matched == 0 {
		fmt.Fprintf(errOut, "herald %s: no dead letters in %s match %s; nothing to do\n", name, a.Table(), desc)
		if asJSON {
			return writeJSON(out, map[string]int64{"matched": 0, pastTense(op): 0})
		}
		return nil
	}
	fmt.Fprintf(errOut, "herald %s: %d dead letter(s) in %s match %s:\n", name, matched, a.Table(), desc)
	const shown = 10
	first := q
	first.Limit = shown
	p, err := a.List(ctx, first)
	if err != nil {
		return err
	}
	if err := eventTable(errOut, p.Events); err != nil {
		return err
	}
	if matched > int64(len(p.Events)) {
		fmt.Fprintf(errOut, "… and %d more\n", matched-int64(len(p.Events)))
	}
	if !yes {
		if !isTerminal(stdin) {
			return usagef("%s: stdin is not a terminal to ask on; give --yes to %s these %d dead letter(s)", name, op, matched)
		}
		verb := "retry (make due again, attempts reset)"
		if op == "discard" {
			verb = "discard (delete, releasing their keys)"
		}
		fmt.Fprintf(errOut, "This will %s %d dead letter(s), in batches of %d. Go ahead? [y/N] ", verb, matched, batchSize)
		answer, _ := bufio.NewReader(stdin).ReadString('\n')
		switch strings.ToLower(strings.TrimSpace(answer)) {
		case "y", "yes":
		default:
			return &exitError{code: 1, msg: "herald " + name + ": not confirmed; nothing done"}
		}
	}

	start := time.Now()
	opts := admin.BatchOptions{Size: batchSize, Progress: func(done int64) {
		fmt.Fprintf(errOut, "%s %d of %d (%.0f%%)\n", pastTense(op), done, matched, 100*float64(done)/float64(max(matched, done)))
	}}
	var n int64
	if op == "retry" {
		n, err = a.RetryBatches(ctx, q, opts)
	} else {
		n, err = a.DiscardBatches(ctx, q, opts)
	}
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: 130, msg: fmt.Sprintf("herald %s: interrupted after %s %d of %d; the batch in hand was rolled back: run the same command again to continue",
				name, pastTense(op), n, matched)}
		}
		return fmt.Errorf("herald %s: stopped after %s %d of %d: %w", name, pastTense(op), n, matched, err)
	}
	if asJSON {
		return writeJSON(out, map[string]int64{"matched": matched, pastTense(op): n})
	}
	fmt.Fprintf(out, "%s %d dead letter(s) in %s\n", pastTense(op), n, time.Since(start).Round(time.Millisecond))
	return nil
}

func pastTense(op string) string {
	if op == "retry" {
		return "retried"
	}
	return op + "ed"
}

func runTail(ctx context.Context, args []string, out, errOut io.Writer) error {
	var (
		db       dbFlags
		topics   listFlag
		tenants  tenantFlag
		key      string
		asJSON   bool
		interval time.Duration
		from     int64
	)
	fs := flagSet("tail", errOut)
	db.register(fs)
	fs.Var(&topics, "topics", "only these topics (comma-separated names or prefix patterns ending in *)")
	fs.StringVar(&key, "key", "", "only this ordering key")
	fs.Var(&tenants, "tenant", tenantUsage)
	fs.BoolVar(&asJSON, "json", false, "write one JSON object per event and line")
	fs.DurationVar(&interval, "interval", time.Second, "how often to read the table")
	fs.Int64Var(&from, "from", -1, "show the events after this sequence (default: only those written from now on)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if interval < 10*time.Millisecond {
		return usagef("--interval %s: want at least 10ms", interval)
	}
	q := admin.Query{State: admin.StateAll, OrderingKey: key}
	if len(topics) > 0 {
		q.Topics = topics
	}
	if len(tenants) > 0 {
		q.Tenants = tenants
	}
	a, sqlDB, err := openAdmin(db, errOut)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	if from < 0 {
		if from, err = a.LastSequence(ctx); err != nil {
			return err
		}
	}
	q.After = from
	fmt.Fprintf(errOut, "herald tail: following %s after sequence %d (interrupt to stop)\n", a.Table(), from)
	enc := json.NewEncoder(out)
	return asUsage(a.Follow(ctx, q, interval, func(e admin.Event) error {
		if asJSON {
			return enc.Encode(e)
		}
		tenant := ""
		if e.Tenant != "" {
			tenant = "  tenant=" + clean(e.Tenant, 200)
		}
		_, err := fmt.Fprintf(out, "%d  %s  %s  %s  key=%s%s  %s\n", e.Sequence, e.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
			e.ID, clean(e.Topic, 200), orDash(clean(e.OrderingKey, 200)), tenant, e.State)
		return err
	}))
}

// topicCommand parses the flags of pause/resume (extra adds its own) and
// its one topic, and opens the table's admin.
func topicCommand(name string, args []string, errOut io.Writer, extra func(*flag.FlagSet)) (topic string, a *admin.Admin, sqlDB *sql.DB, err error) {
	var db dbFlags
	fs := flagSet(name+" TOPIC", errOut)
	db.register(fs)
	if extra != nil {
		extra(fs)
	}
	pos, err := parseMixed(fs, args)
	if err != nil {
		return "", nil, nil, err
	}
	if len(pos) != 1 {
		return "", nil, nil, usagef("%s: give one topic (an exact name)", name)
	}
	a, sqlDB, err = openAdmin(db, errOut)
	return pos[0], a, sqlDB, err
}

func runPause(ctx context.Context, args []string, out, errOut io.Writer) error {
	var reason string
	topic, a, sqlDB, err := topicCommand("pause", args, errOut, func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", "", "why, recorded with the pause")
	})
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	ctx, cancel := context.WithTimeout(ctx, ctxTimeout)
	defer cancel()
	if err := a.Pause(ctx, topic, reason); err != nil {
		return asUsage(err)
	}
	fmt.Fprintf(out, "paused %s: relays of %s lease none of its events from their next poll (herald resume %s)\n", clean(topic, 1000), a.Table(), clean(topic, 1000))
	return nil
}

func runResume(ctx context.Context, args []string, out, errOut io.Writer) error {
	topic, a, sqlDB, err := topicCommand("resume", args, errOut, nil)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	ctx, cancel := context.WithTimeout(ctx, ctxTimeout)
	defer cancel()
	was, err := a.Resume(ctx, topic)
	if err != nil {
		return asUsage(err)
	}
	if !was {
		fmt.Fprintf(out, "%s was not paused\n", clean(topic, 1000))
		return nil
	}
	fmt.Fprintf(out, "resumed %s\n", clean(topic, 1000))
	return nil
}
