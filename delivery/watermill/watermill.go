package watermill

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
)

// Config configures a Delivery.
type Config struct {
	// Publisher is any Watermill publisher (AMQP, Kafka, NATS, Google
	// Pub/Sub, SQL, the Go channel…). Close closes it: the delivery owns it
	// once New returned.
	Publisher message.Publisher

	// Topic is the Watermill topic of every event; "" = TopicFunc's
	// answer.
	Topic string
	// TopicFunc maps an event to its Watermill topic; nil =
	// delivery.ByAggregate, the topic less its operation, so a captured
	// row's events share one topic. Give the same answer for every event
	// of one ordering key. Not together with Topic. An event it maps to ""
	// fails at once, dead-lettered (ErrDelivery, ErrPermanent).
	TopicFunc func(e *envelope.Event) string
}

// Delivery publishes each event as a Watermill message: the event id as
// the message UUID, the payload as stored as the payload, and
// delivery.Headers(e) as the metadata. It is a delivery.BatchDelivery: a
// batch is one Publish call per topic, its messages in batch order.
type Delivery struct {
	pub       message.Publisher
	topic     string
	topicFunc func(*envelope.Event) string
}

var _ delivery.BatchDelivery = (*Delivery)(nil)

func cfgErr(field, format string, args ...any) error {
	return envelope.Configurationf("watermill.Config."+field, format, args...)
}

// New checks cfg and returns a Delivery.
func New(cfg Config) (*Delivery, error) {
	switch {
	case cfg.Publisher == nil:
		return nil, cfgErr("Publisher", "not set; give a Watermill message.Publisher")
	case cfg.Topic != "" && cfg.TopicFunc != nil:
		return nil, cfgErr("TopicFunc", "set together with Topic; give one of them")
	}
	d := &Delivery{pub: cfg.Publisher, topic: cfg.Topic, topicFunc: cfg.TopicFunc}
	if d.topicFunc == nil {
		d.topicFunc = delivery.ByAggregate
	}
	return d, nil
}

// Message returns the Watermill topic and message of e, its context ctx.
func (d *Delivery) Message(ctx context.Context, e *envelope.Event) (string, *message.Message) {
	topic := d.topic
	if topic == "" {
		topic = d.topicFunc(e)
	}
	m := message.NewMessage(e.ID.String(), delivery.Body(e))
	for k, v := range delivery.Headers(e) {
		m.Metadata.Set(k, v)
	}
	m.SetContext(ctx)
	return topic, m
}

// Deliver publishes one event.
func (d *Delivery) Deliver(ctx context.Context, e *envelope.Event) error {
	if errs := d.DeliverBatch(ctx, []*envelope.Event{e}); errs != nil {
		return errs[0]
	}
	return nil
}

// DeliverBatch publishes es with one Publish call per topic and returns
// one error per event, or nil when every Publish returned nil. A failed
// Publish fails each of its events (a publisher reports no message's
// own outcome). A Publish still running when ctx ends fails its events
// with ctx's error; it goes on in the background (the messages are then
// published again when the relay retries: receivers de-duplicate on the
// message UUID).
func (d *Delivery) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	errs := make([]error, len(es))
	failed := false
	type group struct {
		idx  []int
		msgs []*message.Message
	}
	var order []string
	groups := map[string]*group{}
	for i, e := range es {
		topic, m := d.Message(ctx, e)
		if topic == "" {
			errs[i] = delivery.Permanent(fmt.Errorf("herald/watermill: event %s (topic %q): TopicFunc gave no topic: %w", e.ID, e.Topic, delivery.ErrDelivery))
			failed = true
			continue
		}
		g := groups[topic]
		if g == nil {
			g = &group{}
			groups[topic] = g
			order = append(order, topic)
		}
		g.idx = append(g.idx, i)
		g.msgs = append(g.msgs, m)
	}
	for _, topic := range order {
		g := groups[topic]
		var err error
		if err = ctx.Err(); err == nil {
			done := make(chan error, 1)
			go func() { done <- d.pub.Publish(topic, g.msgs...) }()
			select {
			case err = <-done:
			case <-ctx.Done():
				err = context.Cause(ctx)
			}
		}
		if err != nil {
			failed = true
			for _, i := range g.idx {
				errs[i] = fmt.Errorf("herald/watermill: publish event %s to %q: %w", es[i].ID, topic, err)
			}
		}
	}
	if !failed {
		return nil
	}
	return errs
}

// Close closes the publisher.
func (d *Delivery) Close() error {
	if err := d.pub.Close(); err != nil {
		return fmt.Errorf("herald/watermill: close: %w", err)
	}
	return nil
}
