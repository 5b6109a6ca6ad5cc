package kafka

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// DefaultCloseTimeout bounds the flush of Close when Config.CloseTimeout
// is zero.
const DefaultCloseTimeout = 10 * time.Second

// UnreachableAfter is how long a client the delivery built may fail to
// connect to a broker, every attempt failing, before the records of a
// batch still waiting fail with the dial's error (the broker's address and
// the cause, "dial tcp 127.0.0.1:9092: connect: connection refused")
// instead of waiting out the relay's DeliveryTimeout.
const UnreachableAfter = 2 * time.Second

// Config configures a Delivery. Exactly one of Brokers and Client is set.
type Config struct {
	// Brokers are the seed brokers ("host:9092") of a client the delivery
	// builds and owns: acks from all in-sync replicas, the idempotent
	// producer, no linger (a batch is produced at once), retries backed off
	// 1 s at most and metadata refreshed up to once a second (so that
	// delivery resumes within about a second of the brokers coming back),
	// and the fail-fast check of UnreachableAfter. nil = use Client.
	Brokers []string
	// ClientOptions are added to the options of the client built from
	// Brokers (TLS, SASL, a dialer); they come last and so win. Only with
	// Brokers.
	ClientOptions []kgo.Opt

	// Client is a ready client to produce with; nil = build one from
	// Brokers. The delivery never closes it. It must require acks from all
	// in-sync replicas (franz-go's default; New refuses it otherwise); its
	// other options are its own — keep idempotent writes on, and know that
	// its linger (10 ms by default) adds to every batch.
	Client *kgo.Client

	// Topic is the Kafka topic of every event; "" = TopicFunc's answer.
	Topic string
	// TopicFunc maps an event to its Kafka topic; nil =
	// delivery.ByAggregate, the topic less its operation: a captured row's
	// events ("shop.order.inserted", "shop.order.updated") go to the Kafka
	// topic "shop.order" with the ordering key as record key, so one
	// partition holds them in sequence order. Give the same answer for
	// every event of one ordering key, or a consumer loses their order;
	// delivery.ByTopic is a Kafka topic per event topic. Not together with
	// Topic. An event it maps to "" or to an illegal topic name fails at
	// once, dead-lettered (ErrDelivery, ErrPermanent).
	TopicFunc func(e *envelope.Event) string

	// CloseTimeout bounds how long Close waits for records still buffered
	// in a client the delivery built; 0 = DefaultCloseTimeout.
	CloseTimeout time.Duration
}

// Delivery produces events to Kafka. It is a delivery.BatchDelivery: a
// relay's batch is produced at once and each record's result is mapped
// back to its event.
type Delivery struct {
	cl           *kgo.Client
	own          bool
	topic        string
	topicFunc    func(*envelope.Event) string
	closeTimeout time.Duration
	closeOnce    sync.Once
	closeErr     error
	dials        *dialState // of a client the delivery built; nil for a given one
}

// dialState is what the connect hook of a client the delivery built saw:
// since when every connection attempt failed, and the last failure.
type dialState struct {
	mu      sync.Mutex
	failing time.Time // the first failure since the last success; zero when the last attempt succeeded
	err     error
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (s *dialState) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.failing, s.err = time.Time{}, nil
		return
	}
	if s.failing.IsZero() {
		s.failing = time.Now()
	}
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	if strings.Contains(err.Error(), addr) {
		s.err = err
	} else {
		s.err = fmt.Errorf("broker %s: %w", addr, err)
	}
}

// unreachable returns the last dial error when every attempt failed for
// UnreachableAfter, or how long to wait before asking again.
func (s *dialState) unreachable(now time.Time) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing.IsZero() {
		return UnreachableAfter, nil
	}
	if left := UnreachableAfter - now.Sub(s.failing); left > 0 {
		return left, nil
	}
	return 0, s.err
}

var _ delivery.BatchDelivery = (*Delivery)(nil)

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("kafka.Config."+field, format, args...)
}

