package gormcapture_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
)

// ExampleLoan is a captured model: its declaration is its ChangeCapture
// method.
type ExampleLoan struct {
	ID     int64
	Status string
	Token  string `herald:"sensitive"`
}

func (ExampleLoan) ChangeCapture() envelope.Options {
	return envelope.Options{Payload: envelope.BeforeAndAfter}
}

// exampleDB opens a SQLite file in a temporary directory with the outbox
// table; cleanup removes it.
func exampleDB() (db *gorm.DB, cleanup func()) {
	dir, err := os.MkdirTemp("", "herald-example")
	if err != nil {
		panic(err)
	}
	db, err = gorm.Open(sqlite.Open(testkit.MattnDSN(filepath.Join(dir, "example.db"))),
		&gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		panic(err)
	}
	sqlDB, _ := db.DB()
	if err := envelope.Migrate(context.Background(), sqlDB, envelope.SQLite, ""); err != nil {
		panic(err)
	}
	return db, func() { _ = sqlDB.Close(); _ = os.RemoveAll(dir) }
}

// printEvents prints the outbox: topic, ordering key and the envelope
// without its occurred_at.
func printEvents(db *gorm.DB) {
	sqlDB, _ := db.DB()
	rows, err := sqlDB.Query(`SELECT topic, ordering_key, payload FROM herald_outbox ORDER BY sequence`)
	if err != nil {
		panic(err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic, payload string
		var key sql.NullString
		if err := rows.Scan(&topic, &key, &payload); err != nil {
			panic(err)
		}
		var env map[string]any
		_ = json.Unmarshal([]byte(payload), &env)
		delete(env, "occurred_at")
		b, _ := json.Marshal(env) // keys sorted
		fmt.Println(topic, key.String, string(b))
	}
	if err := rows.Err(); err != nil {
		panic(err)
	}
}

func ExampleNew() {
	db, cleanup := exampleDB()
	defer cleanup()
	_ = db.AutoMigrate(&ExampleLoan{})
	err := db.Use(gormcapture.New(gormcapture.Config{Namespace: "library", Models: []any{&ExampleLoan{}}}))
	if err != nil {
		panic(err)
	}

	loan := ExampleLoan{Status: "lent", Token: "s3cret"}
	db.Create(&loan)
	db.Model(&loan).Update("status", "returned")
	db.Delete(&loan)

	printEvents(db)
	// Output:
	// library.example_loan.inserted library.ExampleLoan:1 {"after":{"id":1,"status":"lent"},"before":null,"changed":null,"model":"library.ExampleLoan","operation":"inserted","pk":1}
	// library.example_loan.updated library.ExampleLoan:1 {"after":{"id":1,"status":"returned"},"before":{"id":1,"status":"lent"},"changed":["status"],"model":"library.ExampleLoan","operation":"updated","pk":1}
	// library.example_loan.deleted library.ExampleLoan:1 {"after":null,"before":{"id":1,"status":"returned"},"changed":null,"model":"library.ExampleLoan","operation":"deleted","pk":1}
}

type ExampleReader struct {
	ID   int64
	Name string
}

func ExamplePlugin_Capture() {
	db, cleanup := exampleDB()
	defer cleanup()
	_ = db.AutoMigrate(&ExampleReader{})
	p := gormcapture.New(gormcapture.Config{})
	if err := db.Use(p); err != nil {
		panic(err)
	}
	// Capture a model without touching its type: keys only, inserts only.
	err := p.Capture(&ExampleReader{}, envelope.Options{Payload: envelope.Keys, Operations: []envelope.Operation{envelope.Inserted}})
	if err != nil {
		panic(err)
	}
	db.Create(&[]ExampleReader{{Name: "Ann"}, {Name: "Bob"}})
	db.Model(&ExampleReader{}).Where("name = ?", "Ann").Update("name", "Anna") // not captured

	printEvents(db)
	// Output:
	// example_reader.inserted ExampleReader:1 {"changed":null,"model":"ExampleReader","operation":"inserted","pk":1}
	// example_reader.inserted ExampleReader:2 {"changed":null,"model":"ExampleReader","operation":"inserted","pk":2}
}

func ExampleEnqueue() {
	db, cleanup := exampleDB()
	defer cleanup()
	_ = db.AutoMigrate(&ExampleLoan{})
	if err := db.Use(gormcapture.New(gormcapture.Config{Namespace: "library"})); err != nil {
		panic(err)
	}
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&ExampleLoan{Status: "lent"}).Error; err != nil {
			return err
		}
		// Commits with the loan and its captured event, or not at all.
		ev, err := gormcapture.Enqueue(tx, envelope.Message{
			Topic:          "library.reminders",
			Payload:        map[string]any{"loan": 1, "in_days": 14},
			IdempotencyKey: "reminder:1",
		})
		if err != nil {
			return err
		}
		fmt.Println(ev.Topic, ev.Sequence, string(ev.Payload))
		return nil
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// library.reminders 2 {"in_days":14,"loan":1}
}
