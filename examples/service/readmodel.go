package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/inbox/gorminbox"
	"github.com/heraldgo/herald/inbox/kafkainbox"
)

// CustomerTotal is the read model -read-model keeps from the service's own
// shop.order.placed events, read back from Kafka: per customer, how many
// orders and items. Each event counts once however often Kafka delivers
// it: the update and the event's id commit in one transaction (the inbox).
type CustomerTotal struct {
	Customer string `gorm:"primaryKey" json:"customer"`
	Orders   int    `json:"orders"`
	Items    int    `json:"items"`
}

// startReadModel consumes topic into customer_totals until ctx ends; the
// returned channel gets Run's result.
func startReadModel(ctx context.Context, sqlDB *sql.DB, brokers []string, topic string) (<-chan error, error) {
	if err := inbox.Migrate(ctx, sqlDB, envelope.Postgres, ""); err != nil {
		return nil, fmt.Errorf("migrate the inbox: %w", err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, err
	}
	if err := db.AutoMigrate(&CustomerTotal{}); err != nil {
		return nil, err
	}
	in, err := inbox.New(ctx, sqlDB, inbox.Config{Consumer: "read-model", Dialect: envelope.Postgres})
	if err != nil {
		return nil, err
	}
	c, err := kafkainbox.New(in, kafkainbox.Config{Brokers: brokers, Topics: []string{topic}, Group: "service-read-model",
		Handler: inbox.Handler[kafkainbox.Message]{Func: func(ctx context.Context, in *inbox.Inbox, id inbox.Message, m kafkainbox.Message) (inbox.Outcome, error) {
			if m.Headers["herald-topic"] != "shop.order.placed" {
				return inbox.Processed, nil // nothing to count: no need to record it
			}
			var placed struct {
				Customer string `json:"customer"`
				Qty      int    `json:"qty"`
			}
			if err := json.Unmarshal(m.Payload, &placed); err != nil {
				return 0, err
			}
			return gorminbox.Handle(ctx, in, db, id, func(tx *gorm.DB) error {
				return tx.Clauses(clause.OnConflict{
					Columns: []clause.Column{{Name: "customer"}},
					DoUpdates: clause.Assignments(map[string]any{
						"orders": gorm.Expr("customer_totals.orders + 1"),
						"items":  gorm.Expr("customer_totals.items + ?", placed.Qty),
					}),
				}).Create(&CustomerTotal{Customer: placed.Customer, Orders: 1, Items: placed.Qty}).Error
			})
		}}})
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	slog.Info("read model started", "topic", topic)
	return done, nil
}