// New checks cfg and returns a Delivery; with Brokers it builds a client
// (which does not connect until the first produce).
func New(cfg Config) (*Delivery, error) {
	switch {
	case cfg.Client == nil && len(cfg.Brokers) == 0:
		return nil, cfgErr("Brokers", "neither Brokers nor Client is set; give the seed brokers or a ready *kgo.Client")
	case cfg.Client != nil && len(cfg.Brokers) > 0:
		return nil, cfgErr("Client", "set together with Brokers; give one of them")
	case cfg.Client != nil && len(cfg.ClientOptions) > 0:
		return nil, cfgErr("ClientOptions", "set together with Client; options apply only to a client built from Brokers")
	case cfg.Topic != "" && cfg.TopicFunc != nil:
		return nil, cfgErr("TopicFunc", "set together with Topic; give one of them")
	case cfg.CloseTimeout < 0:
		return nil, cfgErr("CloseTimeout", "negative (%s)", cfg.CloseTimeout)
	}
	d := &Delivery{cl: cfg.Client, topic: cfg.Topic, topicFunc: cfg.TopicFunc, closeTimeout: cfg.CloseTimeout}
	if d.topicFunc == nil {
		d.topicFunc = delivery.ByAggregate
	}
	if d.closeTimeout == 0 {
		d.closeTimeout = DefaultCloseTimeout
	}
	if d.cl == nil {
		d.dials = &dialState{}
		opts := []kgo.Opt{
			kgo.SeedBrokers(cfg.Brokers...),
			kgo.WithHooks(d.dials),
			// franz-go backs off up to 5 s between retries, so after an
			// outage the first produce could come seconds after the
			// brokers are back; 1 s at most keeps the drain short.
			kgo.RetryBackoffFn(retryBackoff),
			// A metadata refresh after errors waits for the last one to
			// be this old (5 s by default): the same seconds again.
			kgo.MetadataMinAge(time.Second),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			// A relay's batch is produced all at once and waited for;
			// lingering would only delay it.
			kgo.ProducerLinger(0),
		}
		cl, err := kgo.NewClient(append(opts, cfg.ClientOptions...)...)
		if err != nil {
			return nil, cfgErr("Brokers", "build client: %v", err)
		}
		d.cl, d.own = cl, true
	}
	// A record acknowledged by the leader alone is lost when the leader
	// dies before a follower copied it: herald would have marked its
	// event published.
	if acks, _ := d.cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		field := "Client"
		if d.own {
			d.cl.Close()
			field = "ClientOptions"
		}
		return nil, cfgErr(field, "the client does not require acks from all in-sync replicas (kgo.RequiredAcks(kgo.AllISRAcks()), franz-go's default): an event would count as delivered on the leader's word alone")
	}
	return d, nil
}

// retryBackoff is the wait before a client the delivery built retries
// (a produce, a connection, a metadata request): 100 ms doubling to 1 s,
// with up to 20 % jitter.
func retryBackoff(tries int) time.Duration {
	d := min(100*time.Millisecond<<min(tries, 4), time.Second)
	return d - time.Duration(rand.Int64N(int64(d)/5))
}

// Client returns the client the delivery produces with.
func (d *Delivery) Client() *kgo.Client { return d.cl }

// Record returns the record the delivery produces for e: the topic, the
// ordering key as key (nil for an unordered event), the payload as value,
// the event's headers plus herald-event-id, herald-topic, herald-sequence
// and herald-ordering-key as headers (delivery.Headers). The topic is ""
// when TopicFunc maps e to none.
func (d *Delivery) Record(e *envelope.Event) *kgo.Record {
	topic := d.topic
	if topic == "" {
		topic = d.topicFunc(e)
	}
	hs := delivery.HeaderList(e)
	rh := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		rh[i] = kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)}
	}
	return &kgo.Record{Topic: topic, Key: delivery.Key(e), Value: delivery.Body(e), Headers: rh}
}

// Deliver produces one event and waits for Kafka's acknowledgement.
func (d *Delivery) Deliver(ctx context.Context, e *envelope.Event) error {
	if errs := d.DeliverBatch(ctx, []*envelope.Event{e}); errs != nil {
		return errs[0]
	}
	return nil
}

