package nats_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/nats"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverytest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// stream is a JetStream stream of the test's own on the machine's server
// (memory storage, deleted when the test ends), read from its start by a
// plain ordered consumer into memory.
type stream struct {
	url  string
	name string
	nc   *natsgo.Conn
	js   jetstream.JetStream

	mu   sync.Mutex
	msgs []deliverytest.Message
}

func newStream(t testing.TB, subjects ...string) *stream {
	t.Helper()
	s := &stream{url: testkit.NATSURL(t), name: testkit.Name("herald-conf-")}
	nc, err := natsgo.Connect(s.url)
	if err != nil {
		t.Fatalf("NATS: %v", err)
	}
	s.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s.js = js
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(subjects) == 0 {
		subjects = []string{s.name}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: s.name, Subjects: subjects, Storage: jetstream.MemoryStorage}); err != nil {
		nc.Close()
		t.Fatalf("create stream %s: %v", s.name, err)
	}
	cons, err := js.OrderedConsumer(ctx, s.name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		dm := deliverytest.Message{Body: m.Data(), Headers: map[string]string{}, Destination: m.Subject()}
		for k, v := range m.Headers() {
			if len(v) > 0 {
				dm.Headers[strings.ToLower(k)] = v[0]
			}
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, dm)
		s.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Stop()
		<-cc.Closed()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, s.name)
		nc.Close()
	})
	return s
}

func (s *stream) received(testing.TB) []deliverytest.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]deliverytest.Message(nil), s.msgs...)
}

// count is the number of messages the stream stores.
func (s *stream) count(t testing.TB) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// proxied returns the URL with its host replaced by addr.
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
		return u.Host + ":4222"
	}
	return u.Host
}

func newReceiver(t testing.TB) *deliverytest.Receiver {
	s := newStream(t)
	proxy := testkit.NewProxy(t, hostOf(t, s.url))
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := nats.New(nats.Config{URL: proxied(t, s.url, proxy.Addr()), Subject: s.name, Stream: s.name})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: s.received,
		Down:     func(testing.TB) { proxy.SetDown(true) },
		Up:       func(testing.TB) { proxy.SetDown(false) },
		Conns:    proxy.Open,
		Stall:    func(_ testing.TB, on bool) { proxy.StopReading(on) },
		Outage:   "TCP proxy cut, refusing connections",
	}
}

// atDefaults is a receiver of a delivery built from the URL alone: a
// stream holding every subject under the topics' first part, read by a
// plain ordered consumer, each message's destination its subject.
func atDefaults(t testing.TB, topics []string) *deliverytest.Receiver {
	first, _, _ := strings.Cut(topics[0], ".")
	s := newStream(t, first+".>")
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := nats.New(nats.Config{URL: s.url})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: s.received,
	}
}

func TestConformance(t *testing.T) {
	deliverytest.Run(t, deliverytest.Suite{NewReceiver: newReceiver, AtDefaults: atDefaults})
}

func event(topic, key string) *envelope.Event {
	return &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: topic, OrderingKey: key, Payload: []byte(`{"n":1}`)}
}

// TestMsgIDDeduplicates: the event id is the message's Nats-Msg-Id, so
// JetStream stores an event delivered twice (a relay retrying after a
// lost acknowledgement) once; the second publish counts as delivered.
func TestMsgIDDeduplicates(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	d, err := nats.New(nats.Config{URL: s.url, Subject: s.name})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, other := event("a.b.inserted", "k1"), event("a.b.updated", "k2")
	for range 3 {
		if errs := d.DeliverBatch(ctx, []*envelope.Event{e, other}); errs != nil {
			t.Fatalf("DeliverBatch: %v", errs)
		}
	}
	if err := d.Deliver(ctx, e); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if n := s.count(t); n != 2 {
		t.Fatalf("the stream stores %d messages after two events were delivered four and three times; want 2", n)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(s.received(t)) == 2 }, "two messages read")
	m := s.received(t)[0]
	if m.Headers[strings.ToLower(jetstream.MsgIDHeader)] != e.ID.String() || m.Headers[delivery.HeaderEventID] != e.ID.String() ||
		string(m.Body) != `{"n":1}` || m.Headers[delivery.HeaderOrderingKey] != "k1" || m.Headers[delivery.HeaderTopic] != "a.b.inserted" {
		t.Fatalf("message %+v", m)
	}
}

