package redisstream_test

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery/redisstream"
	"github.com/heraldgo/herald/envelope"
)

// The XADD a delivery sends for an event: at the defaults the stream is
// the topic less its operation (delivery.ByAggregate), so a row's
// inserted, updated and deleted events share one stream in sequence
// order; it is trimmed to about 100,000 entries. Give d to relay.New, and
// Close it after the relay stopped.
func ExampleDelivery_Args() {
	d, err := redisstream.New(redisstream.Config{URL: "redis://127.0.0.1:6379/0", MaxLen: 100_000})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	e := &envelope.Event{
		ID:       uuid.MustParse("01920000-0000-7000-8000-000000000007"),
		Sequence: 42, Topic: "library.loan.updated", OrderingKey: "library.Loan:7", Payload: []byte(`{"id":7}`),
	}
	a, err := d.Args(e)
	if err != nil {
		panic(err)
	}
	fmt.Printf("XADD %s MAXLEN ~ %d *", a.Stream, a.MaxLen)
	vs := a.Values.([]any)
	for i := 0; i < len(vs); i += 2 {
		fmt.Printf(" %s %s", vs[i], vs[i+1])
	}
	fmt.Println()
	// Output:
	// XADD library.loan MAXLEN ~ 100000 * id 01920000-0000-7000-8000-000000000007 topic library.loan.updated sequence 42 ordering_key library.Loan:7 headers {"herald-event-id":"01920000-0000-7000-8000-000000000007","herald-ordering-key":"library.Loan:7","herald-sequence":"42","herald-topic":"library.loan.updated"} payload {"id":7}
}
