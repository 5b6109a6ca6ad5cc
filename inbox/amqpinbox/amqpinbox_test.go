package amqpinbox_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/delivery"
	hamqp "github.com/heraldgo/herald/delivery/amqp"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/inbox/amqpinbox"
	"github.com/heraldgo/herald/internal/inboxcrash"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func channel(t *testing.T) *amqp.Channel {
	conn, err := amqp.Dial(testkit.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestCrash: a consumer process SIGKILLed before, inside and after its
// commit, messages from a real relay through RabbitMQ (the broker requeues
// what a dead consumer left unacknowledged).
// At CI's size by default; the large variant is
// HERALD_CRASH_EVENTS=120 HERALD_CRASH_KILL_EVERY=30 (see inboxcrash).
func TestCrash(t *testing.T) {
	url := testkit.AMQPURL(t)
	ch := channel(t)
	inboxcrash.Run(t, inboxcrash.Parent{
		ChildTest: "TestCrashChild",
		Delivery: func(t *testing.T, target string) delivery.Delivery {
			if _, err := ch.QueueDeclare(target, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = ch.QueueDelete(target, false, false, false) })
			d, err := hamqp.New(hamqp.Config{URL: url, RoutingKey: target})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			return d
		},
	})
}

// TestCrashChild is TestCrash's consumer process.
func TestCrashChild(t *testing.T) {
	c := inboxcrash.ChildFromEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := amqpinbox.New(c.Inbox, amqpinbox.Config{Channel: channel(t), Queue: c.Target, Prefetch: 20,
		Handler: inbox.Handler[amqpinbox.Message]{Func: func(ctx context.Context, _ *inbox.Inbox, id inbox.Message, _ amqpinbox.Message) (inbox.Outcome, error) {
			return c.Process(ctx, id)
		}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { c.WaitDone(ctx); cancel() }()
	if err := cons.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRunStoppedBeforeConsuming: a ctx that ends while Run sets up its
// consumer (here: before Run) is a stop — nil, as a ctx ending later is —
// not "consume …: context canceled" (TestCrash's child, told it was done
// at once, saw that error).
func TestRunStoppedBeforeConsuming(t *testing.T) {
	ctx := context.Background()
	db, _ := testkit.Postgres(t)
	if err := inbox.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(ctx, db, inbox.Config{Consumer: "c", Dialect: envelope.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	ch := channel(t)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := amqpinbox.New(in, amqpinbox.Config{Channel: ch, Queue: q.Name,
		Handler: inbox.Handler[amqpinbox.Message]{Func: func(context.Context, *inbox.Inbox, inbox.Message, amqpinbox.Message) (inbox.Outcome, error) {
			return inbox.Processed, nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := cons.Run(stopped); err != nil {
		t.Fatalf("Run with an ended ctx: %v, want nil", err)
	}
}
