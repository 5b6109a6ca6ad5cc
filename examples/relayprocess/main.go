// Command relayprocess runs herald's relay as a process of its own, as
// README.md ("Running herald in production") shows: it needs the database
// and a delivery, not the service's models, and stops cleanly on SIGTERM.
//
//	DATABASE_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go run ./examples/relayprocess
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

// deliver stands for a real transport (delivery/kafka, delivery/webhook, …).
var deliver = delivery.Func(func(ctx context.Context, e *envelope.Event) error {
	fmt.Println(e.Topic, string(e.Payload))
	return nil
})

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(db, deliver, relay.Config{Name: os.Getenv("HOSTNAME")})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Run(ctx); err != nil { // until SIGTERM; then finishes the batch in hand
		log.Fatal(err)
	}
}
