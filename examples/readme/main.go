// Command readme is the example at the top of README.md, which quotes this
// file verbatim (a test checks it). It runs on SQLite as it is, and on
// PostgreSQL with DATABASE_URL set:
//
//	go run ./examples/readme
//	DATABASE_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/readme
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	_ "modernc.org/sqlite" // SQLite in pure Go: no cgo needed

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

// Loan is a captured model: it declares what its events hold (or register
// it with plugin.Capture without touching the model).
type Loan struct {
	ID       uint
	Status   string
	Fee      decimal.Decimal `gorm:"type:numeric(10,2)"`
	ReaderID uint
	Token    string `herald:"sensitive"` // left out of events
}

func (Loan) ChangeCapture() envelope.Options {
	return envelope.Options{Payload: envelope.BeforeAndAfter}
}

func main() {
	ctx := context.Background()
	// SQLite: WAL, a busy timeout, and transactions that begin IMMEDIATE.
	dialector := sqlite.New(sqlite.Config{DriverName: "sqlite",
		DSN: "file:herald-example.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate"})
	if url := os.Getenv("DATABASE_URL"); url != "" {
		dialector = postgres.Open(url)
	}
	db, err := gorm.Open(dialector)
	check(err)
	sqlDB, err := db.DB()
	check(err)
	dialect := envelope.Dialect(db.Name()) // envelope.Postgres or envelope.SQLite

	// The outbox table, the plugin (right after gorm.Open), the model's table.
	w := wakeup.NewInProcess()
	check(envelope.Migrate(ctx, sqlDB, dialect, "")) // herald_outbox, created or brought up to date
	check(db.Use(gormcapture.New(gormcapture.Config{
		Namespace: "library", Wakeup: w, Models: []any{&Loan{}},
	})))
	check(db.AutoMigrate(&Loan{}))

	// Every write to a captured model writes its events in its transaction.
	loan := Loan{Status: "lent", Fee: decimal.RequireFromString("12.50"), ReaderID: 3}
	check(db.Create(&loan).Error)                                   // library.loan.inserted, key library.Loan:<id>
	check(db.Model(&loan).Update("status", "returned").Error)       // library.loan.updated
	check(db.Where("status = ?", "returned").Delete(&Loan{}).Error) // one event per deleted row
	_, err = gormcapture.Enqueue(db, envelope.Message{              // your own events, in or out of a transaction
		Topic: "mail.send", Payload: map[string]any{"loan": loan.ID}, IdempotencyKey: fmt.Sprintf("loan-mail:%d", loan.ID),
	})
	check(err)

	// The relay delivers each event at least once, in order per key.
	var n atomic.Int32
	done := make(chan struct{})
	r, err := relay.New(sqlDB, delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		fmt.Println(e.Topic, string(e.Payload)) // or publish to Kafka, Redis Streams, a webhook, RabbitMQ
		if n.Add(1) == 4 {
			close(done)
		}
		return nil
	}), relay.Config{Wakeup: w, Concurrency: 1})
	check(err)
	check(r.Start(ctx)) // a service starts it in main and stops it on shutdown
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		log.Fatal("not delivered within 10s")
	}
	check(r.Stop(ctx)) // finishes the batch in hand
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
