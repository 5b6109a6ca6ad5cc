// Package amqpinbox consumes herald's RabbitMQ messages (the
// delivery/amqp format) through an inbox, with amqp091-go: each delivery
// is handled once per consumer, acknowledged only after its id committed,
// and rejected with requeue when its handler fails, so a message whose
// consumer died (unacknowledged, requeued by the broker) or failed comes
// again, and is a Duplicate if its id had committed.
package amqpinbox

import (
	"context"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/outbox"
)

// DefaultPrefetch is Config.Prefetch's default.
const DefaultPrefetch = 100

// Message is a RabbitMQ delivery of herald's.
type Message struct {
	Delivery amqp.Delivery
	Headers  map[string]string // the string-valued AMQP headers
	Payload  []byte            // the body
}

// Config configures a Consumer.
type Config struct {
	// Channel is an open channel; required, never closed by the Consumer.
	Channel *amqp.Channel
	// Queue is the queue to consume; required (declared by the caller).
	Queue string
	// Tag is the consumer tag; "" = one the server gives.
	Tag string
	// Prefetch is the channel's QoS prefetch count; 0 = DefaultPrefetch.
	Prefetch int
	// Handler is run for each delivery; exactly one of its fields is set.
	Handler inbox.Handler[Message]
	// ExtractID gives a delivery's inbox message; nil = inbox.FromHeaders
	// (herald-event-id, herald-ordering-key, herald-sequence).
	ExtractID func(Message) (inbox.Message, error)
	// Logger gets failures; nil = slog.Default().
	Logger *slog.Logger
}

// Consumer reads a queue through an inbox.
type Consumer struct {
	in  *inbox.Inbox
	cfg Config
}

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("amqpinbox.Config."+field, format, args...)
}

// New returns a Consumer of cfg.Queue for in.
func New(in *inbox.Inbox, cfg Config) (*Consumer, error) {
	switch {
	case in == nil:
		return nil, cfgErr("inbox", "nil *inbox.Inbox")
	case cfg.Channel == nil:
		return nil, cfgErr("Channel", "nil")
	case cfg.Queue == "":
		return nil, cfgErr("Queue", "empty")
	case cfg.Prefetch < 0:
		return nil, cfgErr("Prefetch", "negative")
	}
	if err := cfg.Handler.Validate("amqpinbox.Config.Handler"); err != nil {
		return nil, err
	}
	if cfg.ExtractID == nil {
		cfg.ExtractID = func(m Message) (inbox.Message, error) { return inbox.FromHeaders(m.Headers) }
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = DefaultPrefetch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Consumer{in: in, cfg: cfg}, nil
}

// Decode reads a delivery's headers and body.
func Decode(d amqp.Delivery) Message {
	m := Message{Delivery: d, Payload: d.Body, Headers: make(map[string]string, len(d.Headers))}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			m.Headers[k] = s
		}
	}
	if _, ok := m.Headers[inbox.HeaderEventID]; !ok && d.MessageId != "" {
		m.Headers[inbox.HeaderEventID] = d.MessageId
	}
	return m
}

// Run consumes until ctx ends (it returns nil then) or the channel
// closes (an error).
func (c *Consumer) Run(ctx context.Context) error {
	ch := c.cfg.Channel
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("herald/amqpinbox: qos: %w", err)
	}
	ds, err := ch.ConsumeWithContext(ctx, c.cfg.Queue, c.cfg.Tag, false, false, false, false, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // ctx ended while the consumer was being set up: a stop, not a failure
		}
		return fmt.Errorf("herald/amqpinbox: consume %s: %w", c.cfg.Queue, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-ds:
			if !ok {
				if ctx.Err() != nil {
					return nil //nolint:nilerr // the channel closed because Run's ctx ended: a stop, not a failure
				}
				return fmt.Errorf("herald/amqpinbox: the channel of %s closed", c.cfg.Queue)
			}
			c.handle(ctx, d)
		}
	}
}

func (c *Consumer) handle(ctx context.Context, d amqp.Delivery) {
	m := Decode(d)
	id, err := c.cfg.ExtractID(m)
	if err != nil {
		// Not a message the inbox can de-duplicate; requeueing it would
		// loop. Rejected without requeue (to the queue's dead-letter
		// exchange, if it has one).
		c.cfg.Logger.ErrorContext(ctx, "herald/amqpinbox: message rejected", "queue", c.cfg.Queue, "error", err)
		_ = d.Reject(false)
		return
	}
	if _, err := c.cfg.Handler.Run(ctx, c.in, id, m); err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.ErrorContext(ctx, "herald/amqpinbox: handling failed; requeued", "queue", c.cfg.Queue, "id", id.ID, "error", err)
		}
		_ = d.Nack(false, true)
		return
	}
	// After the commit: a lost ack means a redelivery, a Duplicate.
	if err := d.Ack(false); err != nil {
		c.cfg.Logger.WarnContext(ctx, "herald/amqpinbox: ack failed", "queue", c.cfg.Queue, "id", id.ID, "error", err)
	}
}
