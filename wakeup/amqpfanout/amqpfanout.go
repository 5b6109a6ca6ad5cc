package amqpfanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/wakehub"
	"github.com/heraldgo/herald/wakeup"
)

// DefaultExchange is the fanout exchange when Config.Exchange is empty.
const DefaultExchange = "herald.wakeup"

// Defaults of Config.
const (
	DefaultMinBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff    = 30 * time.Second
	DefaultPollWhileDown = time.Second
	DefaultSignalTimeout = 5 * time.Second
	DefaultHeartbeat     = 10 * time.Second
	DefaultDialTimeout   = 10 * time.Second
)

// Config configures a Wakeup. The zero value of every field means its
// default.
type Config struct {
	// URL is the broker's AMQP URL (amqp://user:pass@host:port/vhost,
	// amqps://…); the Wakeup connects when it first listens or signals.
	// Required.
	URL string

	// Exchange is the fanout exchange, the same for writers and relays of
	// one outbox; "" = DefaultExchange. It is declared (durable) by both
	// sides if it does not exist.
	Exchange string

	// Logger receives a WARN for each lost connection, failed reconnect or
	// failed publish, an ERROR from the fifth failure in a row on, and an
	// INFO when listening again; nil = slog.Default().
	Logger *slog.Logger

	// MinBackoff and MaxBackoff bound the wait between reconnects; it
	// doubles after each failure in a row.
	MinBackoff, MaxBackoff time.Duration

	// PollWhileDown is how often listening relays are told to poll while
	// the connection is down; 0 = DefaultPollWhileDown.
	PollWhileDown time.Duration

	// SignalTimeout bounds one publish; 0 = DefaultSignalTimeout.
	SignalTimeout time.Duration

	// Heartbeat is the AMQP heartbeat interval, which finds a connection
	// that died without a word; 0 = DefaultHeartbeat.
	Heartbeat time.Duration

	// DialTimeout bounds opening a connection; 0 = DefaultDialTimeout.
	DialTimeout time.Duration
}

// Wakeup is a RabbitMQ wakeup: writers publish each topic to a fanout
// exchange after commit; relays consume from one exclusive, auto-delete,
// server-named queue bound to it per Wakeup value, shared by all the
// relays of the process. Create one per process and give it to both the
// capture plugin and the relays. Safe for concurrent use.
type Wakeup struct {
	url      string
	exchange string
	cfg      Config
	hub      *wakehub.Hub
	sender   *wakehub.Sender

	mu     sync.Mutex // guards the publishing connection
	conn   *amqp.Connection
	ch     *amqp.Channel
	closed bool
}

var _ wakeup.Wakeup = (*Wakeup)(nil)

// New checks cfg and returns a Wakeup that connects to cfg.URL when it
// first listens or signals.
func New(cfg Config) (*Wakeup, error) {
	url := cfg.URL
	if url == "" {
		return nil, envelope.Configurationf("amqpfanout.Config.URL", "empty; give the broker's amqp:// URL")
	}
	if _, err := amqp.ParseURI(url); err != nil {
		return nil, envelope.Configurationf("amqpfanout.Config.URL", "%v", err)
	}
	if cfg.Exchange == "" {
		cfg.Exchange = DefaultExchange
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
		return nil, envelope.Configurationf("amqpfanout.Config.MaxBackoff", "%s is below MinBackoff %s", cfg.MaxBackoff, cfg.MinBackoff)
	}
	if cfg.PollWhileDown <= 0 {
		cfg.PollWhileDown = DefaultPollWhileDown
	}
	if cfg.SignalTimeout <= 0 {
		cfg.SignalTimeout = DefaultSignalTimeout
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	w := &Wakeup{url: url, exchange: cfg.Exchange, cfg: cfg}
	opt := wakehub.Options{
		Name: "herald/wakeup/amqpfanout", Logger: cfg.Logger,
		MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, PollWhileDown: cfg.PollWhileDown,
	}
	w.hub = wakehub.New(w.session, opt)
	w.sender = wakehub.NewSender(w.publish, cfg.SignalTimeout, opt)
	return w, nil
}

// Exchange returns the fanout exchange's name.
func (w *Wakeup) Exchange() string { return w.exchange }

func (w *Wakeup) dial() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(w.url, amqp.Config{
		Heartbeat:  w.cfg.Heartbeat,
		Dial:       amqp.DefaultDial(w.cfg.DialTimeout),
		Properties: amqp.Table{"connection_name": "herald/wakeup/amqpfanout"},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("channel: %w", err)
	}
	if err := ch.ExchangeDeclare(w.exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		_ = conn.Close()
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			return nil, nil, envelope.Configurationf("amqpfanout.Config.Exchange", "%q exists with other settings than a durable fanout exchange: %v", w.exchange, err)
		}
		return nil, nil, fmt.Errorf("declare exchange %s: %w", w.exchange, err)
	}
	return conn, ch, nil
}

// Signal publishes each topic (its name is the message body) to the
// exchange without waiting: topics signalled while a publish is in flight
// go out together in the next one, once each. Writers call it after their
// commit.
func (w *Wakeup) Signal(_ context.Context, topics []string) error {
	return w.sender.Signal(topics)
}

func (w *Wakeup) publish(ctx context.Context, topics []string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return wakeup.ErrClosed
	}
	if w.ch == nil || w.ch.IsClosed() {
		if w.conn != nil {
			_ = w.conn.Close()
		}
		conn, ch, err := w.dial()
		if err != nil {
			w.conn, w.ch = nil, nil
			return err
		}
		w.conn, w.ch = conn, ch
	}
	for _, t := range topics {
		err := w.ch.PublishWithContext(ctx, w.exchange, "", false, false, amqp.Publishing{
			ContentType: "text/plain", DeliveryMode: amqp.Transient, Body: []byte(t),
		})
		if err != nil {
			_ = w.conn.Close()
			w.conn, w.ch = nil, nil
			return err
		}
	}
	return nil
}

// Listen calls fn with the topics of each message on the exchange until
// ctx ends; see wakeup.Wakeup. All Listen calls of w share one connection
// and one exclusive auto-delete queue, opened by the first and closed when
// the last returns; while it is down it is reopened with back-off and
// fn(nil) is called every PollWhileDown, so relays poll meanwhile.
func (w *Wakeup) Listen(ctx context.Context, fn func(topics []string)) error {
	return w.hub.Listen(ctx, fn)
}

// Close stops listening and publishing and closes the connections. Later
// Signal and Listen calls return wakeup.ErrClosed.
func (w *Wakeup) Close() error {
	w.hub.Close()
	w.sender.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn, w.ch = nil, nil
	}
	return nil
}

func (w *Wakeup) session(ctx context.Context, ready func(), deliver func([]string)) error {
	conn, ch, err := w.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return fmt.Errorf("declare queue: %w", err)
	}
	if err := ch.QueueBind(q.Name, "", w.exchange, false, nil); err != nil {
		return fmt.Errorf("bind %s to %s: %w", q.Name, w.exchange, err)
	}
	msgs, err := ch.ConsumeWithContext(ctx, q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", q.Name, err)
	}
	ready()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			if e == nil {
				return errors.New("connection closed")
			}
			return e
		case m, ok := <-msgs:
			if !ok {
				return errors.New("consumer cancelled")
			}
			deliver([]string{string(m.Body)})
		}
	}
}
