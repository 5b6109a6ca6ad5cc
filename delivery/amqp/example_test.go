package amqp_test

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery/amqp"
	"github.com/heraldgo/herald/envelope"
)

// The message a delivery publishes for an event: to a topic exchange, the
// event's topic as routing key. Give d to relay.New, and Close it after
// the relay stopped.
func ExampleDelivery_Publishing() {
	d, err := amqp.New(amqp.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Exchange: "events"})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	e := &envelope.Event{ID: uuid.MustParse("01920000-0000-7000-8000-000000000007"), Topic: "library.loan.updated", Payload: []byte(`{"id":7}`)}
	key, msg := d.Publishing(e)
	fmt.Printf("routing key %s, persistent %v, message id %s, body %s, herald-topic %s\n",
		key, msg.DeliveryMode == 2, msg.MessageId, msg.Body, msg.Headers["herald-topic"])
	// Output: routing key library.loan.updated, persistent true, message id 01920000-0000-7000-8000-000000000007, body {"id":7}, herald-topic library.loan.updated
}
