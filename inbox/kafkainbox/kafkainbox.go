// Package kafkainbox consumes herald's Kafka records (the delivery/kafka
// format) through an inbox, with franz-go: each record is handled once
// per consumer, and its offset is committed only after its id committed,
// so the records after a crash's last committed offset are read again and
// those already processed are Duplicates.
package kafkainbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/outbox"
)

// Defaults of Config's zero fields.
const (
	DefaultRetryWait = time.Second
	DefaultMaxPoll   = 100
)

// Message is a Kafka record of herald's.
type Message struct {
	Record  *kgo.Record
	Headers map[string]string // the record's headers
	Payload []byte            // the record's value
}

// Config configures a Consumer.
type Config struct {
	// Brokers are the seed brokers; required.
	Brokers []string
	// Topics are the Kafka topics to consume; required.
	Topics []string
	// Group is the Kafka consumer group; required.
	Group string
	// Opts are more client options (TLS, SASL, kgo.InstanceID for static
	// membership…); they come last. The consumer sets
	// kgo.DisableAutoCommit and kgo.BlockRebalanceOnPoll itself: offsets
	// are committed only after the records' ids, and a rebalance waits for
	// the commit of the records in hand.
	Opts []kgo.Opt
	// Handler is run for each record; exactly one of its fields is set.
	Handler inbox.Handler[Message]
	// ExtractID gives a record's inbox message; nil = inbox.FromHeaders
	// (herald-event-id, herald-ordering-key, herald-sequence).
	ExtractID func(Message) (inbox.Message, error)
	// RetryWait is the pause before a failed record is handled again; 0 =
	// DefaultRetryWait. A failed record is retried until it succeeds (or
	// Run ends): its partition waits, so a key's records keep their order.
	RetryWait time.Duration
	// MaxPoll is the most records handled between two offset commits; 0 =
	// DefaultMaxPoll. After a crash, at most that many records per
	// partition are read again (and found Duplicates).
	MaxPoll int
	// Logger gets failures; nil = slog.Default().
	Logger *slog.Logger
}

// Consumer reads Kafka topics through an inbox.
type Consumer struct {
	in  *inbox.Inbox
	cfg Config
	cl  *kgo.Client
}

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("kafkainbox.Config."+field, format, args...)
}

// New returns a Consumer for in; it builds its client (closed when Run
// returns).
func New(in *inbox.Inbox, cfg Config) (*Consumer, error) {
	switch {
	case in == nil:
		return nil, cfgErr("inbox", "nil *inbox.Inbox")
	case len(cfg.Brokers) == 0:
		return nil, cfgErr("Brokers", "none")
	case len(cfg.Topics) == 0:
		return nil, cfgErr("Topics", "none")
	case cfg.Group == "":
		return nil, cfgErr("Group", "empty: offsets are committed to a group")
	case cfg.RetryWait < 0:
		return nil, cfgErr("RetryWait", "negative")
	case cfg.MaxPoll < 0:
		return nil, cfgErr("MaxPoll", "negative")
	}
	if err := cfg.Handler.Validate("kafkainbox.Config.Handler"); err != nil {
		return nil, err
	}
	if cfg.ExtractID == nil {
		cfg.ExtractID = func(m Message) (inbox.Message, error) { return inbox.FromHeaders(m.Headers) }
	}
	if cfg.RetryWait == 0 {
		cfg.RetryWait = DefaultRetryWait
	}
	if cfg.MaxPoll == 0 {
		cfg.MaxPoll = DefaultMaxPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, cfg.Opts...)
	opts = append(opts, kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("herald/kafkainbox: %w", err)
	}
	return &Consumer{in: in, cfg: cfg, cl: cl}, nil
}

// Run consumes until ctx ends (it returns nil then), committing each
// poll's offsets after its records' ids committed, and closes the client.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.cl.Close()
	for {
		fs := c.cl.PollRecords(ctx, c.cfg.MaxPoll)
		if ctx.Err() != nil || fs.IsClientClosed() {
			c.cl.AllowRebalance()
			return nil
		}
		var errs []error
		fs.EachError(func(topic string, p int32, err error) {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", topic, p, err))
		})
		if len(errs) > 0 && !errors.Is(errs[0], context.Canceled) {
			c.cfg.Logger.WarnContext(ctx, "herald/kafkainbox: fetch failed", "error", errors.Join(errs...))
		}
		var done []*kgo.Record
		stopped := false
		fs.EachRecord(func(r *kgo.Record) {
			if stopped {
				return
			}
			if !c.handle(ctx, r) {
				stopped = true // ctx ended mid-retry: commit what is done
				return
			}
			done = append(done, r)
		})
		if len(done) > 0 {
			// The ids are committed: a lost offset commit means a re-read,
			// and the re-read records are Duplicates.
			if err := c.cl.CommitRecords(context.WithoutCancel(ctx), done...); err != nil {
				c.cfg.Logger.WarnContext(ctx, "herald/kafkainbox: offset commit failed", "error", err)
			}
		}
		c.cl.AllowRebalance()
		if stopped {
			return nil
		}
	}
}

// handle runs r until it succeeds; false when ctx ended first.
func (c *Consumer) handle(ctx context.Context, r *kgo.Record) bool {
	m := Message{Record: r, Payload: r.Value, Headers: make(map[string]string, len(r.Headers))}
	for _, h := range r.Headers {
		m.Headers[h.Key] = string(h.Value)
	}
	for {
		id, err := c.cfg.ExtractID(m)
		if err != nil {
			// Not a message this consumer can de-duplicate: retrying will
			// not help. Logged and skipped (its offset is committed).
			c.cfg.Logger.ErrorContext(ctx, "herald/kafkainbox: record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", err)
			return true
		}
		if _, err = c.cfg.Handler.Run(ctx, c.in, id, m); err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		c.cfg.Logger.ErrorContext(ctx, "herald/kafkainbox: handling a record failed; retrying", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(c.cfg.RetryWait):
		}
	}
}
