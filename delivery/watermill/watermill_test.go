package watermill_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/watermill"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverytest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// consumer reads queues of the machine's RabbitMQ with amqp091 (a plain
// client, not Watermill's), each message's destination its queue.
type consumer struct {
	mu   sync.Mutex
	msgs []deliverytest.Message
}

func (c *consumer) received(testing.TB) []deliverytest.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]deliverytest.Message(nil), c.msgs...)
}

// consume declares queues (as Watermill's queue configuration expects
// them: not durable, not auto-deleted) and consumes them into c; they
// are deleted when the test ends.
func (c *consumer) consume(t testing.TB, queues ...string) {
	t.Helper()
	conn, err := amqp091.Dial(testkit.AMQPURL(t))
	if err != nil {
		t.Fatalf("RabbitMQ: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume(q, "", true, false, false, false, nil)
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
				c.mu.Lock()
				c.msgs = append(c.msgs, dm)
				c.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() {
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = conn.Close()
		wg.Wait()
	})
}

// publisher is a watermill-amqp publisher to the default exchange (the
// topic is the queue), waiting for RabbitMQ's confirmation of each
// message.
func publisher(t testing.TB, amqpURL string) message.Publisher {
	t.Helper()
	cfg := wmamqp.NewNonDurableQueueConfig(amqpURL)
	cfg.Publish.ConfirmDelivery = true
	cfg.Publish.ChannelPoolSize = 4 // reuse channels: without a pool each Publish opens and closes one
	cfg.Connection.Reconnect = &wmamqp.ReconnectConfig{BackoffInitialInterval: 50 * time.Millisecond, BackoffMultiplier: 2, BackoffMaxInterval: time.Second}
	p, err := wmamqp.NewPublisher(cfg, wm.NopLogger{})
	if err != nil {
		t.Fatalf("watermill-amqp: %v", err)
	}
	return p
}

func proxied(t testing.TB, raw, addr string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

func hostOf(t testing.TB, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		return u.Host + ":5672"
	}
	return u.Host
}

// newReceiver: Watermill's AMQP publisher through a proxy the test cuts
// or stops reading, to a queue of the test's own.
func newReceiver(t testing.TB) *deliverytest.Receiver {
	raw := testkit.AMQPURL(t)
	queue := testkit.Name("herald-wm-")
	c := &consumer{}
	c.consume(t, queue)
	proxy := testkit.NewProxy(t, hostOf(t, raw))
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := watermill.New(watermill.Config{Publisher: publisher(t, proxied(t, raw, proxy.Addr())), Topic: queue})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: c.received,
		Down:     func(testing.TB) { proxy.SetDown(true) },
		Up:       func(testing.TB) { proxy.SetDown(false) },
		Conns:    proxy.Open,
		Stall:    func(_ testing.TB, on bool) { proxy.StopReading(on) },
		Outage:   "TCP proxy cut, refusing connections",
	}
}

// atDefaults: a delivery given the publisher alone; a queue for every
// topic and aggregate the events may go to.
func atDefaults(t testing.TB, topics []string) *deliverytest.Receiver {
	raw := testkit.AMQPURL(t)
	queues := map[string]bool{}
	for _, tp := range topics {
		queues[tp] = true
		queues[delivery.ByAggregate(&envelope.Event{Topic: tp})] = true
	}
	var qs []string
	for q := range queues {
		qs = append(qs, q)
	}
	c := &consumer{}
	c.consume(t, qs...)
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := watermill.New(watermill.Config{Publisher: publisher(t, raw)})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: c.received,
	}
}

// TestConformance runs the suite through watermill-amqp to RabbitMQ.
func TestConformance(t *testing.T) {
	s := deliverytest.Suite{NewReceiver: newReceiver, AtDefaults: atDefaults}
	if raceDetector {
		// watermill-amqp v3.0.2 races with itself when its connection
		// drops: ConnectionWrapper.IsConnected (connection.go:114) reads
		// the flag handleConnectionClose (connection.go:139) writes,
		// unsynchronised. The race detector fails the test on that
		// library's code, not herald's; run Outage and Stalled without
		// -race: go test -run 'TestConformance/(Outage|Stalled)' ./delivery/watermill/
		s.SkipOutages = "watermill-amqp v3.0.2 has a data race on reconnect (ConnectionWrapper.connected); run without -race"
	}
	deliverytest.Run(t, s)
}

