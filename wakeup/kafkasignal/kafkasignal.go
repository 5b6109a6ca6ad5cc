package kafkasignal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/wakehub"
	"github.com/heraldgo/herald/wakeup"
)

// DefaultTopic is the signal topic when Config.Topic is empty.
const DefaultTopic = "herald.wakeup"

// Defaults of Config.
const (
	DefaultRetention     = time.Minute
	DefaultMinBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff    = 30 * time.Second
	DefaultPollWhileDown = time.Second
	DefaultSignalTimeout = 5 * time.Second
	DefaultHealthCheck   = 10 * time.Second
)

// Config configures a Wakeup. The zero value of every field means its
// default.
type Config struct {
	// Brokers are the seed brokers ("host:9092") of the clients the
	// Wakeup builds; it connects when it first listens or signals.
	// Required.
	Brokers []string

	// Topic is the Kafka topic signals go through, the same for writers
	// and relays of one outbox; "" = DefaultTopic. It is created, with one
	// partition and Retention, when it does not exist.
	Topic string

	// Retention is the retention.ms (and segment.ms) of a topic this
	// package creates: signals are only useful for moments;
	// 0 = DefaultRetention.
	Retention time.Duration

	// ClientOptions are added to the options of the franz-go clients the
	// Wakeup builds (TLS, SASL, a Dialer); the seed brokers, the producer
	// settings and the consumed partitions are set by the Wakeup.
	ClientOptions []kgo.Opt
	// ClientOpts are added before ClientOptions.
	//
	// Deprecated: use ClientOptions, the name delivery/kafka uses too.
	ClientOpts []kgo.Opt

	// Logger receives a WARN for each failure of the consumer or of a
	// publish, an ERROR from the fifth failure in a row on, and an INFO
	// when listening again; nil = slog.Default().
	Logger *slog.Logger

	// MinBackoff and MaxBackoff bound the wait between reconnects of the
	// consumer; it doubles after each failure in a row.
	MinBackoff, MaxBackoff time.Duration

	// PollWhileDown is how often listening relays are told to poll while
	// the consumer is down; 0 = DefaultPollWhileDown.
	PollWhileDown time.Duration

	// SignalTimeout bounds one publish; 0 = DefaultSignalTimeout.
	SignalTimeout time.Duration

	// HealthCheck is how long the consumer may stay quiet before the
	// cluster is pinged (an unreachable cluster is found this way and the
	// consumer rebuilt); 0 = DefaultHealthCheck.
	HealthCheck time.Duration
}

// Wakeup is a Kafka wakeup: writers produce each topic name as a record
// to the signal topic after commit; relays read the signal topic from its
// end, outside any consumer group, on one consumer per Wakeup value shared
// by all the relays of the process. Create one per process and give it to
// both the capture plugin and the relays. Safe for concurrent use.
type Wakeup struct {
	brokers []string
	topic   string
	cfg     Config
	hub     *wakehub.Hub
	sender  *wakehub.Sender

	mu      sync.Mutex
	client  *kgo.Client // producer and admin requests; built on first use
	created bool        // the signal topic is known to exist
	closed  bool
}

var _ wakeup.Wakeup = (*Wakeup)(nil)

// New checks cfg and returns a Wakeup on cfg.Brokers; it connects when it
// first listens or signals.
func New(cfg Config) (*Wakeup, error) {
	if len(cfg.Brokers) == 0 {
		return nil, envelope.Configurationf("kafkasignal.Config.Brokers", "no seed brokers; give at least one host:port")
	}
	brokers := cfg.Brokers
	// The code below reads ClientOpts: the deprecated field and the
	// new one, in that order.
	cfg.ClientOpts = append(slices.Clip(cfg.ClientOpts), cfg.ClientOptions...)
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		return nil, envelope.Configurationf("kafkasignal.Config.MaxBackoff", "%s is below MinBackoff %s", cfg.MaxBackoff, cfg.MinBackoff)
	}
	if cfg.PollWhileDown <= 0 {
		cfg.PollWhileDown = DefaultPollWhileDown
	}
	if cfg.SignalTimeout <= 0 {
		cfg.SignalTimeout = DefaultSignalTimeout
	}
	if cfg.HealthCheck <= 0 {
		cfg.HealthCheck = DefaultHealthCheck
	}
	w := &Wakeup{brokers: brokers, topic: cfg.Topic, cfg: cfg}
	opt := wakehub.Options{
		Name: "herald/wakeup/kafkasignal", Logger: cfg.Logger,
		MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, PollWhileDown: cfg.PollWhileDown,
	}
	w.hub = wakehub.New(w.session, opt)
	w.sender = wakehub.NewSender(w.publish, cfg.SignalTimeout, opt)
	return w, nil
}

// Topic returns the signal topic.
func (w *Wakeup) Topic() string { return w.topic }

