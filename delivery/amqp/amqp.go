package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// DefaultDialTimeout bounds connecting (TCP, TLS and the AMQP handshake)
// when the delivery's context has no deadline; amqpfanout's is the same.
const DefaultDialTimeout = 10 * time.Second

// closeTimeout bounds closing a connection (the broker's close-ok): in
// Close, and when a failed batch drops its connection.
const closeTimeout = 2 * time.Second

// maxShortstr is the longest AMQP short string (a routing key, an
// exchange name, a header name), in bytes.
const maxShortstr = 255

// Config configures a Delivery.
type Config struct {
	// URL is the broker's AMQP URL ("amqp://user:pass@host:5672/vhost",
	// "amqps://…"). Required.
	URL string
	// AMQPConfig tunes the connection (TLS, heartbeat, properties); its Dial
	// is replaced by one bounded by the delivery's context. nil = defaults.
	AMQPConfig *amqp091.Config

	// Exchange is an existing exchange to publish to; "" = the default
	// exchange, which routes a message to the queue named by its routing
	// key. herald never declares it.
	Exchange string
	// RoutingKey is the routing key of every message; "" =
	// RoutingKeyFunc's answer.
	RoutingKey string
	// RoutingKeyFunc maps an event to its routing key; nil =
	// delivery.ByAggregate, the topic less its operation: a captured row's
	// events ("shop.order.inserted", "shop.order.updated") share the
	// routing key "shop.order" — on the default exchange, the queue
	// "shop.order" — and a queue holds them in sequence order. A topic
	// exchange binds "shop.order", "shop.*" or "shop.order.#" (which
	// matches "shop.order" and "shop.order.updated" alike, so a binding
	// made for per-topic routing keys keeps working). To filter by
	// operation give delivery.ByTopic, and bind each queue to every
	// operation of a model ("shop.order.*"), or lose the order between
	// them. Not together with RoutingKey.
	RoutingKeyFunc func(e *envelope.Event) string

	// Mandatory publishes with the mandatory flag: a message the exchange
	// cannot route to any queue is returned by the broker and its event
	// fails (ErrDelivery) instead of being dropped. false (RabbitMQ's
	// default) suits pub/sub, where a topic nobody subscribes to is no
	// error.
	Mandatory bool
}

// returnBuffer bounds the returned messages one batch can hold: a batch
// is published in chunks of at most this many messages, so the broker's
// returns (sent before the confirmations) never fill the buffer while the
// batch waits for its confirmations.
const returnBuffer = 1024

// Delivery publishes events to RabbitMQ. It is a delivery.BatchDelivery:
// a relay's batch is published on one channel in confirm mode and each
// event succeeds when the broker confirms its message. A lost connection
// or channel is re-opened on the next call.
type Delivery struct {
	cfg  Config
	amqp amqp091.Config

	// mu serializes batches: publisher confirms are numbered per channel,
	// and one batch at a time keeps that numbering the batch's own.
	mu      sync.Mutex
	raw     net.Conn // conn's socket: the delivery bounds its writes by each batch's context
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	closed  chan *amqp091.Error // the channel's close notification
	returns chan amqp091.Return // with Mandatory: messages the broker returned
	reason  error               // what closed came with, once read
	done    bool
}

var _ delivery.BatchDelivery = (*Delivery)(nil)

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("amqp.Config."+field, format, args...)
}

