package watermill

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
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

	// PublishBatch makes a batch one Publish call per topic, all its
	// messages at once, for publishers that send them in one request: a
	// failed or late call then fails every event of it. false (the
	// default): one Publish call per message, in batch order, so the
	// messages published before the batch's context ended count as
	// delivered — what keeps a publisher that confirms each message in
	// turn (watermill-amqp's ConfirmDelivery) making progress when a whole
	// batch would outlast the relay's DeliveryTimeout.
	PublishBatch bool
}

// Delivery publishes each event as a Watermill message: the event id as
// the message UUID, the payload as stored as the payload, and
// delivery.Headers(e) as the metadata. It is a delivery.BatchDelivery:
// a batch is published message by message in batch order, or one Publish
// call per topic (Config.PublishBatch).
type Delivery struct {
	pub       message.Publisher
	topic     string
	topicFunc func(*envelope.Event) string
	batch     bool
}

var _ delivery.BatchDelivery = (*Delivery)(nil)

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("watermill.Config."+field, format, args...)
}

// New checks cfg and returns a Delivery.
func New(cfg Config) (*Delivery, error) {
	switch {
	case cfg.Publisher == nil:
		return nil, cfgErr("Publisher", "not set; give a Watermill message.Publisher")
	case cfg.Topic != "" && cfg.TopicFunc != nil:
		return nil, cfgErr("TopicFunc", "set together with Topic; give one of them")
	}
	d := &Delivery{pub: cfg.Publisher, topic: cfg.Topic, topicFunc: cfg.TopicFunc, batch: cfg.PublishBatch}
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

// DeliverBatch publishes es — one Publish call per message, in batch
// order, or with Config.PublishBatch one per topic — and returns one
// error per event, or nil when every Publish returned nil. A failed
// Publish fails each of its events (a publisher reports no message's own
// outcome). A Publish still running when ctx ends fails its events with
// ctx's error, and so do the messages not yet handed over; it goes on in
// the background (its messages may then arrive twice, once more when the
// relay retries: receivers de-duplicate on the message UUID).
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
		if d.batch {
			if err := d.publish(ctx, topic, g.msgs); err != nil {
				failed = true
				for _, i := range g.idx {
					errs[i] = fmt.Errorf("herald/watermill: publish event %s to %q: %w", es[i].ID, topic, err)
				}
			}
			continue
		}
		for j, i := range g.idx {
			if err := d.publish(ctx, topic, g.msgs[j:j+1]); err != nil {
				failed = true
				errs[i] = fmt.Errorf("herald/watermill: publish event %s to %q: %w", es[i].ID, topic, err)
			}
		}
	}
	if !failed {
		return nil
	}
	return errs
}

// publish calls Publish, returning at ctx's end if it has not returned
// by then (it goes on in the background: Publish takes no context).
func (d *Delivery) publish(ctx context.Context, topic string, msgs []*message.Message) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- d.pub.Publish(topic, msgs...) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Close closes the publisher.
func (d *Delivery) Close() error {
	if err := d.pub.Close(); err != nil {
		return fmt.Errorf("herald/watermill: close: %w", err)
	}
	return nil
}
