package amqpfanout_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// deleteExchange removes a test's exchange from the shared server.
func deleteExchange(t *testing.T, url, name string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_ = ch.ExchangeDelete(name, false, false)
}