// admin returns the producer client, built and the signal topic created
// on first use.
func (w *Wakeup) admin(ctx context.Context) (*kgo.Client, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, wakeup.ErrClosed
	}
	if w.client == nil {
		opts := append([]kgo.Opt{}, w.cfg.ClientOpts...)
		opts = append(opts,
			kgo.SeedBrokers(w.brokers...),
			kgo.DefaultProduceTopic(w.topic),
			kgo.ProducerLinger(0),
			kgo.RequiredAcks(kgo.LeaderAck()), // a signal is a hint
			kgo.DisableIdempotentWrite(),
		)
		c, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, envelope.Configurationf("kafkasignal.Config.ClientOptions", "%v", err)
		}
		w.client = c
	}
	if !w.created {
		if err := w.createTopic(ctx, w.client); err != nil {
			return nil, err
		}
		w.created = true
	}
	return w.client, nil
}

// createTopic creates the signal topic unless it exists.
func (w *Wakeup) createTopic(ctx context.Context, c *kgo.Client) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = w.topic
	t.NumPartitions = 1
	t.ReplicationFactor = -1 // the broker's default
	ms := strconv.FormatInt(w.cfg.Retention.Milliseconds(), 10)
	for _, kv := range [][2]string{{"retention.ms", ms}, {"segment.ms", ms}} {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = kv[0], kmsg.StringPtr(kv[1])
		t.Configs = append(t.Configs, c)
	}
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = int32(w.cfg.SignalTimeout.Milliseconds())
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", w.topic, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", w.topic, err)
		}
	}
	return nil
}

// Signal produces each topic name as a record to the signal topic without
// waiting: topics signalled while a produce is in flight go out together in
// the next one, once each. Writers call it after their commit.
func (w *Wakeup) Signal(_ context.Context, topics []string) error {
	return w.sender.Signal(topics)
}

func (w *Wakeup) publish(ctx context.Context, topics []string) error {
	c, err := w.admin(ctx)
	if err != nil {
		return err
	}
	rs := make([]*kgo.Record, len(topics))
	for i, t := range topics {
		rs[i] = &kgo.Record{Value: []byte(t)}
	}
	return c.ProduceSync(ctx, rs...).FirstErr()
}

// Listen calls fn with the topics of each record produced to the signal
// topic after it subscribed, until ctx ends; see wakeup.Wakeup. All Listen
// calls of w share one consumer, which starts at the topic's end offsets
// (no consumer group, no committed offsets); while it fails it is rebuilt
// with back-off and fn(nil) is called every PollWhileDown, so relays poll
// meanwhile.
func (w *Wakeup) Listen(ctx context.Context, fn func(topics []string)) error {
	return w.hub.Listen(ctx, fn)
}

// Close stops listening and publishing and closes the clients. Later
// Signal and Listen calls return wakeup.ErrClosed.
func (w *Wakeup) Close() error {
	w.hub.Close()
	w.sender.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.client != nil {
		w.client.Close()
		w.client = nil
	}
	return nil
}

// endOffsets returns the end offset of every partition of the topic.
func (w *Wakeup) endOffsets(ctx context.Context, c *kgo.Client) (map[int32]kgo.Offset, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(w.topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lreq.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = w.topic
	for _, t := range mresp.Topics {
		if t.Topic == nil || *t.Topic != w.topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("metadata of %s: %w", w.topic, err)
		}
		for _, p := range t.Partitions {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition = p.Partition
			lp.Timestamp = -1 // the end
			lt.Partitions = append(lt.Partitions, lp)
		}
	}
	if len(lt.Partitions) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions", w.topic)
	}
	lreq.Topics = append(lreq.Topics, lt)
	lresp, err := lreq.RequestWith(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := map[int32]kgo.Offset{}
	for _, t := range lresp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("end offset of %s/%d: %w", w.topic, p.Partition, err)
			}
			out[p.Partition] = kgo.NewOffset().At(p.Offset)
		}
	}
	return out, nil
}

func (w *Wakeup) session(ctx context.Context, ready func(), deliver func([]string)) error {
	admin, err := w.admin(ctx)
	if err != nil {
		return err
	}
	ends, err := w.endOffsets(ctx, admin)
	if err != nil {
		return err
	}
	opts := append([]kgo.Opt{}, w.cfg.ClientOpts...)
	opts = append(opts,
		kgo.SeedBrokers(w.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.topic: ends}),
		kgo.FetchMaxWait(time.Second),
		kgo.KeepRetryableFetchErrors(),
	)
	c, err := kgo.NewClient(opts...)
	if err != nil {
		return envelope.Configurationf("kafkasignal.Config.ClientOptions", "%v", err)
	}
	defer c.Close()
	ready() // records from the end offsets on reach this consumer
	for {
		pctx, cancel := context.WithTimeout(ctx, w.cfg.HealthCheck)
		fs := c.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		if pctx.Err() != nil && fs.Empty() {
			// Quiet for a while: the client reconnects by itself, but a
			// cluster that stays unreachable must be told to the relays.
			hctx, cancel := context.WithTimeout(ctx, w.cfg.HealthCheck)
			err := c.Ping(hctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("ping: %w", err)
			}
			continue
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("fetch: %w", ferr)
		}
		var topics wakeup.Topics
		fs.EachRecord(func(r *kgo.Record) { topics.Add(string(r.Value)) })
		if topics.Len() > 0 {
			deliver(topics.List())
		}
	}
}
