package nats_test

import (
	"fmt"
	"sort"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery/nats"
	"github.com/heraldgo/herald/envelope"
)

// The message a delivery publishes for an event: at the defaults the
// subject is the topic less its operation (delivery.ByAggregate), and
// Nats-Msg-Id is the event id. Give d to relay.New, and Close it after
// the relay stopped.
func ExampleDelivery_Msg() {
	d, err := nats.New(nats.Config{URL: "nats://127.0.0.1:4222"})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	e := &envelope.Event{
		ID:       uuid.MustParse("01920000-0000-7000-8000-000000000007"),
		Sequence: 42, Topic: "library.loan.updated", OrderingKey: "library.Loan:7", Payload: []byte(`{"id":7}`),
	}
	m := d.Msg(e)
	fmt.Println(m.Subject, string(m.Data))
	names := make([]string, 0, len(m.Header))
	for k := range m.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("%s: %s\n", k, m.Header.Get(k))
	}
	// Output:
	// library.loan {"id":7}
	// Nats-Msg-Id: 01920000-0000-7000-8000-000000000007
	// herald-event-id: 01920000-0000-7000-8000-000000000007
	// herald-ordering-key: library.Loan:7
	// herald-sequence: 42
	// herald-topic: library.loan.updated
}
