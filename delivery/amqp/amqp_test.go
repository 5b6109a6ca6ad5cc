package amqp_test

import (
	"context"
	"errors"
	"net"
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
		Stall:    func(_ testing.TB, on bool) { proxy.StopReading(on) },
		Outage:   "TCP proxy cut, refusing connections",
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

// An event whose header name or routing key AMQP cannot carry (a short
// string: at most 255 bytes) fails alone, with an error that says why; the
// rest of its batch is published on the same connection.
func TestOverlongNamesFailAlone(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	long := strings.Repeat("k", 256)
	d, err := amqp.New(amqp.Config{URL: b.url, Exchange: b.exchange, RoutingKeyFunc: func(e *envelope.Event) string {
		if e.Topic == "long.key" {
			return long
		}
		return e.Topic
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var es []*envelope.Event
	for range 20 {
		es = append(es, event("ok"))
	}
	badHeader := event("ok")
	badHeader.Headers = map[string]string{long: "v"}
	badKey := event("long.key")
	es = append(es[:5], append([]*envelope.Event{badHeader}, es[5:]...)...)
	es = append(es, badKey)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for round := range 2 { // the connection survives
		errs := d.DeliverBatch(ctx, es)
		if errs == nil {
			t.Fatal("every event published, the overlong ones too")
		}
		for i, err := range errs {
			bad := es[i] == badHeader || es[i] == badKey
			switch {
			case bad && (!errors.Is(err, delivery.ErrDelivery) || !strings.Contains(err.Error(), "255")):
				t.Errorf("round %d, event %d: %v, want ErrDelivery saying 255 bytes", round, i, err)
			case !bad && err != nil:
				t.Errorf("round %d, event %d: %v, want it published", round, i, err)
			}
		}
		if round == 0 {
			t.Logf("header: %v", errs[5])
			t.Logf("routing key: %v", errs[len(es)-1])
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.received()) == 40 }, "40 valid messages")
}

// A broker that stops reading (RabbitMQ's memory or disk alarm) holds a
// batch only until its context ends, and Close after it is bounded too.
func TestStalledBrokerHonoursContext(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	proxy := testkit.NewProxy(t, brokerAddr(t, b.url))
	d, err := amqp.New(amqp.Config{URL: proxied(t, b.url, proxy.Addr()), Exchange: b.exchange})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Deliver(context.Background(), event("warm")); err != nil {
		t.Fatal(err)
	}
	proxy.StopReading(true)
	// More than the socket buffers hold, so that writes block.
	var es []*envelope.Event
	for range 64 {
		e := event("big")
		e.Payload = []byte(`"` + strings.Repeat("x", 512<<10) + `"`)
		es = append(es, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res := make(chan []error, 1)
	go func() { res <- d.DeliverBatch(ctx, es) }()
	select {
	case errs := <-res:
		if len(errs) != len(es) || errs[0] == nil {
			t.Fatalf("errors %v", errs)
		}
		t.Logf("%v", errs[0])
	case <-time.After(10 * time.Second):
		t.Fatal("DeliverBatch still blocked 8 s after its 2 s context ended")
	}
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close on a broker that stopped reading: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close still blocked after 10 s on a broker that stopped reading")
	}
	proxy.StopReading(false)
}

// On a dead link (TCP up, nothing carried) a batch that fails on its
// context returns with it: dropping the connection does not wait for the
// broker's close-ok.
func TestDeadLinkReturnsWithContext(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	proxy := testkit.NewProxy(t, brokerAddr(t, b.url))
	d, err := amqp.New(amqp.Config{URL: proxied(t, b.url, proxy.Addr()), Exchange: b.exchange})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Deliver(context.Background(), event("warm")); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(true)
	defer proxy.Stall(false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- d.Deliver(ctx, event("lost")) }()
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("delivered over a dead link")
		}
		t.Logf("%v", err)
	case <-time.After(3 * time.Second):
		t.Fatal("Deliver still running 2 s after its 1 s context ended")
	}
}

// A broker that cannot be reached fails the batch within seconds, naming
// the address and the cause, not at the end of the delivery's context.
func TestUnreachableFailsFast(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connection refused
	d, err := amqp.New(amqp.Config{URL: "amqp://guest:guest@" + addr + "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = d.Deliver(ctx, event("a"))
	if ctx.Err() != nil || err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("%v (context: %v), want an error naming %s and the refusal before the context ends", err, ctx.Err(), addr)
	}
	t.Logf("%v", err)
}
