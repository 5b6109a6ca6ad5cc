package kafka_test

import (
	"context"
	"database/sql"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/relay"
)

// readmeDeliveries is the README's Deliveries snippet, compiled here so
// that it stays true.
func readmeDeliveries(ctx context.Context, sqlDB *sql.DB, secret string) error {
	k, err := kafka.New(kafka.Config{Brokers: []string{"kafka:9092"}}) // Kafka topic = delivery.ByAggregate: shop.order.* → shop.order
	if err != nil {
		return err
	}
	hook, err := webhook.New(webhook.Config{
		URL: "https://billing.example.com/events", Secret: secret, // herald-signature: sha256=<hex HMAC>
	})
	if err != nil {
		return err
	}
	d, err := delivery.Router(map[string]delivery.Delivery{"billing.*": hook}, k)
	if err != nil {
		return err
	}
	r, err := relay.New(sqlDB, d, relay.Config{})
	if err != nil {
		return err
	}
	defer d.Close()
	return r.Run(ctx)
}

var _ = readmeDeliveries
