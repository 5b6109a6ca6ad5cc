// Command mysql is the README's MySQL and MariaDB example: a service's
// write and its event in one transaction, a relay delivering the event,
// and a consumer that processes it once through the inbox, all on one
// MySQL or MariaDB database.
//
//	go run ./examples/mysql -dsn 'root@tcp(127.0.0.1:3306)/test'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
)

func main() {
	dsn := flag.String("dsn", "root@tcp(127.0.0.1:3306)/test", "a go-sql-driver/mysql DSN (MySQL 8 or MariaDB 10.6+)")
	flag.Parse()
	ctx := context.Background()
	cfg, err := mysql.ParseDSN(*dsn)
	check(err)
	cfg.ParseTime = true // DATETIME columns scan into time.Time
	db, err := sql.Open("mysql", cfg.FormatDSN())
	check(err)
	defer db.Close()

	// The outbox and the inbox tables, created or brought up to date; the
	// service's own table.
	check(envelope.Migrate(ctx, db, envelope.MySQL, ""))
	check(inbox.Migrate(ctx, db, envelope.MySQL, ""))
	_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, total DECIMAL(10,2) NOT NULL)`)
	check(err)

	// The write and its event commit together, or neither does.
	w, err := envelope.NewWriter(envelope.MySQL, "")
	check(err)
	tx, err := db.BeginTx(ctx, nil)
	check(err)
	res, err := tx.ExecContext(ctx, `INSERT INTO orders (total) VALUES (?)`, "12.50")
	check(err)
	id, err := res.LastInsertId()
	check(err)
	_, err = w.Write(ctx, tx, []envelope.Message{{Topic: "shop.order.placed",
		OrderingKey: fmt.Sprintf("order:%d", id), Payload: map[string]any{"id": id, "total": "12.50"}}})
	check(err)
	check(tx.Commit())

	// A consumer that processes each event once: its effect and the
	// event's id commit in one transaction (here in the same database).
	in, err := inbox.New(ctx, db, inbox.Config{Consumer: "billing", Dialect: envelope.MySQL})
	check(err)
	done := make(chan struct{}, 1)
	consume := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		out, err := in.Handle(ctx, inbox.Message{ID: e.ID.String(), OrderingKey: e.OrderingKey, Sequence: e.Sequence},
			func(ctx context.Context, tx *sql.Tx) error {
				fmt.Println(e.Topic, string(e.Payload)) // the effect, written through tx
				return nil
			})
		if err == nil && out == inbox.Processed {
			select {
			case done <- struct{}{}:
			default:
			}
		}
		return err
	})

	// The relay: no NOTIFY on MySQL, so an in-process wakeup (or Redis,
	// Kafka, RabbitMQ) and polling.
	r, err := relay.New(db, consume, relay.Config{Wakeup: wakeup.NewInProcess()})
	check(err)
	check(r.Start(ctx))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		log.Fatal("not delivered within 30s")
	}
	check(r.Stop(ctx))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
