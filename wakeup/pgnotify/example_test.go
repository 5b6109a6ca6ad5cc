package pgnotify_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup/pgnotify"
)

// One Wakeup serves both the writers and the relay: a captured write
// NOTIFYs in its transaction, and the relay, which would otherwise poll
// once a minute, delivers it as soon as it commits.
func Example() {
	dsn := os.Getenv("HERALD_POSTGRES_DSN")
	if dsn == "" {
		dsn = testkit.DefaultPostgresDSN
	}
	sqlDB, err := sql.Open("pgx", dsn)
	if err != nil {
		panic(err)
	}
	defer sqlDB.Close()
	ctx := context.Background()
	// A table of this example's own, so it runs beside other programs.
	table := "herald_example_pgnotify"
	if err := envelope.Migrate(ctx, sqlDB, envelope.Postgres, table); err != nil {
		panic(err)
	}
	defer func() { _, _ = sqlDB.Exec("DROP TABLE " + table) }()

	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: "herald_example"})
	if err != nil {
		panic(err)
	}
	defer w.Close()

	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		panic(err)
	}
	if err := db.Use(gormcapture.New(gormcapture.Config{Table: table, Wakeup: w})); err != nil {
		panic(err)
	}

	got := make(chan *envelope.Event, 1)
	d := delivery.Func(func(_ context.Context, e *envelope.Event) error { got <- e; return nil })
	r, err := relay.New(sqlDB, d, relay.Config{Table: table, Wakeup: w, MaxPollInterval: time.Minute})
	if err != nil {
		panic(err)
	}
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = r.Stop(ctx) }()

	if _, err := gormcapture.Enqueue(db, envelope.Message{Topic: "billing.invoice.paid", Payload: map[string]int{"invoice": 42}}); err != nil {
		panic(err)
	}
	e := <-got
	fmt.Println(e.Topic, string(e.Payload))
	// With the server running it prints:
	//
	//	billing.invoice.paid {"invoice": 42}
}

// Events written with envelope.Writer, without a capture plugin: NOTIFY in
// the same transaction, so relays hear of them when it commits.
func ExampleWakeup_SignalTx() {
	ctx := context.Background()
	dsn := "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	wake, err := pgnotify.New(pgnotify.Config{ConnString: dsn})
	if err != nil {
		panic(err)
	}
	defer wake.Close()
	writer, err := envelope.NewWriter(envelope.Postgres, "")
	if err != nil {
		panic(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := writer.Write(ctx, tx, []envelope.Message{{Topic: "billing.invoice.paid", Payload: map[string]int{"invoice": 42}}})
	if err != nil {
		panic(err)
	}
	if err := wake.SignalTx(ctx, tx, res.Topics); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
}
