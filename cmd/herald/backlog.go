package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
	"github.com/heraldgo/herald/relay"
)

func init() {
	commands["backlog"] = command{summary: "pending events, oldest pending age and dead letters by topic (or tenant)", run: runBacklog}
}

// tenantBacklogRow is one tenant of `herald backlog --by-tenant --json`.
type tenantBacklogRow struct {
	Tenant                  string  `json:"tenant"`
	Pending                 int64   `json:"pending"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	DeadLettered            int64   `json:"dead_lettered"`
}

// backlogRow is one topic of `herald backlog --json`.
type backlogRow struct {
	Topic                   string  `json:"topic"`
	Pending                 int64   `json:"pending"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	DeadLettered            int64   `json:"dead_lettered"`
	Paused                  bool    `json:"paused"`
}

func runBacklog(ctx context.Context, args []string, out, errOut io.Writer) error {
	var (
		db      dbFlags
		asJSON  bool
		topics  listFlag
		exclude listFlag
		tenants tenantFlag
		byTen   bool
	)
	fs := flagSet("backlog", errOut)
	db.register(fs)
	fs.BoolVar(&asJSON, "json", false, "write a JSON array instead of a table")
	fs.Var(&topics, "topics", "only these topics (comma-separated names or prefix patterns ending in *)")
	fs.Var(&exclude, "exclude-topics", "leave out these topics (same patterns)")
	fs.Var(&tenants, "tenant", tenantUsage)
	fs.BoolVar(&byTen, "by-tenant", false, "one row per tenant instead of per topic")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
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
	// A relay that is never started reads the backlog: the one statement
	// of BacklogByTopic, with the relay's own topic filter.
	cfg := relay.Config{Dialect: d, Table: db.table, Topics: topics, ExcludeTopics: exclude, Name: "herald-backlog"}
	if len(tenants) > 0 {
		cfg.Tenants = tenants
	}
	r, err := relay.New(sqlDB, delivery.Func(func(context.Context, *envelope.Event) error { return nil }), cfg)
	if err != nil {
		return err
	}
	if byTen {
		return backlogByTenant(ctx, r, asJSON, out)
	}
	bl, err := r.BacklogByTopic(ctx)
	if err != nil {
		return err
	}
	rows := make([]backlogRow, 0, len(bl))
	for _, b := range bl {
		rows = append(rows, backlogRow{Topic: b.Topic, Pending: b.Pending, OldestPendingAgeSeconds: b.OldestPendingAge.Seconds(), DeadLettered: b.DeadLettered, Paused: b.Paused})
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "no pending or dead-lettered events, no paused topics")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPENDING\tOLDEST PENDING\tDEAD\tPAUSED")
	for _, b := range bl {
		age := "-"
		if b.Pending > 0 {
			age = b.OldestPendingAge.Round(time.Second).String()
		}
		paused := "-"
		if b.Paused {
			paused = "paused"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", clean(b.Topic, 200), b.Pending, age, b.DeadLettered, paused)
	}
	return tw.Flush()
}

// backlogByTenant writes `herald backlog --by-tenant`: BacklogByTenant,
// within the relay's topics and tenants.
func backlogByTenant(ctx context.Context, r *relay.Relay, asJSON bool, out io.Writer) error {
	bl, err := r.BacklogByTenant(ctx)
	if err != nil {
		return err
	}
	rows := make([]tenantBacklogRow, 0, len(bl))
	for _, b := range bl {
		rows = append(rows, tenantBacklogRow{Tenant: b.Tenant, Pending: b.Pending, OldestPendingAgeSeconds: b.OldestPendingAge.Seconds(), DeadLettered: b.DeadLettered})
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "no pending or dead-lettered events")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tPENDING\tOLDEST PENDING\tDEAD")
	for _, b := range bl {
		age := "-"
		if b.Pending > 0 {
			age = b.OldestPendingAge.Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", orDash(clean(b.Tenant, 200)), b.Pending, age, b.DeadLettered)
	}
	return tw.Flush()
}
