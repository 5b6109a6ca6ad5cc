// Command quickstart shows herald end to end with no server: GORM on a
// SQLite file in a temporary directory, a captured model whose every write
// becomes an event in the write's transaction, an event enqueued by hand,
// and a relay that delivers them — in order per key — to a Go function
// that prints each one as JSON. It stops cleanly once everything is
// delivered, in well under a second.
//
// It runs on modernc.org/sqlite, a SQLite driver in pure Go, through GORM's
// SQLite dialector: no C compiler needed, and it builds with
// CGO_ENABLED=0. (gorm.io/driver/sqlite's default driver, mattn, needs
// cgo; herald works on both.)
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite" // registers the pure-Go driver "sqlite"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

// Loan is a row the service writes. It declares change capture, so every
// write to it writes an event: library.loan.inserted, .updated, .deleted.
type Loan struct {
	ID     uint
	Book   string
	Reader string
	Status string
}

// ChangeCapture declares what the events of a Loan hold: the row before
// and after each write.
func (Loan) ChangeCapture() envelope.Options {
	return envelope.Options{Payload: envelope.BeforeAndAfter}
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "herald-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// _txlock=immediate: a transaction that reads before it writes (the
	// capture reads the row before an update) takes SQLite's write lock at
	// BEGIN, so it waits for the relay's writes instead of failing with
	// "database is locked" when they land between its read and its write.
	dsn := "file:" + filepath.Join(dir, "app.db") +
		"?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate"
	db, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()

	// The outbox table (the same DDL for every ORM and for the relay), the
	// capture plugin, and a wakeup that tells the relay at once when a
	// transaction committed events.
	if err := envelope.Migrate(ctx, sqlDB, envelope.SQLite, ""); err != nil {
		return err
	}
	w := wakeup.NewInProcess()
	defer w.Close()
	if err := db.Use(gormcapture.New(gormcapture.Config{Namespace: "library", Models: []any{&Loan{}}, Wakeup: w})); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Loan{}); err != nil {
		return err
	}

	// The relay, delivering to a Go function. A real service delivers to
	// Kafka, Redis Streams, a webhook or RabbitMQ instead.
	const want = 4
	delivered := make(chan struct{}, want)
	printEvent := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		out, err := json.MarshalIndent(struct {
			Sequence    int64             `json:"sequence"`
			Topic       string            `json:"topic"`
			OrderingKey string            `json:"ordering_key,omitempty"`
			Headers     map[string]string `json:"headers"`
			Payload     json.RawMessage   `json:"payload"`
		}{e.Sequence, e.Topic, e.OrderingKey, delivery.Headers(e), e.Payload}, "", "  ")
		if err != nil {
			return err
		}
		fmt.Println(string(out))
		delivered <- struct{}{}
		return nil
	})
	r, err := relay.New(sqlDB, printEvent, relay.Config{
		Wakeup:      w,
		Concurrency: 1, // print in sequence order; by default 10 events of a batch go at once
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}

	// The row and the news of it commit together, or not at all: the
	// insert writes library.loan.inserted, and the mail is enqueued in the
	// same transaction.
	var loan Loan
	err = db.Transaction(func(tx *gorm.DB) error {
		loan = Loan{Book: "Dune", Reader: "ann", Status: "lent"}
		if err := tx.Create(&loan).Error; err != nil {
			return err
		}
		_, err := gormcapture.Enqueue(tx, envelope.Message{
			Topic:          "mail.send",
			Payload:        map[string]any{"to": loan.Reader, "template": "loan-confirmation", "loan_id": loan.ID},
			IdempotencyKey: fmt.Sprintf("loan-mail:%d", loan.ID),
			Headers:        map[string]string{"librarian": "bob"},
		})
		return err
	})
	if err != nil {
		return err
	}
	// Each write is one more event of the loan's key, delivered in order.
	if err := db.Model(&loan).Update("status", "returned").Error; err != nil {
		return err
	}
	// A rolled-back write leaves no event behind.
	_ = db.Transaction(func(tx *gorm.DB) error {
		tx.Model(&loan).Update("status", "lost")
		return errors.New("never mind")
	})
	if err := db.Delete(&loan).Error; err != nil {
		return err
	}

	timeout := time.After(10 * time.Second)
	for range want {
		select {
		case <-delivered:
		case <-timeout:
			return errors.New("quickstart: events not delivered within 10s")
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil {
		return err
	}
	b, err := r.Backlog(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("delivered %d events; %d pending, %d dead-lettered\n", want, b.Pending, b.DeadLettered)
	return nil
}
