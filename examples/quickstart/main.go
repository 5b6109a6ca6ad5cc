// Command quickstart shows herald end to end with no server: GORM on a
// SQLite file in a temporary directory, a few events enqueued in one
// transaction with the row they announce, and the events as stored.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
)

// Loan is a row the service writes; its events announce it.
type Loan struct {
	ID     uint
	Book   string
	Reader string
	Status string
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
	dsn := "file:" + filepath.Join(dir, "app.db") + "?_foreign_keys=1&_journal_mode=WAL&_busy_timeout=5000"
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()

	// The outbox table: the same DDL for every ORM and for the relay.
	if err := envelope.Migrate(ctx, sqlDB, envelope.SQLite, ""); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Loan{}); err != nil {
		return err
	}
	w, err := envelope.NewWriter(envelope.SQLite, "")
	if err != nil {
		return err
	}

	// The row and the news of it commit together, or not at all.
	err = db.Transaction(func(tx *gorm.DB) error {
		loan := Loan{Book: "Dune", Reader: "ann", Status: "lent"}
		if err := tx.Create(&loan).Error; err != nil {
			return err
		}
		sqlTx := tx.Statement.ConnPool.(envelope.Querier)
		_, err := w.Write(ctx, sqlTx, []envelope.Message{
			{Topic: "library.loan.lent", Payload: map[string]any{"loan_id": loan.ID, "book": loan.Book},
				OrderingKey: fmt.Sprintf("loan:%d", loan.ID), Headers: map[string]string{"librarian": "bob"}},
			{Topic: "mail.send", Payload: map[string]any{"to": loan.Reader, "template": "loan-confirmation"},
				IdempotencyKey: fmt.Sprintf("loan-mail:%d", loan.ID)},
		})
		return err
	})
	if err != nil {
		return err
	}

	rows, err := sqlDB.QueryContext(ctx, `SELECT `+envelope.EventColumns+` FROM herald_outbox ORDER BY sequence`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		e, err := envelope.ScanEvent(rows, nil)
		if err != nil {
			return err
		}
		out, _ := json.MarshalIndent(map[string]any{
			"sequence": e.Sequence, "id": e.ID, "topic": e.Topic, "ordering_key": e.OrderingKey,
			"idempotency_key": e.IdempotencyKey, "headers": e.Headers, "payload": e.Payload,
		}, "", "  ")
		fmt.Println(string(out))
	}
	return rows.Err()
}
