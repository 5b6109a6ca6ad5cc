package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverytest"
	"github.com/heraldgo/herald/internal/kafkatest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// createTopic creates topic with partitions on the cluster at brokers
// (kfake seeds it itself; a real cluster from HERALD_KAFKA_BROKERS may not
// create topics on demand).
func createTopic(t testing.TB, brokers []string, topic string, partitions int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	for _, rt := range resp.Topics {
		if rt.ErrorCode != 0 && rt.ErrorCode != 36 { // 36 = TOPIC_ALREADY_EXISTS
			t.Fatalf("create topic %s: error code %d", topic, rt.ErrorCode)
		}
	}
}

// consumer reads a topic from its start into memory, from the first call
// of Received on (so that it starts no goroutine before the suite's leak
// check).
type consumer struct {
	brokers []string
	topic   string // a topic, or with regex a regular expression of topics
	regex   bool

	once   sync.Once
	mu     sync.Mutex
	msgs   []deliverytest.Message
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *consumer) start(t testing.TB) {
	opts := []kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(c.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50 * time.Millisecond)}
	if c.regex {
		opts = append(opts, kgo.ConsumeRegex(), kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(200*time.Millisecond))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				m := deliverytest.Message{Body: r.Value, Key: string(r.Key), Headers: map[string]string{},
					Destination: fmt.Sprintf("%s/%d", r.Topic, r.Partition)}
				for _, h := range r.Headers {
					m.Headers[strings.ToLower(h.Key)] = string(h.Value)
				}
				c.mu.Lock()
				c.msgs = append(c.msgs, m)
				c.mu.Unlock()
			})
		}
	}()
}

func (c *consumer) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

func (c *consumer) Received(t testing.TB) []deliverytest.Message {
	c.once.Do(func() { c.start(t) })
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]deliverytest.Message(nil), c.msgs...)
}

// viaProxy makes a client dial every broker through the proxy.
func viaProxy(p *testkit.Proxy) kgo.Opt {
	var d net.Dialer
	return kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, p.Addr())
	})
}

func newReceiver(t testing.TB) *deliverytest.Receiver {
	topic := testkit.Name("herald-conf-")
	brokers := kafkatest.Brokers(t, kfake.SeedTopics(3, topic))
	createTopic(t, brokers, topic, 3)
	// One broker behind the proxy: kfake.NumBrokers(1) unless a real
	// cluster is given, whose tests then dial its first broker only.
	proxy := testkit.NewProxy(t, brokers[0])
	c := &consumer{brokers: brokers, topic: topic}
	t.Cleanup(c.stop)
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := kafka.New(kafka.Config{Brokers: []string{proxy.Addr()}, Topic: topic, ClientOptions: []kgo.Opt{viaProxy(proxy)}})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: c.Received,
		Down:     func(testing.TB) { proxy.SetDown(true) },
		Up:       func(testing.TB) { proxy.SetDown(false) },
		Conns:    proxy.Open,
		Outage:   "TCP proxy to kfake cut, refusing connections",
	}
}

// atDefaults is a receiver of a delivery built from the brokers alone: a
// consumer of every topic whose name begins with the topics' first part,
// each message's destination its topic and partition. The topics the
// delivery may write to (the event topics and their aggregates) are
// created with 3 partitions, so a key split over partitions would show.
func atDefaults(t testing.TB, topics []string) *deliverytest.Receiver {
	first, _, _ := strings.Cut(topics[0], ".")
	brokers := kafkatest.Brokers(t)
	for _, tp := range topics {
		createTopic(t, brokers, tp, 3)
		createTopic(t, brokers, delivery.ByAggregate(&envelope.Event{Topic: tp}), 3)
	}
	c := &consumer{brokers: brokers, topic: "^" + regexp.QuoteMeta(first) + `\.`, regex: true}
	t.Cleanup(c.stop)
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := kafka.New(kafka.Config{Brokers: brokers})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: c.Received,
	}
}

func TestConformance(t *testing.T) {
	deliverytest.Run(t, deliverytest.Suite{NewReceiver: newReceiver, Keyed: true, AtDefaults: atDefaults})
}

func event(topic, key string) *envelope.Event {
	return &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: topic, OrderingKey: key, Payload: []byte(`{"n":1}`)}
}