// New checks cfg and returns a Delivery; it connects on first use.
func New(cfg Config) (*Delivery, error) {
	switch {
	case cfg.URL == "":
		return nil, cfgErr("URL", "empty; give the broker's amqp:// URL")
	case cfg.RoutingKey != "" && cfg.RoutingKeyFunc != nil:
		return nil, cfgErr("RoutingKeyFunc", "set together with RoutingKey; give one of them")
	case len(cfg.RoutingKey) > maxShortstr:
		return nil, cfgErr("RoutingKey", "%d bytes; AMQP carries at most %d", len(cfg.RoutingKey), maxShortstr)
	case len(cfg.Exchange) > maxShortstr:
		return nil, cfgErr("Exchange", "%d bytes; AMQP carries at most %d", len(cfg.Exchange), maxShortstr)
	}
	if _, err := amqp091.ParseURI(cfg.URL); err != nil {
		return nil, cfgErr("URL", "%v", err)
	}
	d := &Delivery{cfg: cfg}
	if d.cfg.RoutingKeyFunc == nil {
		d.cfg.RoutingKeyFunc = delivery.ByAggregate
	}
	if cfg.AMQPConfig != nil {
		d.amqp = *cfg.AMQPConfig
	}
	if d.amqp.Properties == nil {
		d.amqp.Properties = amqp091.NewConnectionProperties()
		d.amqp.Properties.SetClientConnectionName("herald-delivery")
	}
	return d, nil
}

// Publishing returns the message the delivery publishes for e and its
// routing key: persistent, the payload as JSON body, the event id as
// message id, the event's headers plus herald-event-id, herald-topic,
// herald-sequence and herald-ordering-key as headers (delivery.Headers).
func (d *Delivery) Publishing(e *envelope.Event) (routingKey string, msg amqp091.Publishing) {
	routingKey = d.cfg.RoutingKey
	if routingKey == "" {
		routingKey = d.cfg.RoutingKeyFunc(e)
	}
	hs := delivery.Headers(e)
	t := make(amqp091.Table, len(hs))
	for k, v := range hs {
		t[k] = v
	}
	return routingKey, amqp091.Publishing{
		Headers:      t,
		ContentType:  "application/json",
		DeliveryMode: amqp091.Persistent,
		MessageId:    e.ID.String(),
		Timestamp:    e.CreatedAt,
		Body:         delivery.Body(e),
	}
}

// connect (re)opens the connection and the confirm-mode channel when
// either is missing or closed. Called with mu held.
func (d *Delivery) connect(ctx context.Context) error {
	if d.ch != nil && !d.ch.IsClosed() && d.conn != nil && !d.conn.IsClosed() {
		return nil
	}
	d.drop(ctx, false)
	cfg := d.amqp
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultDialTimeout)
	}
	var raw net.Conn
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		var nd net.Dialer
		c, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Bounds TLS and the AMQP handshake; amqp091 clears it once the
		// connection is open.
		if err := c.SetDeadline(deadline); err != nil {
			_ = c.Close()
			return nil, err
		}
		raw = c
		return c, nil
	}
	conn, err := amqp091.DialConfig(d.cfg.URL, cfg)
	if err != nil {
		return fmt.Errorf("herald/amqp: connect: %w", err)
	}
	// Opening the channel and confirm mode are round trips too: bounded
	// by the same deadline, cleared once they are done.
	fail := func(what string, err error) error {
		_ = raw.Close()
		_ = conn.Close()
		return fmt.Errorf("herald/amqp: %s: %w", what, err)
	}
	if err := raw.SetDeadline(deadline); err != nil {
		return fail("open channel", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail("open channel", err)
	}
	if err := ch.Confirm(false); err != nil {
		return fail("confirm mode", err)
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return fail("open channel", err)
	}
	d.raw, d.conn, d.ch = raw, conn, ch
	d.closed = ch.NotifyClose(make(chan *amqp091.Error, 1))
	if d.cfg.Mandatory {
		d.returns = ch.NotifyReturn(make(chan amqp091.Return, returnBuffer))
	}
	return nil
}

