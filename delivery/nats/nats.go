package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// Defaults of Config.
const (
	// DefaultDialTimeout bounds one connection attempt (TCP, TLS and the
	// NATS handshake); the same default as the other transports.
	DefaultDialTimeout = 10 * time.Second
	// DefaultReconnectWait is the wait between reconnects of a connection
	// the delivery builds.
	DefaultReconnectWait = 250 * time.Millisecond
	// DefaultAckTimeout drops an acknowledgement still awaited this long
	// after its publish, so a batch abandoned at its context's end holds
	// no memory past it.
	DefaultAckTimeout = time.Minute
)

// Config configures a Delivery. Exactly one of URL and Conn is set.
type Config struct {
	// URL is the NATS server URL ("nats://127.0.0.1:4222", a
	// comma-separated list for a cluster) of a connection the delivery
	// builds and owns: it reconnects forever, keeps no reconnect buffer (a
	// batch published while disconnected fails at once, and the relay
	// retries it) and is closed by Close.
	URL string
	// ClientOptions are added to the options of the connection built from
	// URL, after herald's own (so they win): credentials, TLS, a name.
	ClientOptions []natsgo.Option
	// Conn is a ready connection; the delivery never closes it. A
	// connection with a reconnect buffer (nats.go's default) holds
	// publishes while disconnected: their acknowledgements are still
	// awaited within the relay's DeliveryTimeout.
	Conn *natsgo.Conn

	// Subject is the subject of every event; "" = SubjectFunc's answer.
	Subject string
	// SubjectFunc maps an event to its subject; nil =
	// delivery.ByAggregate, the topic less its operation: a captured
	// row's events ("shop.order.inserted", "shop.order.updated") share the
	// subject "shop.order" and are stored in sequence order by the stream
	// that holds it. Give the same answer for every event of one ordering
	// key. Not together with Subject. An event it maps to no valid subject
	// ("", a space, an empty token, a wildcard) fails at once,
	// dead-lettered (ErrDelivery, ErrPermanent).
	SubjectFunc func(e *envelope.Event) string

	// Stream, when set, is sent as Nats-Expected-Stream: a publish whose
	// subject another stream (or none) holds is refused instead of stored
	// elsewhere.
	Stream string

	// DialTimeout bounds one connection attempt of a connection built
	// from URL; 0 = DefaultDialTimeout.
	DialTimeout time.Duration
}

// Delivery publishes events to NATS JetStream. It is a
// delivery.BatchDelivery: a relay's batch is published asynchronously,
// and each event's acknowledgement is awaited within the batch's context.
type Delivery struct {
	nc          *natsgo.Conn
	own         bool
	js          jetstream.JetStream
	subject     string
	subjectFunc func(*envelope.Event) string
	stream      string
	closeOnce   sync.Once
	closeErr    error
}

var _ delivery.BatchDelivery = (*Delivery)(nil)

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("nats.Config."+field, format, args...)
}

// New checks cfg and returns a Delivery; with URL it builds a connection,
// which keeps trying to connect in the background when the server cannot
// be reached yet.
func New(cfg Config) (*Delivery, error) {
	switch {
	case cfg.URL == "" && cfg.Conn == nil:
		return nil, cfgErr("URL", "neither URL nor Conn is set; give a NATS URL or a ready connection")
	case cfg.URL != "" && cfg.Conn != nil:
		return nil, cfgErr("Conn", "set together with URL; give one of them")
	case cfg.Conn != nil && len(cfg.ClientOptions) > 0:
		return nil, cfgErr("ClientOptions", "set together with Conn; they configure a connection built from URL")
	case cfg.Subject != "" && cfg.SubjectFunc != nil:
		return nil, cfgErr("SubjectFunc", "set together with Subject; give one of them")
	case cfg.Subject != "" && validSubject(cfg.Subject) != nil:
		return nil, cfgErr("Subject", "%q: %v", cfg.Subject, validSubject(cfg.Subject))
	case cfg.DialTimeout < 0:
		return nil, cfgErr("DialTimeout", "negative (%s)", cfg.DialTimeout)
	}
	d := &Delivery{nc: cfg.Conn, subject: cfg.Subject, subjectFunc: cfg.SubjectFunc, stream: cfg.Stream}
	if d.subjectFunc == nil {
		d.subjectFunc = delivery.ByAggregate
	}
	if d.nc == nil {
		dial := cfg.DialTimeout
		if dial == 0 {
			dial = DefaultDialTimeout
		}
		opts := append([]natsgo.Option{
			natsgo.Name("herald"),
			natsgo.Timeout(dial),
			natsgo.RetryOnFailedConnect(true),
			natsgo.MaxReconnects(-1),
			natsgo.ReconnectWait(DefaultReconnectWait),
			// No reconnect buffer: while disconnected a publish fails at
			// once, and the relay retries the batch later, instead of
			// waiting out its DeliveryTimeout for a buffer to flush.
			natsgo.ReconnectBufSize(-1),
		}, cfg.ClientOptions...)
		nc, err := natsgo.Connect(cfg.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("herald/nats: connect %s: %w", cfg.URL, err)
		}
		d.nc, d.own = nc, true
	}
	js, err := jetstream.New(d.nc, jetstream.WithPublishAsyncTimeout(DefaultAckTimeout))
	if err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("herald/nats: %w", err)
	}
	d.js = js
	return d, nil
}

