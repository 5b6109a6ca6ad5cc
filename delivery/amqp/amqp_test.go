package amqp_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/amqp"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverytest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// broker is a connection to the machine's RabbitMQ with a queue of the
// test's own, bound to a topic exchange of the test's own, consumed into
// memory.
type broker struct {
	url, exchange, queue string

	mu   sync.Mutex
	msgs []amqp091.Delivery
}

func newBroker(t testing.TB) *broker {
	t.Helper()
	b := &broker{url: testkit.AMQPURL(t), exchange: testkit.Name("herald-conf-"), queue: testkit.Name("herald-q-")}
	conn, err := amqp091.Dial(b.url)
	if err != nil {
		t.Fatalf("RabbitMQ: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.ExchangeDeclare(b.exchange, "topic", false, true, false, false, nil))
	_, err = ch.QueueDeclare(b.queue, false, true, true, false, nil)
	must(err)
	must(ch.QueueBind(b.queue, "#", b.exchange, false, nil))
	msgs, err := ch.Consume(b.queue, "", true, true, false, false, nil)
	must(err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			b.mu.Lock()
			b.msgs = append(b.msgs, m)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ch.ExchangeDelete(b.exchange, false, false)
		_ = conn.Close()
		<-done
	})
	return b
}

func (b *broker) received() []amqp091.Delivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]amqp091.Delivery(nil), b.msgs...)
}

func (b *broker) messages(testing.TB) []deliverytest.Message {
	var out []deliverytest.Message
	for _, m := range b.received() {
		dm := deliverytest.Message{Body: m.Body, Headers: map[string]string{}}
		for k, v := range m.Headers {
			if s, ok := v.(string); ok {
				dm.Headers[strings.ToLower(k)] = s
			}
		}
		out = append(out, dm)
	}
	return out
}

// proxied returns the broker URL with its host replaced by addr.
func proxied(t testing.TB, raw, addr string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

func brokerAddr(t testing.TB, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		return u.Host + ":5672"
	}
	return u.Host
}

func newReceiver(t testing.TB) *deliverytest.Receiver {
	b := newBroker(t)
	proxy := testkit.NewProxy(t, brokerAddr(t, b.url))
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := amqp.New(amqp.Config{URL: proxied(t, b.url, proxy.Addr()), Exchange: b.exchange})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: b.messages,
		Down:     func(testing.TB) { proxy.SetDown(true) },
		Up:       func(testing.TB) { proxy.SetDown(false) },
		Conns:    proxy.Open,
	}
}

// atDefaults is a receiver of a delivery built from the URL alone, which
// publishes to the default exchange: the routing key names the queue. It
// declares a queue for every destination the delivery may use (each event
// topic and its aggregate) and consumes them all on one channel, each
// message's destination its queue.
func atDefaults(t testing.TB, topics []string) *deliverytest.Receiver {
	u := testkit.AMQPURL(t)
	conn, err := amqp091.Dial(u)
	if err != nil {
		t.Fatalf("RabbitMQ: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		msgs []deliverytest.Message
		wg   sync.WaitGroup
	)
	queues := map[string]bool{}
	for _, tp := range topics {
		queues[tp] = true
		queues[delivery.ByAggregate(&envelope.Event{Topic: tp})] = true
	}
	for q := range queues {
		if _, err := ch.QueueDeclare(q, false, true, true, false, nil); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume(q, "", true, true, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for m := range ds {
				dm := deliverytest.Message{Body: m.Body, Headers: map[string]string{}, Destination: q}
				for k, v := range m.Headers {
					if s, ok := v.(string); ok {
						dm.Headers[strings.ToLower(k)] = s
					}
				}
				mu.Lock()
				msgs = append(msgs, dm)
				mu.Unlock()
			}
		})
	}
	t.Cleanup(func() {
		_ = conn.Close()
		wg.Wait()
	})
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := amqp.New(amqp.Config{URL: u})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: func(testing.TB) []deliverytest.Message {
			mu.Lock()
			defer mu.Unlock()
			return append([]deliverytest.Message(nil), msgs...)
		},
	}
}

func TestConformance(t *testing.T) {
	deliverytest.Run(t, deliverytest.Suite{NewReceiver: newReceiver, AtDefaults: atDefaults})
}

func event(topic string) *envelope.Event {
	return &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: topic, OrderingKey: "k", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
}