// DeliverBatch produces every event of es at once and waits until Kafka
// acknowledged or refused each record, or ctx ends. It returns one error
// per event (nil slice when all were produced).
func (d *Delivery) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	if len(es) == 0 {
		return nil
	}
	errs := d.produce(ctx, es)
	if errs == nil {
		return nil
	}
	// A partition's records go in one record batch, which Kafka refuses
	// whole when it exceeds the topic's max.message.bytes: one oversized
	// record fails its neighbours. Each is produced again alone, so only
	// the records that are too large themselves fail. A batch holds at
	// most one event per key: their order does not matter.
	var again []int
	for i, err := range errs {
		if errors.Is(err, kerr.MessageTooLarge) {
			again = append(again, i)
		}
	}
	if len(again) < 2 {
		return errs
	}
	for _, i := range again {
		if ctx.Err() != nil {
			break
		}
		one := d.produce(ctx, es[i:i+1])
		if one == nil {
			errs[i] = nil
		} else {
			errs[i] = one[0]
		}
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// produce produces es at once and waits for every promise, ctx's end, or
// (for a client the delivery built) every broker connection failing for
// UnreachableAfter.
func (d *Delivery) produce(ctx context.Context, es []*envelope.Event) []error {
	// Records still buffered when produce returns early are cancelled
	// with pctx: the client drops what it has not sent yet.
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The promises record their results under mu. When ctx ends first,
	// the results so far are copied out and late promises write to what
	// nobody reads any more.
	var (
		mu      sync.Mutex
		pending = len(es)
		done    = make(chan struct{})
		results = make([]error, len(es))
		settled = make([]bool, len(es))
		failed  bool
	)
	finish := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		results[i], settled[i] = err, true
		if err != nil {
			failed = true
		}
		if pending--; pending == 0 {
			close(done)
		}
	}
	for i, e := range es {
		r := d.Record(e)
		if r.Topic == "" {
			finish(i, delivery.Permanent(fmt.Errorf("herald/kafka: event %s (topic %q): TopicFunc gave no Kafka topic: %w", e.ID, e.Topic, delivery.ErrDelivery)))
			continue
		}
		if !legalTopic(r.Topic) {
			finish(i, delivery.Permanent(fmt.Errorf("herald/kafka: event %s: %q is not a legal Kafka topic name (at most 249 of a-z A-Z 0-9 . _ -); map it with Config.TopicFunc: %w",
				e.ID, r.Topic, delivery.ErrDelivery)))
			continue
		}
		d.cl.Produce(pctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				err = &ProduceError{EventID: e.ID.String(), Topic: r.Topic, Err: err}
			}
			finish(i, err)
		})
	}
	var unreachable error
	if d.dials != nil {
		timer := time.NewTimer(UnreachableAfter)
		defer timer.Stop()
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-ctx.Done():
				break wait
			case now := <-timer.C:
				next, err := d.dials.unreachable(now)
				if err != nil {
					unreachable = err
					break wait
				}
				timer.Reset(next)
			}
		}
	} else {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if pending > 0 {
		// Records still out may yet be written: the relay tries their
		// events again, and receivers de-duplicate on herald-event-id.
		for i, e := range es {
			switch {
			case settled[i]:
			case unreachable != nil:
				results[i] = fmt.Errorf("herald/kafka: event %s: no acknowledgement from Kafka, whose brokers could not be reached for %s: %w", e.ID, UnreachableAfter, unreachable)
			default:
				results[i] = fmt.Errorf("herald/kafka: event %s: no acknowledgement from Kafka before the delivery's context ended: %w", e.ID, ctx.Err())
			}
		}
		failed = true
	}
	if !failed {
		return nil
	}
	return slices.Clone(results)
}

// Close flushes and closes the client when the delivery built it; a
// client given in Config is left alone. Safe to call twice.
func (d *Delivery) Close() error {
	d.closeOnce.Do(func() {
		if !d.own {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), d.closeTimeout)
		defer cancel()
		if err := d.cl.Flush(ctx); err != nil {
			d.closeErr = fmt.Errorf("herald/kafka: flush before close: %w", err)
		}
		d.cl.Close()
	})
	return d.closeErr
}

// ProduceError is the error of a record Kafka did not take.
type ProduceError struct {
	EventID string
	Topic   string
	Err     error // franz-go's error (kerr errors, kgo.ErrRecordTimeout, a context error…)
}

func (e *ProduceError) Error() string {
	return fmt.Sprintf("herald/kafka: produce event %s to topic %q: %v", e.EventID, e.Topic, e.Err)
}

func (e *ProduceError) Unwrap() error { return e.Err }

// legalTopic reports whether Kafka accepts name as a topic name.
func legalTopic(name string) bool {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}
