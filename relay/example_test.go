package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
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

// A relay that also keeps its table small: published events are deleted a
// day after their delivery and dead letters after a week, every
// CleanupInterval (ten minutes by default) while it runs. The lines between
// the markers are quoted in the README.
func ExampleConfig_retention() {
	db, cleanup := openExampleDB()
	defer cleanup()
	w := wakeup.NewInProcess()
	defer w.Close()
	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error { return nil })
	// README: retention
	r, err := relay.New(db, d, relay.Config{
		Wakeup:             w,
		RetainPublished:    24 * time.Hour,     // delete published events a day old
		RetainDeadLettered: 7 * 24 * time.Hour, // and dead letters after a week (0 keeps them)
	})
	// README: end
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Dialect())
	// Output: sqlite
}

// TestReadmeQuotesTheRetentionExample keeps the README's relay snippet the
// code ExampleConfig_retention compiles and runs.
func TestReadmeQuotesTheRetentionExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i, j := strings.Index(s, "// README: retention\n"), strings.Index(s, "\t// README: end")
	if i < 0 || j < i {
		t.Fatal("markers not found in example_test.go")
	}
	block := s[i+len("// README: retention\n") : j]
	if !strings.Contains(string(readme), block) {
		t.Fatalf("README.md does not quote ExampleConfig_retention verbatim; expected:\n%s", block)
	}
}
