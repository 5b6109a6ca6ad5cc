package kafkasignal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/internal/outbox"
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
	DefaultHealthCheck   = 5 * time.Second
)

// maxFetchWait is the longest a broker holds a fetch with nothing to
// return (kgo.FetchMaxWait): a healthy link answers at least that often.
// The consumer asks for at most half its HealthCheck.
const maxFetchWait = time.Second

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
	// settings and the consumed partitions are set by the Wakeup. The
	// Wakeup's clients retry a failed request after 50 ms, doubling to at
	// most 1 s (franz-go's default is 250 ms to 5 s, which delayed the
	// first signal after a short outage by 3–5 s); a kgo.RetryBackoffFn
	// here replaces that.
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

	// HealthCheck is how long the consumer may go without a response
	// from the brokers — it asks them to answer a fetch at least every
	// second, or every half HealthCheck if that is shorter — before the
	// link is declared dead and the consumer rebuilt (brokers that
	// stopped answering while TCP stays up are found this way; a broken
	// connection is found at once). It also bounds what a new consumer
	// waits for before it is subscribed: its first fetch response.
	// 0 = DefaultHealthCheck.
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
		return nil, outbox.Configurationf("kafkasignal.Config.Brokers", "no seed brokers; give at least one host:port")
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
		return nil, outbox.Configurationf("kafkasignal.Config.MaxBackoff", "%s is below MinBackoff %s", cfg.MaxBackoff, cfg.MinBackoff)
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
		opts := append([]kgo.Opt{kgo.RetryBackoffFn(retryBackoff)}, w.cfg.ClientOpts...)
		opts = append(opts,
			kgo.SeedBrokers(w.brokers...),
			kgo.DefaultProduceTopic(w.topic),
			kgo.ProducerLinger(0),
			kgo.RequiredAcks(kgo.LeaderAck()), // a signal is a hint
			kgo.DisableIdempotentWrite(),
		)
		c, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, outbox.Configurationf("kafkasignal.Config.ClientOptions", "%v", err)
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
// (no consumer group, no committed offsets); a broken connection, a fetch
// error or HealthCheck without a response ends it, and while it is down it
// is rebuilt with back-off and fn(nil) is called every PollWhileDown, so
// relays poll meanwhile.
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

// retryBackoff is the clients' wait before retrying a request: 50 ms,
// doubling to 1 s, with up to 20% jitter.
func retryBackoff(fails int) time.Duration {
	d := 50 * time.Millisecond << min(max(fails-1, 0), 5)
	d = min(d, time.Second)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// linkWatch is a kgo hook on the consumer's connections: the first failed
// connect, write or read fails the session at once (the client would
// reconnect by itself, but the relays must poll meanwhile: a new session
// tells them to when it is subscribed), and every response read is the
// health check's proof of life.
type linkWatch struct {
	fail      context.CancelCauseFunc
	lastRead  atomic.Int64  // unix nanoseconds
	fetched   chan struct{} // closed at the first fetch response
	fetchOnce sync.Once
}

func (l *linkWatch) broken(meta kgo.BrokerMetadata, what string, err error) {
	if err == nil || errors.Is(err, kgo.ErrClientClosed) || errors.Is(err, context.Canceled) {
		return
	}
	l.fail(fmt.Errorf("%s broker %s: %w", what, net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))), err))
}

func (l *linkWatch) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	l.broken(meta, "connect to", err)
}

func (l *linkWatch) OnBrokerWrite(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	l.broken(meta, "write to", err)
}

func (l *linkWatch) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		l.lastRead.Store(time.Now().UnixNano())
		if key == int16(kmsg.Fetch) {
			l.fetchOnce.Do(func() { close(l.fetched) })
		}
		return
	}
	l.broken(meta, "read from", err)
}

func (w *Wakeup) session(ctx context.Context, ready func(), deliver func([]string)) error {
	// Until it is subscribed, the session's requests are bounded: a
	// cluster that does not answer is a failure, not a wait.
	sctx, cancel := context.WithTimeout(ctx, w.cfg.HealthCheck)
	admin, err := w.admin(sctx)
	var ends map[int32]kgo.Offset
	if err == nil {
		ends, err = w.endOffsets(sctx, admin)
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	pollCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	watch := &linkWatch{fail: fail, fetched: make(chan struct{})}
	watch.lastRead.Store(time.Now().UnixNano())
	opts := append([]kgo.Opt{kgo.RetryBackoffFn(retryBackoff)}, w.cfg.ClientOpts...)
	opts = append(opts,
		kgo.SeedBrokers(w.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.topic: ends}),
		kgo.FetchMaxWait(max(min(maxFetchWait, w.cfg.HealthCheck/2), 10*time.Millisecond)),
		kgo.KeepRetryableFetchErrors(),
		kgo.WithHooks(watch),
	)
	c, err := kgo.NewClient(opts...)
	if err != nil {
		return outbox.Configurationf("kafkasignal.Config.ClientOptions", "%v", err)
	}
	defer c.Close()
	// Subscribed once a fetch came back: the consumer's own connection
	// works, and records from the end offsets on reach it.
	first := time.NewTimer(w.cfg.HealthCheck)
	select {
	case <-watch.fetched:
		first.Stop()
	case <-pollCtx.Done():
		first.Stop()
		if ctx.Err() != nil {
			return nil
		}
		return context.Cause(pollCtx)
	case <-first.C:
		return fmt.Errorf("health check: no fetch response within %s", w.cfg.HealthCheck)
	}
	ready()
	step := max(w.cfg.HealthCheck/4, 10*time.Millisecond)
	for {
		tctx, cancel := context.WithTimeout(pollCtx, step)
		fs := c.PollFetches(tctx)
		cancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		if pollCtx.Err() != nil {
			return context.Cause(pollCtx) // a connection failed
		}
		// Every error a fetch carries ends the session — an ACL refusal,
		// a topic deleted or recreated (UNKNOWN_TOPIC_ID: the client
		// never adopts the new topic's id), a leader moved — so that it
		// is logged, the relays poll and a new consumer starts afresh
		// after a back-off, instead of the client retrying unseen (and,
		// for a recreated topic, for ever) while relays wait for signals.
		var ferr error
		fs.EachError(func(topic string, partition int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = fmt.Errorf("fetch %s/%d: %w", topic, partition, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var topics wakeup.Topics
		fs.EachRecord(func(r *kgo.Record) { topics.Add(string(r.Value)) })
		if topics.Len() > 0 {
			deliver(topics.List())
		}
		if quiet := time.Since(time.Unix(0, watch.lastRead.Load())); quiet > w.cfg.HealthCheck {
			return fmt.Errorf("health check: no response from the brokers for %s", quiet.Round(time.Millisecond))
		}
	}
}
