package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

// openExampleDB opens a SQLite outbox in a temporary directory.
func openExampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "herald-example-")
	if err != nil {
		panic(err)
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "outbox.db")+"?_busy_timeout=5000&_journal_mode=WAL")
	if err != nil {
		panic(err)
	}
	if err := envelope.Migrate(context.Background(), db, envelope.SQLite, ""); err != nil {
		panic(err)
	}
	return db, func() { _ = db.Close(); _ = os.RemoveAll(dir) }
}

func enqueue(db *sql.DB, ms ...envelope.Message) {
	w, err := envelope.NewWriter(envelope.SQLite, "")
	if err != nil {
		panic(err)
	}
	if _, err := w.Write(context.Background(), db, ms); err != nil {
		panic(err)
	}
}

// A relay delivers the events of one ordering key in order, at least once.
func Example() {
	db, cleanup := openExampleDB()
	defer cleanup()
	enqueue(db,
		envelope.Message{Topic: "library.loan.created", OrderingKey: "loan:7", Payload: map[string]any{"id": 7}},
		envelope.Message{Topic: "library.loan.returned", OrderingKey: "loan:7", Payload: map[string]any{"id": 7, "late": false}},
	)

	var n atomic.Int32
	done := make(chan struct{})
	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		fmt.Println(e.Topic, string(e.Payload))
		if n.Add(1) == 2 {
			close(done)
		}
		return nil
	})
	r, err := relay.New(db, d, relay.Config{MinPollInterval: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	<-done
	if err := r.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// library.loan.created {"id":7}
	// library.loan.returned {"id":7,"late":false}
}

func ExampleRelay_Backlog() {
	db, cleanup := openExampleDB()
	defer cleanup()
	enqueue(db,
		envelope.Message{Topic: "billing.invoice.paid", Payload: 1},
		envelope.Message{Topic: "library.loan.created", Payload: 2},
	)
	noop := delivery.Func(func(context.Context, *envelope.Event) error { return nil })
	r, err := relay.New(db, noop, relay.Config{Topics: []string{"billing.*"}})
	if err != nil {
		panic(err)
	}
	b, err := r.Backlog(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending %d, dead-lettered %d\n", b.Pending, b.DeadLettered)
	// Output: pending 1, dead-lettered 0
}

func ExampleObserverFuncs() {
	_ = relay.Config{
		Observer: relay.ObserverFuncs{
			OnDeadLettered: func(ctx context.Context, d relay.DeadLettered) {
				fmt.Printf("page the on-call: event %s (%s) failed %d times: %v\n", d.Event.ID, d.Event.Topic, d.Attempts, d.Err)
			},
		},
	}
}
