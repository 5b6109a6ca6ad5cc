package kafka_test

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/envelope"
)

// A delivery built from seed brokers; here an in-process cluster stands
// in for Kafka. In a service, give it to relay.New and Close it after the
// relay stopped.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "library.loan.updated"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	d, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs()})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	e := &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: "library.loan.updated", OrderingKey: "library.Loan:7", Payload: []byte(`{"id":7}`)}
	if err := d.Deliver(context.Background(), e); err != nil {
		panic(err)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("library.loan.updated"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	r := consumer.PollFetches(context.Background()).Records()[0]
	fmt.Printf("%s key=%s value=%s\n", r.Topic, r.Key, r.Value)
	for _, h := range r.Headers {
		if h.Key == "herald-topic" {
			fmt.Printf("%s: %s\n", h.Key, h.Value)
		}
	}
	// Output:
	// library.loan.updated key=library.Loan:7 value={"id":7}
	// herald-topic: library.loan.updated
}
