package oracle

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/integration/entsuite/oracle/glueparse"
)

// The glue below is what the entsuite harness patches into the generated
// code of ent's integration suite: Open replaces the sql.Open of the
// generated ent.Open, Wrap is called by the generated NewClient, Finish
// by the TestMain it adds. The environment says what to do:
//
//	HERALD_ENTSUITE_MODE    keys, after, beforeandafter (default): the payload mode
//	HERALD_ENTSUITE_ORACLE  1: watch the clients ent.Open opens with the oracle
//	HERALD_ENTSUITE_REPORT  a file for the counts, written by Finish

var (
	glueMu    sync.Mutex
	oracles   = map[Dialect]*Oracle{}
	migrated  = map[*stdsql.DB]bool{}
	watchedDB = map[*stdsql.DB]bool{}
	watched   int // clients on a database the oracle watches
	wrapped   int
)

func mode() (envelope.PayloadMode, Mode) {
	switch strings.ToLower(os.Getenv("HERALD_ENTSUITE_MODE")) {
	case "keys":
		return envelope.Keys, Keys
	case "after":
		return envelope.After, After
	}
	return envelope.BeforeAndAfter, BeforeAndAfter
}

func oracleFor(driverName string, models map[string]string, omit map[string][]string) *Oracle {
	d := SQLite
	if driverName == dialect.Postgres {
		d = Postgres
	}
	glueMu.Lock()
	defer glueMu.Unlock()
	o := oracles[d]
	if o == nil {
		_, m := mode()
		o = New(d, Tables{Models: map[string]string{}, Omit: map[string][]string{}, Mode: m}, func(f Finding) {
			fmt.Printf("herald-oracle: %s\n", f)
		})
		oracles[d] = o
	}
	for k, v := range models {
		o.tables.Models[k] = v
		o.models[v] = k
	}
	for k, v := range omit {
		o.tables.Omit[k] = v
	}
	return o
}

// Open opens the driver of the generated ent.Open: through the oracle
// when HERALD_ENTSUITE_ORACLE=1. models maps the captured schemas to
// their tables, omit the tables to the columns their events leave out.
func Open(driverName, dsn string, models map[string]string, omit map[string][]string) (*entsql.Driver, error) {
	if os.Getenv("HERALD_ENTSUITE_ORACLE") != "1" || (driverName != dialect.SQLite && driverName != dialect.Postgres) {
		return entsql.Open(driverName, dsn)
	}
	probe, err := stdsql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	drv := probe.Driver()
	_ = probe.Close()
	db := oracleFor(driverName, models, omit).OpenDB(drv, dsn)
	glueMu.Lock()
	watchedDB[db] = true
	glueMu.Unlock()
	return entsql.OpenDB(driverName, db), nil
}

// Wrap is the generated NewClient's: it migrates the outbox table on the
// client's database and returns the driver wrapped in entcapture.Driver,
// with every schema in the payload mode HERALD_ENTSUITE_MODE says.
func Wrap(drv dialect.Driver, schemas []string) dialect.Driver {
	if _, ok := drv.(*entcapture.CaptureDriver); ok {
		return drv
	}
	inner := drv
	for {
		if d, ok := inner.(*dialect.DebugDriver); ok {
			inner = d.Driver
			continue
		}
		break
	}
	if sd, ok := inner.(*entsql.Driver); ok {
		db := sd.DB()
		glueMu.Lock()
		done := migrated[db]
		glueMu.Unlock()
		if !done {
			d := envelope.SQLite
			switch sd.Dialect() {
			case dialect.Postgres:
				d = envelope.Postgres
			case dialect.MySQL:
				d = envelope.MySQL
			}
			if sd.Dialect() == dialect.SQLite || sd.Dialect() == dialect.Postgres || sd.Dialect() == dialect.MySQL {
				if err := envelope.Migrate(context.Background(), db, d, ""); err != nil {
					fmt.Fprintln(os.Stderr, "herald-entsuite: migrate the outbox:", err)
					os.Exit(3)
				}
			}
			glueMu.Lock()
			migrated[db] = true
			glueMu.Unlock()
		}
		glueMu.Lock()
		if watchedDB[db] {
			watched++
		}
		glueMu.Unlock()
	}
	glueMu.Lock()
	wrapped++
	glueMu.Unlock()
	pm, _ := mode()
	opts := map[string]envelope.Options{}
	for _, s := range schemas {
		opts[s] = envelope.Options{Payload: pm}
	}
	return entcapture.Driver(drv, entcapture.Config{Options: opts})
}

// Report is what Finish writes.
type Report struct {
	Clients  int   `json:"clients"`  // opened on entcapture.Driver
	Watched  int   `json:"watched"`  // of them, through the oracle
	Checks   int64 `json:"checks"`   // transactions and statements judged
	Events   int64 `json:"events"`   // events judged
	Rows     int64 `json:"rows"`     // rows changed in them
	Findings int64 `json:"findings"` // disagreements
}

// Finish writes the counts to HERALD_ENTSUITE_REPORT.
func Finish() {
	p := os.Getenv("HERALD_ENTSUITE_REPORT")
	if p == "" {
		return
	}
	glueMu.Lock()
	r := Report{Clients: wrapped}
	for _, o := range oracles {
		s := o.Stats()
		r.Checks += s.Checks
		r.Events += s.Events
		r.Rows += s.Rows
		r.Findings += s.Findings
	}
	r.Watched = watched
	glueMu.Unlock()
	b, _ := json.Marshal(r)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "herald-entsuite: write the report:", err)
	}
}

// JoinTables returns the captured join tables of glue (the generated
// entcapture.go), model -> table (glueparse.JoinTables).
func JoinTables(glue []byte) map[string]string { return glueparse.JoinTables(glue) }
