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
// in for Kafka. At its defaults a captured row's events, whose topics
// differ only by operation, share the Kafka topic of their model
// ("library.loan"), and their ordering key is the record key: one
// partition holds them in sequence order. In a service, give it to
// relay.New and Close it after the relay stopped.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "library.loan"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	d, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs()})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	for i, op := range []string{"inserted", "updated"} {
		e := &envelope.Event{ID: uuid.Must(uuid.NewV7()), Sequence: int64(41 + i), Topic: "library.loan." + op,
			OrderingKey: "library.Loan:7", Payload: []byte(`{"id":7}`)}
		if err := d.Deliver(context.Background(), e); err != nil {
			panic(err)
		}
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("library.loan"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	var rs []*kgo.Record
	for len(rs) < 2 {
		rs = append(rs, consumer.PollFetches(context.Background()).Records()...)
	}
	for _, r := range rs {
		fmt.Printf("%s key=%s value=%s", r.Topic, r.Key, r.Value)
		for _, h := range r.Headers {
			if h.Key == "herald-topic" || h.Key == "herald-sequence" {
				fmt.Printf(" %s=%s", h.Key, h.Value)
			}
		}
		fmt.Println()
	}
	// Output:
	// library.loan key=library.Loan:7 value={"id":7} herald-sequence=41 herald-topic=library.loan.inserted
	// library.loan key=library.Loan:7 value={"id":7} herald-sequence=42 herald-topic=library.loan.updated
}