// TestGoChannelThroughRelay: Watermill's in-memory Go channel pub/sub
// behind a real relay: every event arrives once per delivery with its id
// as the message UUID and herald's headers as metadata, each key's
// events in order. The Go channel keeps order only when a publish waits
// for the subscriber's ack (BlockPublishUntilSubscriberAck): the order is
// the publisher's to keep.
func TestGoChannelThroughRelay(t *testing.T) {
	t.Parallel()
	const events, keys = 300, 30
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, wm.NopLogger{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := pubsub.Subscribe(ctx, "wm.loan")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []*message.Message
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
			m.Ack()
		}
	}()
	d, err := watermill.New(watermill.Config{Publisher: pubsub})
	if err != nil {
		t.Fatal(err)
	}
	env := deliverytest.NewEnv(t)
	env.StartRelay(t, d, deliverytest.RelayConfig())
	var all []*envelope.Event
	for w := range 10 {
		ms := make([]envelope.Message, events/10)
		for i := range ms {
			n := w*len(ms) + i
			ms[i] = envelope.Message{Topic: "wm.loan.updated", OrderingKey: fmt.Sprintf("k%02d", n%keys), Payload: map[string]int{"n": n},
				Headers: map[string]string{"tenant": "acme"}}
		}
		all = append(all, env.Write(t, ms...)...)
	}
	env.WaitPublished(t, time.Minute)
	testkit.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= events }, "every message received")
	mu.Lock()
	received := append([]*message.Message(nil), got...)
	mu.Unlock()
	byID := map[string]*envelope.Event{}
	for _, e := range all {
		byID[e.ID.String()] = e
	}
	last := map[string]int64{}
	seen := map[string]bool{}
	for _, m := range received {
		e := byID[m.UUID]
		if e == nil {
			t.Fatalf("message UUID %s is no event id", m.UUID)
		}
		if seen[m.UUID] {
			continue
		}
		seen[m.UUID] = true
		if m.Metadata.Get(delivery.HeaderEventID) != m.UUID || m.Metadata.Get(delivery.HeaderOrderingKey) != e.OrderingKey ||
			m.Metadata.Get("tenant") != "acme" || m.Metadata.Get(delivery.HeaderTopic) != e.Topic {
			t.Fatalf("message %s metadata %v", m.UUID, m.Metadata)
		}
		if e.Sequence <= last[e.OrderingKey] {
			t.Fatalf("key %s: sequence %d after %d", e.OrderingKey, e.Sequence, last[e.OrderingKey])
		}
		last[e.OrderingKey] = e.Sequence
	}
	if len(seen) != events {
		t.Fatalf("%d distinct events received of %d", len(seen), events)
	}
	cancel()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
}

// errPublisher fails every Publish.
type errPublisher struct{}

var errBroker = errors.New("broker says no")

func (errPublisher) Publish(string, ...*message.Message) error { return errBroker }
func (errPublisher) Close() error                              { return nil }

// A failed Publish fails each of its events; an event TopicFunc maps to
// no topic is Permanent.
func TestErrors(t *testing.T) {
	t.Parallel()
	d, err := watermill.New(watermill.Config{Publisher: errPublisher{}, TopicFunc: func(e *envelope.Event) string {
		if e.Topic == "none" {
			return ""
		}
		return e.Topic
	}})
	if err != nil {
		t.Fatal(err)
	}
	es := []*envelope.Event{
		{ID: uuid.Must(uuid.NewV7()), Topic: "a"}, {ID: uuid.Must(uuid.NewV7()), Topic: "none"},
	}
	errs := d.DeliverBatch(context.Background(), es)
	if len(errs) != 2 || !errors.Is(errs[0], errBroker) || !errors.Is(errs[1], delivery.ErrPermanent) || !errors.Is(errs[1], delivery.ErrDelivery) {
		t.Fatalf("errors %v", errs)
	}
	for name, cfg := range map[string]watermill.Config{
		"Publisher": {},
		"TopicFunc": {Publisher: errPublisher{}, Topic: "t", TopicFunc: delivery.ByTopic},
	} {
		if _, err := watermill.New(cfg); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "watermill.Config."+name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// gatedPublisher returns at once for its first n messages and then blocks
// until release is closed; it counts its calls.
type gatedPublisher struct {
	n       int
	mu      sync.Mutex
	calls   int
	sent    int
	release chan struct{}
}

func (p *gatedPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.calls++
	blocked := p.sent+len(msgs) > p.n
	if !blocked {
		p.sent += len(msgs)
	}
	p.mu.Unlock()
	if blocked {
		<-p.release
		return errors.New("released")
	}
	return nil
}

func (p *gatedPublisher) Close() error { return nil }

// By default a batch is published message by message: the messages a
// publisher took before the batch's context ended count as delivered, the
// rest fail with the context's error. With PublishBatch one call carries
// a topic's messages, all or nothing.
func TestPublishEachOrBatch(t *testing.T) {
	t.Parallel()
	es := make([]*envelope.Event, 4)
	for i := range es {
		es[i] = &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: "t", OrderingKey: fmt.Sprint(i)}
	}
	each := &gatedPublisher{n: 2, release: make(chan struct{})}
	defer close(each.release)
	d, err := watermill.New(watermill.Config{Publisher: each})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errs := d.DeliverBatch(ctx, es)
	if len(errs) != 4 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], context.DeadlineExceeded) || !errors.Is(errs[3], context.DeadlineExceeded) {
		t.Fatalf("errors %v: want the first two delivered, the rest failed with the context", errs)
	}
	whole := &gatedPublisher{n: 100, release: make(chan struct{})}
	defer close(whole.release)
	d, err = watermill.New(watermill.Config{Publisher: whole, PublishBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if errs := d.DeliverBatch(context.Background(), es); errs != nil {
		t.Fatal(errs)
	}
	if whole.calls != 1 {
		t.Fatalf("%d Publish calls for one topic's batch with PublishBatch; want 1", whole.calls)
	}
}
