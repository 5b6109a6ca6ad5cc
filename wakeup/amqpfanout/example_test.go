package amqpfanout_test

import (
	"context"
	"fmt"
	"os"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/wakeup/amqpfanout"
)

// A relay's Listen hears the topics a writer in another process signals
// after its commit (here both ends are in one program).
func Example() {
	url := os.Getenv("HERALD_AMQP_URL")
	if url == "" {
		url = testkit.DefaultAMQPURL
	}
	writer, err := amqpfanout.New(amqpfanout.Config{URL: url, Exchange: "herald.example"})
	if err != nil {
		panic(err)
	}
	defer writer.Close()
	listener, err := amqpfanout.New(amqpfanout.Config{URL: url, Exchange: "herald.example"})
	if err != nil {
		panic(err)
	}
	defer listener.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bound := make(chan struct{}, 1)
	heard := make(chan string, 1)
	go func() {
		_ = listener.Listen(ctx, func(topics []string) {
			if topics == nil { // queue bound: poll for what came before
				select {
				case bound <- struct{}{}:
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
	<-bound
	if err := writer.Signal(ctx, []string{"billing.invoice.paid"}); err != nil {
		panic(err)
	}
	fmt.Println(<-heard)
	// With the server running it prints:
	//
	//	billing.invoice.paid
}