// Conn returns the connection the delivery publishes on.
func (d *Delivery) Conn() *natsgo.Conn { return d.nc }

// validSubject checks a subject to publish to: tokens separated by '.',
// none empty, none a wildcard, no white space.
func validSubject(s string) error {
	if s == "" {
		return errors.New("empty subject")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return errors.New("subject holds white space")
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch tok {
		case "":
			return errors.New("subject has an empty token")
		case "*", ">":
			return errors.New("subject has a wildcard token")
		}
	}
	return nil
}

// Msg returns the message of e: its subject (SubjectFunc's answer, not
// checked), the payload as data, delivery.Headers(e) as headers plus
// Nats-Msg-Id (the event id, which JetStream de-duplicates on within the
// stream's duplicate window) and, with Config.Stream, Nats-Expected-Stream.
func (d *Delivery) Msg(e *envelope.Event) *natsgo.Msg {
	subject := d.subject
	if subject == "" {
		subject = d.subjectFunc(e)
	}
	hs := delivery.Headers(e)
	m := &natsgo.Msg{Subject: subject, Data: delivery.Body(e), Header: make(natsgo.Header, len(hs)+2)}
	for k, v := range hs {
		m.Header[k] = []string{v}
	}
	m.Header[jetstream.MsgIDHeader] = []string{e.ID.String()}
	if d.stream != "" {
		m.Header[jetstream.ExpectedStreamHeader] = []string{d.stream}
	}
	return m
}

// Deliver publishes one event and waits for its acknowledgement.
func (d *Delivery) Deliver(ctx context.Context, e *envelope.Event) error {
	if errs := d.DeliverBatch(ctx, []*envelope.Event{e}); errs != nil {
		return errs[0]
	}
	return nil
}

// DeliverBatch publishes every event of es without waiting (PublishMsgAsync),
// then waits for each acknowledgement until ctx ends. It returns one
// error per event, or nil when JetStream acknowledged all of them (a
// duplicate acknowledged as such counts as stored).
func (d *Delivery) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	errs := make([]error, len(es))
	futures := make([]jetstream.PubAckFuture, len(es))
	failed := false
	for i, e := range es {
		m := d.Msg(e)
		if err := validSubject(m.Subject); err != nil {
			errs[i] = delivery.Permanent(fmt.Errorf("herald/nats: event %s (topic %q): subject %q: %w: %w", e.ID, e.Topic, m.Subject, err, delivery.ErrDelivery))
			failed = true
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("herald/nats: event %s to %q: %w", e.ID, m.Subject, context.Cause(ctx))
			failed = true
			continue
		}
		f, err := d.js.PublishMsgAsync(m)
		if err != nil {
			errs[i] = fmt.Errorf("herald/nats: publish event %s to %q: %w", e.ID, m.Subject, err)
			failed = true
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			continue
		case err := <-f.Err():
			errs[i] = fmt.Errorf("herald/nats: event %s to %q: %w", es[i].ID, f.Msg().Subject, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("herald/nats: event %s to %q: no acknowledgement: %w", es[i].ID, f.Msg().Subject, context.Cause(ctx))
		}
		failed = true
	}
	if !failed {
		return nil
	}
	return errs
}

// Close closes the connection when the delivery built it; a connection
// given in Config is left open. Safe to call twice.
func (d *Delivery) Close() error {
	d.closeOnce.Do(func() {
		if d.own {
			d.nc.Close()
		}
	})
	return d.closeErr
}