func TestEventTopicAndTopicFunc(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t, kfake.SeedTopics(1, "billing.paid", "out.billing.refunded"))
	createTopic(t, brokers, "billing.paid", 1)
	createTopic(t, brokers, "out.billing.refunded", 1)
	plain, err := kafka.New(kafka.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	mapped, err := kafka.New(kafka.Config{Brokers: brokers, TopicFunc: func(e *envelope.Event) string {
		if strings.HasPrefix(e.Topic, "billing.") {
			return "out." + e.Topic
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	ctx := context.Background()
	if err := plain.Deliver(ctx, event("billing.paid", "")); err != nil {
		t.Fatal(err)
	}
	errs := mapped.DeliverBatch(ctx, []*envelope.Event{event("billing.refunded", "k"), event("library.loan", "k2")})
	if errs == nil || errs[0] != nil || !errors.Is(errs[1], delivery.ErrDelivery) || !strings.Contains(errs[1].Error(), "library.loan") {
		t.Fatalf("mapped batch: %v", errs)
	}
	// A topic Kafka would refuse fails at once, naming the fix.
	if err := plain.Deliver(ctx, event("tenant/acme:orders", "")); !errors.Is(err, delivery.ErrDelivery) || !strings.Contains(err.Error(), "TopicFunc") {
		t.Fatalf("illegal topic: %v", err)
	}
	for _, topic := range []string{"billing.paid", "out.billing.refunded"} {
		c := &consumer{brokers: brokers, topic: topic}
		testkit.Eventually(t, 20*time.Second, func() bool { return len(c.Received(t)) == 1 }, "one record in %s", topic)
		c.stop()
	}
}

// A record Kafka refuses fails its own event only.
func TestBatchMapsEachResult(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t, kfake.SeedTopics(1, "exists"), kfake.BrokerConfigs(map[string]string{"auto.create.topics.enable": "false"}))
	createTopic(t, brokers, "exists", 1)
	d, err := kafka.New(kafka.Config{Brokers: brokers, ClientOptions: []kgo.Opt{kgo.RecordDeliveryTimeout(2 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := d.DeliverBatch(ctx, []*envelope.Event{event("exists", "a"), event("missing-topic", "b"), event("exists", "c")})
	if errs == nil || errs[0] != nil || errs[2] != nil || errs[1] == nil {
		t.Fatalf("errors %v: want only the record of the missing topic to fail", errs)
	}
	var pe *kafka.ProduceError
	if !errors.As(errs[1], &pe) || pe.Topic != "missing-topic" {
		t.Fatalf("error %v: want a *kafka.ProduceError naming the topic", errs[1])
	}
	t.Logf("missing topic: %v", errs[1])
}

func TestGivenClientIsNotClosed(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t, kfake.SeedTopics(1, "given"))
	createTopic(t, brokers, "given", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	d, err := kafka.New(kafka.Config{Client: cl, Topic: "given"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "given", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("the given client must stay usable after Close: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	leaderOnly, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer leaderOnly.Close()
	for name, cfg := range map[string]kafka.Config{
		"Client (acks)":        {Client: leaderOnly},
		"ClientOptions (acks)": {Brokers: []string{"a:1"}, ClientOptions: []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}},
		"Brokers":              {},
		"Client":               {Brokers: []string{"a:1"}, Client: cl},
		"ClientOptions":        {Client: cl, ClientOptions: []kgo.Opt{kgo.ClientID("x")}},
		"TopicFunc":            {Brokers: []string{"a:1"}, Topic: "t", TopicFunc: func(*envelope.Event) string { return "" }},
		"CloseTimeout":         {Brokers: []string{"a:1"}, CloseTimeout: -time.Second},
	} {
		_, err := kafka.New(cfg)
		field, _, _ := strings.Cut(name, " ")
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "kafka.Config."+field) {
			t.Errorf("%s: %v, want ErrConfiguration naming kafka.Config.%s", name, err, name)
		}
	}
}

func TestRecord(t *testing.T) {
	t.Parallel()
	d, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e := event("library.loan.updated", "library.Loan:7")
	e.Headers = map[string]string{"traceparent": "00-1"}
	r := d.Record(e)
	if r.Topic != "library.loan" || string(r.Key) != e.OrderingKey || string(r.Value) != `{"n":1}` || len(r.Headers) != 5 {
		t.Fatalf("record %+v", r)
	}
	if d.Record(event("t", "")).Key != nil {
		t.Fatal("an unordered event must have a nil key (spread over partitions)")
	}
}

// An empty batch returns at once.
func TestEmptyBatch(t *testing.T) {
	t.Parallel()
	d, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if errs := d.DeliverBatch(ctx, nil); errs != nil || ctx.Err() != nil {
		t.Fatalf("empty batch: %v, context %v", errs, ctx.Err())
	}
}

// A record over the topic's max.message.bytes (under the client's own
// limit) fails alone; the rest of its partition's batch is produced.
func TestOversizedRecordFailsAlone(t *testing.T) {
	t.Parallel()
	const topic = "small-messages"
	brokers := kafkatest.Brokers(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, -1
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name, c.Value = "max.message.bytes", kmsg.StringPtr("20000")
	rt.Configs = append(rt.Configs, c)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic: %v %+v", err, resp)
	}
	d, err := kafka.New(kafka.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var es []*envelope.Event
	for i := range 39 {
		es = append(es, event("orders", fmt.Sprintf("k%d", i)))
	}
	big := event("orders", "big")
	noise := make([]byte, 45000) // random, so that compression cannot shrink it under the limit
	_, _ = rand.Read(noise)
	big.Payload = []byte(`"` + base64.StdEncoding.EncodeToString(noise) + `"`)
	es = append(es[:20], append([]*envelope.Event{big}, es[20:]...)...)
	errs := d.DeliverBatch(ctx, es)
	if errs == nil {
		t.Fatal("every record produced, the oversized one too")
	}
	for i, err := range errs {
		switch {
		case es[i] == big && !errors.Is(err, kerr.MessageTooLarge):
			t.Errorf("oversized record: %v, want MESSAGE_TOO_LARGE", err)
		case es[i] != big && err != nil:
			t.Errorf("event %d: %v, want it produced (only the oversized record fails)", i, err)
		}
	}
	t.Logf("oversized: %v", errs[20])
	co := &consumer{brokers: brokers, topic: topic}
	defer co.stop()
	testkit.Eventually(t, 20*time.Second, func() bool { return len(co.Received(t)) >= 39 }, "39 records in %s", topic)
}

// A broker that cannot be reached fails the batch within seconds, naming
// the address and the cause, not after the delivery's whole context.
func TestUnreachableBrokerFailsFast(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connection refused
	d, err := kafka.New(kafka.Config{Brokers: []string{addr}, Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := d.DeliverBatch(ctx, []*envelope.Event{event("t", "a"), event("t", "b")})
	if ctx.Err() != nil {
		t.Fatalf("the batch ran for its whole context: %v", errs)
	}
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("event %d: %v, want an error naming %s and the refusal", i, err, addr)
		}
	}
	if len(errs) > 0 {
		t.Logf("%v", errs[0])
	}
}

// inHand tells when the relay has a batch in hand.
type inHand struct {
	*kafka.Delivery
	once    sync.Once
	started chan struct{}
}

func (d *inHand) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	d.once.Do(func() { close(d.started) })
	return d.Delivery.DeliverBatch(ctx, es)
}

// A relay told to stop (SIGTERM, in Run) while Kafka cannot be reached
// stops once its batch in hand has failed — within UnreachableAfter and
// the marks, not the DeliveryTimeout (30 s) it would otherwise wait out.
func TestStopWhileBrokerDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	kd, err := kafka.New(kafka.Config{Brokers: []string{addr}, Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	d := &inHand{Delivery: kd, started: make(chan struct{})}
	defer d.Close()
	env := deliverytest.NewEnv(t)
	es := env.Write(t, envelope.Message{Topic: "t", OrderingKey: "k", Payload: 1})
	r, err := relay.New(env.DB, d, relay.Config{Logger: slog.New(slog.DiscardHandler)}) // DeliveryTimeout 30 s
	if err != nil {
		t.Fatal(err)
	}
	ctx, sigterm := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-d.started:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch in hand after 30 s")
	}
	sigterm()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10 s after its context ended, Kafka unreachable")
	}
	if row := env.Row(t, es[0].ID.String()); row.Published || !strings.Contains(row.LastError, addr) {
		t.Fatalf("event %+v: want it failed, last_error naming %s", row, addr)
	}
}
