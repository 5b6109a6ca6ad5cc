package natssignal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/wakehub"
	"github.com/heraldgo/herald/wakeup"
)

// DefaultSubject is the core NATS subject when Config.Subject is empty.
const DefaultSubject = "herald.wakeup"

// Defaults of Config.
const (
	DefaultMinBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff    = 30 * time.Second
	DefaultPollWhileDown = time.Second
	DefaultSignalTimeout = 5 * time.Second
	DefaultHealthCheck   = 30 * time.Second
	DefaultDialTimeout   = 10 * time.Second
)

// Config configures a Wakeup. The zero value of every field but URL means
// its default.
type Config struct {
	// URL is the NATS server URL ("nats://127.0.0.1:4222", a
	// comma-separated list for a cluster). The Wakeup builds its own
	// connections: one to publish (reconnecting forever, no reconnect
	// buffer: a signal sent while disconnected is dropped, and relays
	// poll) and one per listening session.
	URL string
	// ClientOptions are added to the options of every connection the
	// Wakeup builds, after herald's own: credentials, TLS, a name.
	ClientOptions []natsgo.Option

	// Subject is the core NATS subject, the same for writers and relays
	// of one outbox; "" = DefaultSubject.
	Subject string

	// Logger receives a WARN for each lost subscription or failed
	// reconnect, an ERROR from the fifth failure in a row on, and an INFO
	// when listening again; nil = slog.Default().
	Logger *slog.Logger

	// MinBackoff and MaxBackoff bound the wait between reconnects; it
	// doubles after each failure in a row.
	MinBackoff, MaxBackoff time.Duration
	// PollWhileDown is how often listening relays are told to poll while
	// the subscription is down; 0 = DefaultPollWhileDown.
	PollWhileDown time.Duration
	// SignalTimeout bounds one publish and its flush; 0 =
	// DefaultSignalTimeout.
	SignalTimeout time.Duration
	// HealthCheck is the listening connection's ping interval: a link
	// that stays open but silent is given up after two pings without a
	// pong; 0 = DefaultHealthCheck.
	HealthCheck time.Duration
	// DialTimeout bounds one connection attempt; 0 = DefaultDialTimeout.
	DialTimeout time.Duration
}

// Wakeup is a core NATS wakeup: writers publish each topic to one subject
// after commit, relays subscribe to it on one connection per Wakeup
// value, shared by all of them. Create one per process and give it to
// both the capture plugin and the relays. Safe for concurrent use.
type Wakeup struct {
	cfg    Config
	pub    *natsgo.Conn
	hub    *wakehub.Hub
	sender *wakehub.Sender
}

var _ wakeup.Wakeup = (*Wakeup)(nil)

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("natssignal.Config."+field, format, args...)
}

// New checks cfg and returns a Wakeup; its publishing connection keeps
// trying in the background when the server cannot be reached yet.
func New(cfg Config) (*Wakeup, error) {
	if cfg.URL == "" {
		return nil, cfgErr("URL", "not set; give a NATS URL")
	}
	if cfg.Subject == "" {
		cfg.Subject = DefaultSubject
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
		return nil, cfgErr("MaxBackoff", "%s is below MinBackoff %s", cfg.MaxBackoff, cfg.MinBackoff)
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
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	w := &Wakeup{cfg: cfg}
	pub, err := natsgo.Connect(cfg.URL, w.options(
		natsgo.RetryOnFailedConnect(true),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(cfg.MinBackoff),
		natsgo.ReconnectBufSize(-1),
	)...)
	if err != nil {
		return nil, cfgErr("URL", "%v", err)
	}
	w.pub = pub
	opt := wakehub.Options{
		Name: "herald/wakeup/natssignal", Logger: cfg.Logger,
		MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, PollWhileDown: cfg.PollWhileDown,
	}
	w.hub = wakehub.New(w.session, opt)
	w.sender = wakehub.NewSender(w.publish, cfg.SignalTimeout, opt)
	return w, nil
}

func (w *Wakeup) options(extra ...natsgo.Option) []natsgo.Option {
	opts := append([]natsgo.Option{
		natsgo.Name("herald-wakeup"),
		natsgo.Timeout(w.cfg.DialTimeout),
		natsgo.PingInterval(w.cfg.HealthCheck),
		natsgo.MaxPingsOutstanding(2),
	}, extra...)
	return append(opts, w.cfg.ClientOptions...)
}

// Subject returns the core NATS subject.
func (w *Wakeup) Subject() string { return w.cfg.Subject }

// Signal publishes each topic (its name is the message) without waiting:
// topics signalled while a publish is in flight go out together in the
// next one, once each. Writers call it after their commit.
func (w *Wakeup) Signal(_ context.Context, topics []string) error {
	return w.sender.Signal(topics)
}

func (w *Wakeup) publish(ctx context.Context, topics []string) error {
	for _, t := range topics {
		if err := w.pub.Publish(w.cfg.Subject, []byte(t)); err != nil {
			return err
		}
	}
	return w.pub.FlushWithContext(ctx)
}

// Listen calls fn with the topics of each message on the subject until
// ctx ends; see wakeup.Wakeup. All Listen calls of w share one
// subscription, opened by the first and closed when the last returns;
// while it is down it is reopened with back-off and fn(nil) is called
// every PollWhileDown, so relays poll meanwhile.
func (w *Wakeup) Listen(ctx context.Context, fn func(topics []string)) error {
	return w.hub.Listen(ctx, fn)
}

// Close stops listening and publishing and closes the Wakeup's
// connections. Later Signal and Listen calls return wakeup.ErrClosed.
func (w *Wakeup) Close() error {
	w.hub.Close()
	w.sender.Close()
	w.pub.Close()
	return nil
}

// session is one listening connection: it never reconnects by itself
// (the hub does, with back-off, telling relays to poll meanwhile).
func (w *Wakeup) session(ctx context.Context, ready func(), deliver func([]string)) error {
	lost := make(chan error, 1)
	report := func(err error) {
		select {
		case lost <- err:
		default:
		}
	}
	nc, err := natsgo.Connect(w.cfg.URL, w.options(
		natsgo.NoReconnect(),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err == nil {
				err = errors.New("disconnected")
			}
			report(err)
		}),
		natsgo.ClosedHandler(func(*natsgo.Conn) { report(errors.New("connection closed")) }),
	)...)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe(w.cfg.Subject, func(m *natsgo.Msg) { deliver([]string{string(m.Data)}) }); err != nil {
		return fmt.Errorf("subscribe %q: %w", w.cfg.Subject, err)
	}
	// Once the server answered the flush, it has the subscription: what
	// is published from now on reaches it.
	fctx, cancel := context.WithTimeout(ctx, w.cfg.DialTimeout)
	err = nc.FlushWithContext(fctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("subscribe %q: flush: %w", w.cfg.Subject, err)
	}
	ready()
	select {
	case <-ctx.Done():
		return nil
	case err := <-lost:
		return err
	}
}
