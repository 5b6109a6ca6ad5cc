package amqp_test

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery/amqp"
	"github.com/heraldgo/herald/envelope"
)

// The message a delivery publishes for an event: to a topic exchange, the
// topic less its operation as routing key (delivery.ByAggregate), so a
// queue bound to "library.loan" holds a row's events in sequence order. Give d to relay.New, and Close it after
// the relay stopped.
func ExampleDelivery_Publishing() {
	d, err := amqp.New(amqp.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Exchange: "events"})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	e := &envelope.Event{ID: uuid.MustParse("01920000-0000-7000-8000-000000000007"), Sequence: 42, Topic: "library.loan.updated",
		OrderingKey: "library.Loan:7", Payload: []byte(`{"id":7}`)}
	key, msg := d.Publishing(e)
	fmt.Printf("routing key %s, persistent %v, message id %s, body %s\n", key, msg.DeliveryMode == 2, msg.MessageId, msg.Body)
	fmt.Printf("herald-topic %s, herald-sequence %s, herald-ordering-key %s\n",
		msg.Headers["herald-topic"], msg.Headers["herald-sequence"], msg.Headers["herald-ordering-key"])
	// Output:
	// routing key library.loan, persistent true, message id 01920000-0000-7000-8000-000000000007, body {"id":7}
	// herald-topic library.loan.updated, herald-sequence 42, herald-ordering-key library.Loan:7
}
