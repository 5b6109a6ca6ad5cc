package kafkasignal_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldgo/herald/wakeup/kafkasignal"
)

// A relay's Listen hears the topics a writer in another process signals
// after its commit (here both ends are in one program, on an in-process
// Kafka cluster).
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	writer, err := kafkasignal.New(kafkasignal.Config{Brokers: brokers, Topic: "herald.example"})
	if err != nil {
		panic(err)
	}
	defer writer.Close()
	listener, err := kafkasignal.New(kafkasignal.Config{Brokers: brokers, Topic: "herald.example"})
	if err != nil {
		panic(err)
	}
	defer listener.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subscribed := make(chan struct{}, 1)
	heard := make(chan string, 1)
	go func() {
		_ = listener.Listen(ctx, func(topics []string) {
			if topics == nil { // reading from the end: poll for what came before
				select {
				case subscribed <- struct{}{}:
				default:
				}
				return
			}
			select {
			case heard <- topics[0]:
			default:
			}
		})
	}()
	<-subscribed
	if err := writer.Signal(ctx, []string{"billing.invoice.paid"}); err != nil {
		panic(err)
	}
	fmt.Println(<-heard)
	// Output: billing.invoice.paid
}