// An event whose subject cannot be published to fails at once, marked
// Permanent; the rest of its batch is delivered.
func TestBadSubjectIsPermanent(t *testing.T) {
	t.Parallel()
	s := newStream(t, "herald-t-bad.>")
	d, err := nats.New(nats.Config{URL: s.url, SubjectFunc: func(e *envelope.Event) string { return "herald-t-bad." + e.Topic }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	es := []*envelope.Event{event("ok", "k1"), event("has space", "k2"), event("wild.*", "k3"), event("trailing.", "k4"), event("gt.>", "k5")}
	errs := d.DeliverBatch(ctx, es)
	if errs == nil || errs[0] != nil {
		t.Fatalf("errors %v", errs)
	}
	for i, err := range errs[1:] {
		if !errors.Is(err, delivery.ErrPermanent) || !errors.Is(err, delivery.ErrDelivery) {
			t.Errorf("event %d (topic %q): %v, want a permanent delivery error", i+1, es[i+1].Topic, err)
		}
	}
	if n := s.count(t); n != 1 {
		t.Fatalf("stream holds %d messages", n)
	}
}

// With Stream set, a publish to a subject of another stream is refused
// by JetStream (Nats-Expected-Stream) instead of stored there.
func TestExpectedStream(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	d, err := nats.New(nats.Config{URL: s.url, Subject: s.name, Stream: "herald-no-such-stream"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = d.Deliver(ctx, event("a", "k"))
	if err == nil || !strings.Contains(err.Error(), "stream") {
		t.Fatalf("%v, want JetStream's refusal", err)
	}
	t.Logf("%v", err)
	if n := s.count(t); n != 0 {
		t.Fatalf("stream holds %d messages", n)
	}
}

// While the connection is down a batch fails at once (no reconnect
// buffer), not at the end of its context.
func TestDisconnectedFailsFast(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	proxy := testkit.NewProxy(t, hostOf(t, s.url))
	d, err := nats.New(nats.Config{URL: proxied(t, s.url, proxy.Addr()), Subject: s.name})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Deliver(ctx, event("a", "k")); err != nil {
		t.Fatal(err)
	}
	proxy.SetDown(true)
	proxy.Cut()
	testkit.Eventually(t, 20*time.Second, func() bool { return !d.Conn().IsConnected() }, "the connection noticed the cut")
	errs := d.DeliverBatch(ctx, []*envelope.Event{event("a", "k1"), event("a", "k2")})
	if len(errs) != 2 || errs[0] == nil || errs[1] == nil || ctx.Err() != nil {
		t.Fatalf("errors %v (context %v), want both events to fail before the context ends", errs, ctx.Err())
	}
	t.Logf("%v", errs[0])
	proxy.SetDown(false)
	testkit.Eventually(t, 30*time.Second, func() bool { return d.Deliver(ctx, event("a", "k3")) == nil }, "delivering again after the cut")
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]nats.Config{
		"URL":           {},
		"Conn":          {URL: "nats://x", Conn: &natsgo.Conn{}},
		"ClientOptions": {Conn: &natsgo.Conn{}, ClientOptions: []natsgo.Option{natsgo.Name("x")}},
		"SubjectFunc":   {URL: "nats://x", Subject: "s", SubjectFunc: delivery.ByTopic},
		"Subject":       {URL: "nats://x", Subject: "a.*"},
		"DialTimeout":   {URL: "nats://x", DialTimeout: -1},
	} {
		_, err := nats.New(cfg)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "nats.Config."+name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
