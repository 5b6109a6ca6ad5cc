// Command entlibrary shows herald with ent, end to end, with no server:
// ent on a SQLite file in a temporary directory, schemas captured with
// entcapture.Mixin (an edge whose rows the database deletes with their
// parent, and an edge schema), their generated code (ent/, made by
// `go generate ./ent` with entcapturegen.Extension()), and a relay that
// delivers every event in order to a Go function that prints it.
//
//	go run ./examples/entlibrary
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/mattn/go-sqlite3"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/examples/entlibrary/ent"
	"github.com/heraldgo/herald/examples/entlibrary/ent/loan"
	_ "github.com/heraldgo/herald/examples/entlibrary/ent/runtime" // installs the schemas' capture hooks
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

var occurredAt = regexp.MustCompile(`,"occurred_at":"[^"]*"`)

// run writes through ent, relays the events to out, and returns how many
// were delivered.
func run(ctx context.Context, out io.Writer) (int, error) {
	dir, err := os.MkdirTemp("", "herald-entlibrary-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	dsn := "file:" + filepath.Join(dir, "app.db") + "?_foreign_keys=1&_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate"
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if err := envelope.Migrate(ctx, db, envelope.SQLite, ""); err != nil {
		return 0, err
	}
	w := wakeup.NewInProcess()
	defer w.Close()

	// The capture driver: a write made without a transaction runs, with
	// its events, in one the capture opens.
	client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.SQLite, db),
		entcapture.Config{Namespace: "library", Wakeup: w})))
	if err := client.Schema.Create(ctx); err != nil {
		return 0, err
	}

	const want = 11
	delivered := make(chan struct{}, want)
	printEvent := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		fmt.Fprintf(out, "%2d %-27s %s\n", e.Sequence, e.Topic, occurredAt.ReplaceAll(e.Payload, nil))
		delivered <- struct{}{}
		return nil
	})
	r, err := relay.New(db, printEvent, relay.Config{Wakeup: w, Concurrency: 1})
	if err != nil {
		return 0, err
	}
	if err := r.Start(ctx); err != nil {
		return 0, err
	}

	// Rows and events commit together: five events, one transaction.
	tx, err := client.Tx(ctx)
	if err != nil {
		return 0, err
	}
	ann := tx.Reader.Create().SetName("Ann").SetEmail("ann@example.org").SaveX(ctx)
	tx.Loan.Create().SetBook("Dune").SetReader(ann).SaveX(ctx)
	sf := tx.Club.Create().SetName("sf").SaveX(ctx)
	tx.Membership.Create().SetReader(ann).SetClub(sf).SaveX(ctx)
	if _, err := entcapture.Enqueue(ctx, tx, envelope.Message{Topic: "mail.send",
		Payload: map[string]any{"to": ann.ID, "template": "welcome"}, IdempotencyKey: fmt.Sprint("welcome:", ann.ID)}); err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	// Without a transaction, each write is atomic with its events.
	client.Loan.Create().SetBook("Emma").SetReaderID(ann.ID).SaveX(ctx)
	client.Loan.Update().Where(loan.Book("Dune")).SetStatus("returned").SaveX(ctx)
	// The database deletes Ann's loans and memberships with her: herald
	// reads them first, so each has its event.
	client.Reader.DeleteOne(ann).ExecX(ctx)

	timeout := time.After(10 * time.Second)
	for range want {
		select {
		case <-delivered:
		case <-timeout:
			return 0, errors.New("entlibrary: events not delivered within 10s")
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil {
		return 0, err
	}
	return want, nil
}