// drop closes what is left of the connection, waiting for the broker's
// close-ok until closeTimeout or ctx's deadline, whichever comes first;
// abrupt (a batch that failed on its context: the link may be dead)
// closes the socket at once. Called with mu held.
func (d *Delivery) drop(ctx context.Context, abrupt bool) {
	if d.conn != nil {
		if abrupt && d.raw != nil {
			_ = d.raw.Close()
		}
		deadline := time.Now().Add(closeTimeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		_ = d.conn.CloseDeadline(deadline)
	}
	d.raw, d.conn, d.ch, d.closed, d.reason, d.returns = nil, nil, nil, nil, nil, nil
}

// bound makes the socket's writes end with ctx — its deadline, or its
// cancellation: a broker that stops reading (RabbitMQ's memory or disk
// alarm) fills the socket buffers, and amqp091's writes would block for
// ever. The returned func lifts the bound. Called with mu held.
func (d *Delivery) bound(ctx context.Context) func() {
	raw := d.raw
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetWriteDeadline(dl)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = raw.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired // then lift it: a connection still in use must not keep a deadline in the past
		}
		_ = raw.SetWriteDeadline(time.Time{})
	}
}

// check returns why AMQP cannot carry e's message: a routing key or a
// header name longer than a short string. Such a message would be refused
// by amqp091 mid-frame, which kills the connection and the whole batch.
func (d *Delivery) check(e *envelope.Event, key string, msg *amqp091.Publishing) error {
	if len(key) > maxShortstr {
		return fmt.Errorf("routing key of %d bytes; AMQP carries at most %d (map the topic to a shorter key with Config.RoutingKeyFunc): %w",
			len(key), maxShortstr, delivery.ErrDelivery)
	}
	for k := range msg.Headers {
		if len(k) > maxShortstr {
			return fmt.Errorf("header name %.40q… of %d bytes; AMQP carries at most %d: %w", k, len(k), maxShortstr, delivery.ErrDelivery)
		}
	}
	return nil
}

// closeReason returns why the channel closed, if it did (amqp091 sends
// the reason before it nacks the pending confirmations).
func (d *Delivery) closeReason() error {
	if d.reason != nil || d.closed == nil {
		return d.reason
	}
	select {
	case err, ok := <-d.closed:
		if ok && err != nil {
			d.reason = err
		} else {
			d.reason = amqp091.ErrClosed
		}
	default:
	}
	return d.reason
}

// Deliver publishes one event and waits for its confirmation.
func (d *Delivery) Deliver(ctx context.Context, e *envelope.Event) error {
	if errs := d.DeliverBatch(ctx, []*envelope.Event{e}); errs != nil {
		return errs[0]
	}
	return nil
}

// DeliverBatch publishes every event of es, then waits for the broker's
// confirmations. It returns one error per event, or nil when the broker
// confirmed them all.
func (d *Delivery) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(es) <= returnBuffer {
		return d.deliverChunk(ctx, es)
	}
	var errs []error
	for start := 0; start < len(es); start += returnBuffer {
		chunk := es[start:min(start+returnBuffer, len(es))]
		if cerrs := d.deliverChunk(ctx, chunk); cerrs != nil {
			if errs == nil {
				errs = make([]error, len(es))
			}
			copy(errs[start:], cerrs)
		}
	}
	return errs
}

