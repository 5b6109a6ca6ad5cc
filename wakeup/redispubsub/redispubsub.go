package redispubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/wakehub"
	"github.com/heraldgo/herald/wakeup"
)

// DefaultChannel is the pub/sub channel when Config.Channel is empty.
const DefaultChannel = "herald:wakeup"

// Defaults of Config.
const (
	DefaultMinBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff    = 30 * time.Second
	DefaultPollWhileDown = time.Second
	DefaultSignalTimeout = 5 * time.Second
	DefaultHealthCheck   = 30 * time.Second
)

// Config configures a Wakeup. The zero value of every field means its
// default.
type Config struct {
	// URL is the Redis URL (redis://[user:password@]host:port/db) of a
	// client the Wakeup builds and owns: Close closes it. Not together
	// with Client.
	URL string
	// Client is a ready client; Close leaves it open. Not together with
	// URL.
	Client redis.UniversalClient

	// Channel is the pub/sub channel, the same for writers and relays of
	// one outbox; "" = DefaultChannel.
	Channel string

	// Logger receives a WARN for each lost subscription, failed reconnect
	// or failed publish, an ERROR from the fifth failure in a row on, and
	// an INFO when listening again; nil = slog.Default().
	Logger *slog.Logger

	// MinBackoff and MaxBackoff bound the wait between reconnects; it
	// doubles after each failure in a row.
	MinBackoff, MaxBackoff time.Duration

	// PollWhileDown is how often listening relays are told to poll while
	// the subscription is down; 0 = DefaultPollWhileDown.
	PollWhileDown time.Duration

	// SignalTimeout bounds one publish; 0 = DefaultSignalTimeout.
	SignalTimeout time.Duration

	// HealthCheck is how long the subscription may stay silent before it
	// is PINGed (a connection that died without a word is found this way);
	// 0 = DefaultHealthCheck.
	HealthCheck time.Duration
}

// Wakeup is a Redis pub/sub wakeup: writers PUBLISH each topic after
// commit, relays SUBSCRIBE on one connection per Wakeup value, shared by
// all of them. Create one per process and give it to both the capture
// plugin and the relays. Safe for concurrent use.
type Wakeup struct {
	client  redis.UniversalClient
	owned   bool
	channel string
	cfg     Config
	hub     *wakehub.Hub
	sender  *wakehub.Sender
}

var _ wakeup.Wakeup = (*Wakeup)(nil)

// New checks cfg and returns a Wakeup on cfg.Client, or on a client of
// its own built from cfg.URL (which connects on first use).
func New(cfg Config) (*Wakeup, error) {
	switch {
	case cfg.URL == "" && cfg.Client == nil:
		return nil, outbox.Configurationf("redispubsub.Config.URL", "neither URL nor Client is set; give a Redis URL or a ready client")
	case cfg.URL != "" && cfg.Client != nil:
		return nil, outbox.Configurationf("redispubsub.Config.Client", "set together with URL; give one of them")
	case cfg.Client != nil:
		return newWakeup(cfg.Client, false, cfg)
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, outbox.Configurationf("redispubsub.Config.URL", "%v", err)
	}
	return newWakeup(redis.NewClient(opt), true, cfg)
}

// NewURL is New with cfg.URL set to url.
//
// Deprecated: use New(Config{URL: url, ...}), the construction every
// delivery and wakeup package shares.
func NewURL(url string, cfg Config) (*Wakeup, error) {
	cfg.URL = url
	return New(cfg)
}

func newWakeup(client redis.UniversalClient, owned bool, cfg Config) (*Wakeup, error) {
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
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
		if owned {
			_ = client.Close()
		}
		return nil, outbox.Configurationf("redispubsub.Config.MaxBackoff", "%s is below MinBackoff %s", cfg.MaxBackoff, cfg.MinBackoff)
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
	w := &Wakeup{client: client, owned: owned, channel: cfg.Channel, cfg: cfg}
	opt := wakehub.Options{
		Name: "herald/wakeup/redispubsub", Logger: cfg.Logger,
		MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, PollWhileDown: cfg.PollWhileDown,
	}
	w.hub = wakehub.New(w.session, opt)
	w.sender = wakehub.NewSender(w.publish, cfg.SignalTimeout, opt)
	return w, nil
}

// Channel returns the pub/sub channel.
func (w *Wakeup) Channel() string { return w.channel }

// Signal PUBLISHes each topic (its name is the message) without waiting:
// topics signalled while a publish is in flight go out together in the
// next one, once each. Writers call it after their commit.
func (w *Wakeup) Signal(_ context.Context, topics []string) error {
	return w.sender.Signal(topics)
}

func (w *Wakeup) publish(ctx context.Context, topics []string) error {
	_, err := w.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range topics {
			p.Publish(ctx, w.channel, t)
		}
		return nil
	})
	return err
}

// Listen calls fn with the topics of each message on the channel until ctx
// ends; see wakeup.Wakeup. All Listen calls of w share one subscription,
// opened by the first and closed when the last returns; while it is down
// it is reopened with back-off and fn(nil) is called every PollWhileDown,
// so relays poll meanwhile.
func (w *Wakeup) Listen(ctx context.Context, fn func(topics []string)) error {
	return w.hub.Listen(ctx, fn)
}

// Close stops listening and publishing and closes the client if the
// Wakeup built it from Config.URL. Later Signal and Listen calls return wakeup.ErrClosed.
func (w *Wakeup) Close() error {
	w.hub.Close()
	w.sender.Close()
	if w.owned {
		return w.client.Close()
	}
	return nil
}

func (w *Wakeup) session(ctx context.Context, ready func(), deliver func([]string)) error {
	ps := w.client.Subscribe(ctx, w.channel)
	defer ps.Close()
	// A blocked receive does not watch ctx: closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, w.cfg.HealthCheck)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				// Silent for a while: make sure the connection lives.
				if err := ps.Ping(ctx); err != nil {
					return fmt.Errorf("ping: %w", err)
				}
				pinged = true
				continue
			}
			return err
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == w.channel {
				ready() // (re)subscribed: what was published before reached no one
			}
		case *redis.Message:
			if m.Channel == w.channel {
				deliver([]string{m.Payload})
			}
		}
	}
}
