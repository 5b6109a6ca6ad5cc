package amqpfanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/internal/outbox"
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

// closeTimeout bounds closing a connection: the wait for the broker's
// close-ok, which a broker that stopped reading never sends.
const closeTimeout = 2 * time.Second

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
	raw    net.Conn   // its socket, whose writes each publish bounds
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
		return nil, outbox.Configurationf("amqpfanout.Config.URL", "empty; give the broker's amqp:// URL")
	}
	if _, err := amqp.ParseURI(url); err != nil {
		return nil, outbox.Configurationf("amqpfanout.Config.URL", "%v", err)
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
		return nil, outbox.Configurationf("amqpfanout.Config.MaxBackoff", "%s is below MinBackoff %s", cfg.MaxBackoff, cfg.MinBackoff)
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

// dial opens a connection and a channel, and declares the exchange, all
// within DialTimeout and ctx; it returns the connection's socket too.
func (w *Wakeup) dial(ctx context.Context) (net.Conn, *amqp.Connection, *amqp.Channel, error) {
	deadline := time.Now().Add(w.cfg.DialTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	var (
		mu  sync.Mutex
		raw net.Conn
	)
	// ctx's end (a publish's timeout, Close) cuts the dial short.
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if raw != nil {
			_ = raw.SetDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	conn, err := amqp.DialConfig(w.url, amqp.Config{
		Heartbeat: w.cfg.Heartbeat,
		Dial: func(network, addr string) (net.Conn, error) {
			var nd net.Dialer
			c, err := nd.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake, the channel and the declaration are round
			// trips: bounded, the bound lifted once they are done.
			_ = c.SetDeadline(deadline)
			mu.Lock()
			raw = c
			mu.Unlock()
			if ctx.Err() != nil {
				_ = c.SetDeadline(time.Unix(1, 0))
			}
			return c, nil
		},
		Properties: amqp.Table{"connection_name": "herald/wakeup/amqpfanout"},
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dial: %w", err)
	}
	_ = raw.SetDeadline(deadline) // amqp091 cleared it after the handshake
	ch, err := conn.Channel()
	if err != nil {
		closeNow(raw, conn)
		return nil, nil, nil, fmt.Errorf("channel: %w", err)
	}
	if err := ch.ExchangeDeclare(w.exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		closeNow(raw, conn)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			return nil, nil, nil, outbox.Configurationf("amqpfanout.Config.Exchange", "%q exists with other settings than a durable fanout exchange: %v", w.exchange, err)
		}
		return nil, nil, nil, fmt.Errorf("declare exchange %s: %w", w.exchange, err)
	}
	if !stop() {
		closeNow(raw, conn)
		return nil, nil, nil, fmt.Errorf("dial: %w", context.Cause(ctx))
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		closeNow(raw, conn)
		return nil, nil, nil, fmt.Errorf("dial: %w", err)
	}
	return raw, conn, ch, nil
}

// closeNow closes the socket, then what amqp091 holds: no close-ok is
// waited for (the link may be dead, or the broker not reading).
func closeNow(raw net.Conn, conn *amqp.Connection) {
	_ = raw.Close()
	_ = conn.CloseDeadline(time.Now())
}

// closeGently closes conn, waiting at most closeTimeout for the broker's
// close-ok.
func closeGently(conn *amqp.Connection) {
	_ = conn.CloseDeadline(time.Now().Add(closeTimeout))
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
			closeNow(w.raw, w.conn)
		}
		raw, conn, ch, err := w.dial(ctx)
		if err != nil {
			w.raw, w.conn, w.ch = nil, nil, nil
			return err
		}
		w.raw, w.conn, w.ch = raw, conn, ch
	}
	// The writes end with ctx (SignalTimeout, or Close): a broker that
	// stops reading (its memory or disk alarm) fills the socket buffers,
	// and amqp091's writes would block for ever.
	raw := w.raw
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetWriteDeadline(dl)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = raw.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	for _, t := range topics {
		err := w.ch.PublishWithContext(ctx, w.exchange, "", false, false, amqp.Publishing{
			ContentType: "text/plain", DeliveryMode: amqp.Transient, Body: []byte(t),
		})
		if err != nil {
			stop()
			closeNow(w.raw, w.conn)
			w.raw, w.conn, w.ch = nil, nil, nil
			return err
		}
	}
	if !stop() {
		<-fired // ctx ended as the last publish went out; every write succeeded
	}
	_ = raw.SetWriteDeadline(time.Time{})
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

// Close stops listening and publishing and closes the connections. A
// publish in flight is cancelled, and each connection waits at most 2 s
// for the broker's close-ok, so Close returns while the broker has
// stopped reading. Later Signal and Listen calls return wakeup.ErrClosed.
func (w *Wakeup) Close() error {
	w.hub.Close()
	w.sender.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.conn != nil {
		closeGently(w.conn)
		_ = w.raw.Close()
		w.raw, w.conn, w.ch = nil, nil, nil
	}
	return nil
}

func (w *Wakeup) session(ctx context.Context, ready func(), deliver func([]string)) error {
	raw, conn, ch, err := w.dial(ctx)
	if err != nil {
		return err
	}
	defer func() {
		closeGently(conn)
		_ = raw.Close()
	}()
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