// deliverChunk publishes es and waits for their confirmations. Called
// with mu held.
func (d *Delivery) deliverChunk(ctx context.Context, es []*envelope.Event) []error {
	errs := make([]error, len(es))
	fail := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	if d.done {
		return fail(errors.New("herald/amqp: delivery closed"))
	}
	if err := d.connect(ctx); err != nil {
		return fail(err)
	}
	defer d.bound(ctx)()
	confirms := make([]*amqp091.DeferredConfirmation, len(es))
	failed := false
	for i, e := range es {
		key, msg := d.Publishing(e)
		if err := d.check(e, key, &msg); err != nil {
			errs[i] = d.publishErr(e, shortKey(key), err)
			failed = true
			continue
		}
		c, err := d.ch.PublishWithDeferredConfirmWithContext(ctx, d.cfg.Exchange, key, d.cfg.Mandatory, false, msg)
		if err == nil {
			confirms[i] = c
			continue
		}
		failed = true
		if !d.ch.IsClosed() {
			errs[i] = d.publishErr(e, key, err)
			continue
		}
		// The broker closed the channel (say, for an unknown exchange):
		// the rest of the batch fails with its reason.
		if reason := d.closeReason(); reason != nil {
			err = reason
		}
		for j := i; j < len(es); j++ {
			if errs[j] == nil {
				k, _ := d.Publishing(es[j])
				errs[j] = d.publishErr(es[j], shortKey(k), err)
			}
		}
		break
	}
	for i, c := range confirms {
		if c == nil {
			continue
		}
		ack, err := c.WaitContext(ctx)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("herald/amqp: event %s: no confirmation from the broker before the delivery's context ended: %w", es[i].ID, err)
		case !ack:
			// A nack, or the channel closed (an unknown exchange, a lost
			// connection) and amqp091 nacked what was pending.
			reason := d.closeReason()
			if reason == nil {
				reason = errors.New("the broker nacked the message")
			}
			key, _ := d.Publishing(es[i])
			errs[i] = d.publishErr(es[i], key, reason)
		default:
			continue
		}
		failed = true
	}
	if d.returns != nil {
		// The broker sends a returned message before its confirmation,
		// and amqp091 hands frames over in order: every return of this
		// chunk is in the buffer once its confirmations are in.
		returned := map[string]amqp091.Return{}
	drain:
		for {
			select {
			case r, ok := <-d.returns:
				if !ok {
					break drain
				}
				returned[r.MessageId] = r
			default:
				break drain
			}
		}
		for i, e := range es {
			if r, ok := returned[e.ID.String()]; ok && errs[i] == nil {
				errs[i] = fmt.Errorf("herald/amqp: event %s: exchange %q returned the message, routing key %q: %d %s: %w",
					e.ID, r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText, delivery.ErrDelivery)
				failed = true
			}
		}
	}
	if failed && (d.ch.IsClosed() || d.conn.IsClosed() || ctx.Err() != nil) {
		// A channel that lost confirmations (or whose state is unknown
		// after a timeout) is not reused: the next batch opens a new one.
		// After a timeout the link may be dead: its socket is closed at
		// once, not after waiting for a close-ok that never comes.
		d.drop(ctx, ctx.Err() != nil)
	}
	if !failed {
		return nil
	}
	return errs
}

func (d *Delivery) publishErr(e *envelope.Event, key string, err error) error {
	ex := d.cfg.Exchange
	if ex == "" {
		ex = "(default)"
	}
	return fmt.Errorf("herald/amqp: publish event %s to exchange %s with routing key %q: %w", e.ID, ex, key, err)
}

// Close closes the connection, waiting at most 2 s for the broker's
// close-ok (a broker that stopped reading never sends it). It waits for
// a batch in progress, which ends with its context. Safe to call twice; a
// closed delivery fails every event.
func (d *Delivery) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = true
	var err error
	if d.conn != nil && !d.conn.IsClosed() {
		cerr := d.conn.CloseDeadline(time.Now().Add(closeTimeout))
		var ne net.Error
		switch {
		case cerr == nil, errors.Is(cerr, amqp091.ErrClosed):
		case errors.As(cerr, &ne) && ne.Timeout():
			err = fmt.Errorf("herald/amqp: close: no close-ok from the broker within %s; the connection was dropped: %w", closeTimeout, cerr)
		default:
			err = fmt.Errorf("herald/amqp: close: %w", cerr)
		}
	}
	if d.raw != nil {
		_ = d.raw.Close()
	}
	d.raw, d.conn, d.ch, d.closed = nil, nil, nil, nil
	return err
}

// shortKey is key as errors quote it: cut when it is too long to carry.
func shortKey(key string) string {
	if len(key) <= maxShortstr {
		return key
	}
	return key[:40] + "…"
}