func TestMessageProperties(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d, err := amqp.New(amqp.Config{URL: b.url, Exchange: b.exchange})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e := event("library.loan.updated")
	if err := d.Deliver(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.received()) == 1 }, "one message")
	m := b.received()[0]
	if m.DeliveryMode != amqp091.Persistent || m.MessageId != e.ID.String() || m.RoutingKey != "library.loan" ||
		m.ContentType != "application/json" || string(m.Body) != `{"n":1}` || m.Headers[delivery.HeaderTopic] != e.Topic ||
		m.Headers[delivery.HeaderOrderingKey] != "k" || m.Headers[delivery.HeaderSequence] != "0" {
		t.Fatalf("message %+v", m)
	}
}

// The default exchange routes by queue name; a fixed routing key names
// the queue.
func TestDefaultExchange(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d, err := amqp.New(amqp.Config{URL: b.url, RoutingKey: b.queue})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if errs := d.DeliverBatch(context.Background(), []*envelope.Event{event("a"), event("b")}); errs != nil {
		t.Fatal(errs)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.received()) == 2 }, "two messages")
}

// Publishing to a missing exchange closes the channel; the event fails
// with the broker's reason, and the next batch opens a new channel.
func TestMissingExchangeThenRecover(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	missing, err := amqp.New(amqp.Config{URL: b.url, Exchange: "herald-no-such-exchange", RoutingKeyFunc: func(e *envelope.Event) string { return "x." + e.Topic }})
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := missing.DeliverBatch(ctx, []*envelope.Event{event("a"), event("b")})
	if errs == nil || errs[0] == nil || errs[1] == nil || !strings.Contains(errs[0].Error(), "NOT_FOUND") || !strings.Contains(errs[0].Error(), `"x.a"`) {
		t.Fatalf("missing exchange: %v", errs)
	}
	// The same delivery, then pointed at a good exchange, must work again:
	// build one with a func that routes to the test's queue through the
	// default exchange.
	d, err := amqp.New(amqp.Config{URL: b.url, RoutingKey: b.queue})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Deliver(ctx, event("a")); err != nil {
		t.Fatal(err)
	}
	if err := missing.Deliver(ctx, event("again")); err == nil {
		t.Fatal("still a missing exchange")
	}
	if err := d.Deliver(ctx, event("b")); err != nil {
		t.Fatal(err)
	}
}

// With Mandatory, a message no queue takes fails its event; the others of
// the batch are delivered.
func TestMandatory(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d, err := amqp.New(amqp.Config{URL: b.url, Mandatory: true, RoutingKeyFunc: func(e *envelope.Event) string {
		if e.Topic == "routed" {
			return b.queue
		}
		return "herald-no-such-queue"
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 3 { // the channel stays usable
		errs := d.DeliverBatch(ctx, []*envelope.Event{event("routed"), event("lost"), event("routed")})
		if errs == nil || errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], delivery.ErrDelivery) || !strings.Contains(errs[1].Error(), "NO_ROUTE") {
			t.Fatalf("errors %v", errs)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.received()) == 6 }, "six routed messages")
}

func TestClosedDeliveryFails(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	d, err := amqp.New(amqp.Config{URL: b.url, Exchange: b.exchange})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Deliver(context.Background(), event("a")); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Deliver(context.Background(), event("a")); err == nil {
		t.Fatal("a closed delivery must fail")
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]amqp.Config{
		"URL":            {},
		"RoutingKeyFunc": {URL: "amqp://localhost", RoutingKey: "k", RoutingKeyFunc: func(*envelope.Event) string { return "" }},
	} {
		_, err := amqp.New(cfg)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "amqp.Config."+name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := amqp.New(amqp.Config{URL: "http://x"}); !errors.Is(err, envelope.ErrConfiguration) {
		t.Errorf("bad URL: %v", err)
	}
}

// A topic-exchange binding "<model>.#" matches the aggregate routing key
// the delivery sends at its defaults, as it matched per-topic keys.
func TestHashBindingMatchesAggregate(t *testing.T) {
	t.Parallel()
	u := testkit.AMQPURL(t)
	conn, err := amqp091.Dial(u)
	if err != nil {
		t.Fatalf("RabbitMQ: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ex, q, model := testkit.Name("herald-x-"), testkit.Name("herald-q-"), testkit.Name("m")
	if err := ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ch.ExchangeDelete(ex, false, false) }()
	if _, err := ch.QueueDeclare(q, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "shop."+model+".#", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	d, err := amqp.New(amqp.Config{URL: u, Exchange: ex, Mandatory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e := event("shop." + model + ".updated")
	if err := d.Deliver(context.Background(), e); err != nil {
		t.Fatalf("routing key shop.%s not routed by binding shop.%s.#: %v", model, model, err)
	}
	m, ok, err := ch.Get(q, true)
	if err != nil || !ok || m.RoutingKey != "shop."+model || m.MessageId != e.ID.String() {
		t.Fatalf("queue: %v %v %+v", ok, err, m)
	}
}
