package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/amqp"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/delivery/redisstream"
	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
	"github.com/heraldgo/herald/otelherald"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
	"github.com/heraldgo/herald/wakeup/amqpfanout"
	"github.com/heraldgo/herald/wakeup/kafkasignal"
	"github.com/heraldgo/herald/wakeup/pgnotify"
	"github.com/heraldgo/herald/wakeup/redispubsub"
)

func init() {
	commands["relay"] = command{summary: "run a relay: deliver the outbox's events until SIGTERM", run: runRelay}
}

// relayFlags are herald relay's flags; relayConfig reads them.
type relayFlags struct {
	db dbFlags

	name                        string
	topics, exclude             listFlag
	tenants                     tenantFlag
	batchSize, concurrency      int
	maxAttempts                 int
	retryBase, retryMax         time.Duration
	lease, deliveryTimeout      time.Duration
	minPoll, maxPoll            time.Duration
	retainPublished, retainDead time.Duration
	deleteOnPublish             bool

	kafkaBrokers listFlag
	kafkaTopic   string
	redisURL     string
	redisStream  string
	amqpURL      string
	amqpExchange string
	webhookURL   string
	webhookSec   string
	webhookAllow listFlag
	routes       listFlag

	wakeup        string
	wakeupURL     string
	wakeupChannel string

	adminAddr     string
	adminUser     string
	adminPassword string
	adminReadOnly bool
	stopTimeout   time.Duration
	logLevel      string
}

func (f *relayFlags) register(fs *flag.FlagSet) {
	f.db.register(fs)
	fs.StringVar(&f.name, "name", "", "the relay's name in leased_by and logs (default host:pid:random); distinct per relay of a table")
	fs.Var(&f.topics, "topics", "only these topics: comma-separated names or prefix patterns ending in * (default every topic)")
	fs.Var(&f.exclude, "exclude-topics", "leave these topics to other relays (same patterns)")
	fs.Var(&f.tenants, "tenant", "only these tenants' events: comma-separated (the outbox's tenant column; an empty name, --tenant '' or --tenant ,acme, is the events without a tenant; default every tenant)")
	fs.IntVar(&f.batchSize, "batch-size", 0, fmt.Sprintf("events one poll leases, 1..%d (default %d)", relay.MaxBatchSize, relay.DefaultBatchSize))
	fs.IntVar(&f.concurrency, "concurrency", 0, fmt.Sprintf("events of a batch delivered at once (default %d)", relay.DefaultConcurrency))
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, fmt.Sprintf("failed deliveries that dead-letter an event (default %d)", relay.DefaultMaxAttempts))
	fs.DurationVar(&f.retryBase, "retry-base", 0, fmt.Sprintf("wait after the first failure, doubling (default %s)", relay.DefaultRetryBase))
	fs.DurationVar(&f.retryMax, "retry-max", 0, fmt.Sprintf("longest wait between attempts (default %s)", relay.DefaultRetryMax))
	fs.DurationVar(&f.lease, "lease", 0, fmt.Sprintf("how long a leased batch is the relay's (default %s)", relay.DefaultLease))
	fs.DurationVar(&f.deliveryTimeout, "delivery-timeout", 0, fmt.Sprintf("bound of one delivery (default %s)", relay.DefaultDeliveryTimeout))
	fs.DurationVar(&f.minPoll, "min-poll-interval", 0, fmt.Sprintf("wait after the first poll that did not fill a batch (default %s)", relay.DefaultMinPollInterval))
	fs.DurationVar(&f.maxPoll, "max-poll-interval", 0, fmt.Sprintf("longest wait between polls (default %s, %s with a wakeup)", relay.DefaultMaxPollInterval, relay.DefaultMaxPollIntervalWithWakeup))
	fs.DurationVar(&f.retainPublished, "retain-published", 0, "delete published events older than this (default 0: keep them)")
	fs.DurationVar(&f.retainDead, "retain-dead-lettered", 0, "delete dead letters older than this (default 0: keep them)")
	fs.BoolVar(&f.deleteOnPublish, "delete-on-publish", false, "delete each event when it is delivered instead of marking it published")

	fs.Var(&f.kafkaBrokers, "kafka-brokers", "deliver to Kafka: comma-separated seed brokers (delivery name \"kafka\")")
	fs.StringVar(&f.kafkaTopic, "kafka-topic", "", "the Kafka topic of every event (default the event's aggregate: its topic less a last .inserted, .updated or .deleted)")
	fs.StringVar(&f.redisURL, "redis-url", "", "deliver to Redis Streams: redis://host:port/db (delivery name \"redis\")")
	fs.StringVar(&f.redisStream, "redis-stream", "", "the stream of every event (default the event's aggregate)")
	fs.StringVar(&f.amqpURL, "amqp-url", "", "deliver to RabbitMQ: amqp://user:pass@host:port/vhost (delivery name \"amqp\")")
	fs.StringVar(&f.amqpExchange, "amqp-exchange", "", "the exchange to publish to, the event's topic as routing key (\"\" = the default exchange)")
	fs.StringVar(&f.webhookURL, "webhook-url", "", "deliver by HTTP POST to this URL (delivery name \"webhook\")")
	fs.StringVar(&f.webhookSec, "webhook-secret", "", "sign each webhook request with this secret (Standard Webhooks)")
	fs.Var(&f.webhookAllow, "webhook-allow-networks", "comma-separated CIDRs the webhook may reach although private or loopback (e.g. 10.0.0.0/8)")
	fs.Var(&f.routes, "route", "route topics to a delivery: pattern=name (kafka, redis, amqp, webhook); repeat it or comma-separate; needed when several deliveries are given; pattern * routes the rest")

	fs.StringVar(&f.wakeup, "wakeup", "none", "wake the relay when events are written: pgnotify (PostgreSQL LISTEN on --dsn), redis (pub/sub on --redis-url), kafka (--kafka-brokers), amqp (--amqp-url), none")
	fs.StringVar(&f.wakeupURL, "wakeup-url", "", "what the wakeup connects to: a PostgreSQL DSN, redis:// or amqp:// URL, or comma-separated Kafka brokers (default --dsn, --redis-url, --amqp-url or --kafka-brokers)")
	fs.StringVar(&f.wakeupChannel, "wakeup-channel", "", "the wakeup's channel, topic or exchange (default the wakeup package's)")

	fs.StringVar(&f.adminAddr, "admin-addr", "", "serve /healthz, /readyz and /metrics on this address (host:port; default none)")
	fs.StringVar(&f.adminUser, "admin-user", "herald", "the user name of the admin page's HTTP Basic authentication")
	fs.StringVar(&f.adminPassword, "admin-password", "", "serve the dead-letter admin page and its JSON API under /admin/ on --admin-addr, behind HTTP Basic authentication with this password (default: no page)")
	fs.BoolVar(&f.adminReadOnly, "admin-read-only", false, "the admin page only reads: retry, discard, pause and resume are refused")
	fs.DurationVar(&f.stopTimeout, "stop-timeout", 30*time.Second, "on SIGTERM/SIGINT, how long the batch in hand may take to finish before its deliveries are cancelled")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
}

// built is what relayConfig made from the flags, nothing connected yet.
type built struct {
	dialect   envelope.Dialect
	deliver   delivery.Delivery
	closers   []func() error
	wake      *watchedWakeup // nil without a wakeup
	cfg       relay.Config
	system    string
	logger    *slog.Logger
	adminAddr string
}

func (b *built) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		_ = b.closers[i]()
	}
}

// build checks every flag and builds the deliveries, wakeup and relay
// configuration. Nothing it builds has connected: each package connects
// on first use.
func (f *relayFlags) build(errOut io.Writer) (_ *built, err error) {
	b := &built{adminAddr: f.adminAddr}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, usagef("--log-level %q: give debug, info, warn or error", f.logLevel)
	}
	b.logger = slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: level}))
	if b.dialect, err = f.db.dialect(); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"batch-size", f.batchSize}, {"concurrency", f.concurrency}, {"max-attempts", f.maxAttempts}} {
		if c.v < 0 {
			return nil, usagef("--%s %d: must not be negative", c.name, c.v)
		}
	}
	if f.batchSize > relay.MaxBatchSize {
		return nil, usagef("--batch-size %d: at most %d", f.batchSize, relay.MaxBatchSize)
	}
	if f.stopTimeout <= 0 {
		return nil, usagef("--stop-timeout %s: must be positive", f.stopTimeout)
	}
	if f.adminPassword != "" && f.adminAddr == "" {
		return nil, usagef("--admin-password needs --admin-addr")
	}
	if f.adminAddr != "" {
		if _, _, err := net.SplitHostPort(f.adminAddr); err != nil {
			return nil, usagef("--admin-addr %q: %v", f.adminAddr, err)
		}
	}

	deliveries := map[string]delivery.Delivery{}
	var order []string
	add := func(name string, d delivery.Delivery, closer func() error) {
		deliveries[name] = d
		order = append(order, name)
		b.closers = append(b.closers, closer)
	}
	if len(f.kafkaBrokers) > 0 {
		d, err := kafka.New(kafka.Config{Brokers: f.kafkaBrokers, Topic: f.kafkaTopic})
		if err != nil {
			return nil, flagErr("kafka-brokers", err)
		}
		add("kafka", d, d.Close)
		b.system = "kafka"
	} else if f.kafkaTopic != "" {
		return nil, usagef("--kafka-topic needs --kafka-brokers")
	}
	if f.redisURL != "" {
		d, err := redisstream.New(redisstream.Config{URL: f.redisURL, Stream: f.redisStream})
		if err != nil {
			return nil, flagErr("redis-url", err)
		}
		add("redis", d, d.Close)
		b.system = "redis"
	} else if f.redisStream != "" {
		return nil, usagef("--redis-stream needs --redis-url")
	}
	if f.amqpURL != "" {
		d, err := amqp.New(amqp.Config{URL: f.amqpURL, Exchange: f.amqpExchange})
		if err != nil {
			return nil, flagErr("amqp-url", err)
		}
		add("amqp", d, d.Close)
		b.system = "rabbitmq"
	} else if f.amqpExchange != "" {
		return nil, usagef("--amqp-exchange needs --amqp-url")
	}
	if f.webhookURL != "" {
		cfg := webhook.Config{URL: f.webhookURL, Secret: f.webhookSec}
		for _, n := range f.webhookAllow {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				return nil, usagef("--webhook-allow-networks %q: %v", n, err)
			}
			cfg.AllowNetworks = append(cfg.AllowNetworks, p)
		}
		d, err := webhook.New(cfg)
		if err != nil {
			return nil, flagErr("webhook-url", err)
		}
		add("webhook", d, d.Close)
		b.system = "http"
	} else if f.webhookSec != "" || len(f.webhookAllow) > 0 {
		return nil, usagef("--webhook-secret and --webhook-allow-networks need --webhook-url")
	}
	switch {
	case len(order) == 0:
		return nil, usagef("no delivery: give --kafka-brokers, --redis-url, --amqp-url or --webhook-url")
	case len(order) > 1:
		b.system = "herald"
		if len(f.routes) == 0 {
			return nil, usagef("several deliveries (%s): give --route pattern=name for each topic pattern", strings.Join(order, ", "))
		}
	}
	if len(f.routes) == 0 {
		b.deliver = deliveries[order[0]]
	} else {
		var (
			routes   []delivery.Route
			fallback delivery.Delivery
		)
		for _, r := range f.routes {
			pattern, name, ok := strings.Cut(r, "=")
			pattern, name = strings.TrimSpace(pattern), strings.TrimSpace(name)
			if !ok || pattern == "" || name == "" {
				return nil, usagef("--route %q: give pattern=name, e.g. 'billing.*=webhook'", r)
			}
			d, ok := deliveries[name]
			if !ok {
				return nil, usagef("--route %q: no delivery %q configured (configured: %s)", r, name, strings.Join(order, ", "))
			}
			if pattern == "*" {
				if fallback != nil {
					return nil, usagef("--route %q: a second * route", r)
				}
				fallback = d
				continue
			}
			routes = append(routes, delivery.Route{Pattern: pattern, Delivery: d})
		}
		rt, err := delivery.RouterOf(routes, fallback)
		if err != nil {
			return nil, flagErr("route", err)
		}
		rt.Concurrency = f.concurrency
		b.deliver = rt
	}

	var w wakeup.Wakeup
	// wurl is what the wakeup connects to: --wakeup-url, else the
	// delivery's (or the database's) own.
	wurl := func(def, defFlag string) (string, error) {
		if f.wakeupURL != "" {
			return f.wakeupURL, nil
		}
		if def == "" {
			return "", usagef("--wakeup %s needs --wakeup-url or %s", f.wakeup, defFlag)
		}
		return def, nil
	}
	switch f.wakeup {
	case "", "none":
		if f.wakeupURL != "" {
			return nil, usagef("--wakeup-url needs --wakeup")
		}
	case "pgnotify":
		conn := f.wakeupURL
		if conn == "" {
			if b.dialect != envelope.Postgres {
				return nil, usagef("--wakeup pgnotify needs a PostgreSQL --dsn (or --wakeup-url)")
			}
			conn = f.db.dsn
		}
		pw, err := pgnotify.New(pgnotify.Config{ConnString: conn, Channel: f.wakeupChannel, Logger: b.logger})
		if err != nil {
			return nil, flagErr("wakeup", err)
		}
		w = pw
	case "redis":
		u, err := wurl(f.redisURL, "--redis-url")
		if err != nil {
			return nil, err
		}
		rw, err := redispubsub.New(redispubsub.Config{URL: u, Channel: f.wakeupChannel, Logger: b.logger})
		if err != nil {
			return nil, flagErr("wakeup", err)
		}
		w = rw
	case "kafka":
		u, err := wurl(strings.Join(f.kafkaBrokers, ","), "--kafka-brokers")
		if err != nil {
			return nil, err
		}
		var brokers listFlag
		_ = brokers.Set(u)
		kw, err := kafkasignal.New(kafkasignal.Config{Brokers: brokers, Topic: f.wakeupChannel, Logger: b.logger})
		if err != nil {
			return nil, flagErr("wakeup", err)
		}
		w = kw
	case "amqp":
		u, err := wurl(f.amqpURL, "--amqp-url")
		if err != nil {
			return nil, err
		}
		aw, err := amqpfanout.New(amqpfanout.Config{URL: u, Exchange: f.wakeupChannel, Logger: b.logger})
		if err != nil {
			return nil, flagErr("wakeup", err)
		}
		w = aw
	default:
		return nil, usagef("--wakeup %q: give pgnotify, redis, kafka, amqp or none", f.wakeup)
	}
	if w != nil {
		b.wake = &watchedWakeup{Wakeup: w}
		b.closers = append(b.closers, w.Close)
	} else if f.wakeupChannel != "" {
		return nil, usagef("--wakeup-channel needs --wakeup")
	}

	b.cfg = relay.Config{
		Table: f.db.table, Dialect: b.dialect, Name: f.name,
		Topics: f.topics, ExcludeTopics: f.exclude,
		BatchSize: f.batchSize, Concurrency: f.concurrency, MaxAttempts: f.maxAttempts,
		RetryBase: f.retryBase, RetryMax: f.retryMax, Lease: f.lease, DeliveryTimeout: f.deliveryTimeout,
		MinPollInterval: f.minPoll, MaxPollInterval: f.maxPoll,
		RetainPublished: f.retainPublished, RetainDeadLettered: f.retainDead, DeleteOnPublish: f.deleteOnPublish,
		Logger: b.logger,
	}
	if len(f.tenants) > 0 {
		b.cfg.Tenants = f.tenants
	}
	if b.wake != nil {
		b.cfg.Wakeup = b.wake
	}
	return b, nil
}

// flagErr is a package's configuration error, told as a usage error of
// the flag it came from.
func flagErr(flagName string, err error) error {
	return usagef("--%s: %v", flagName, err)
}

func runRelay(ctx context.Context, args []string, out, errOut io.Writer) error {
	var f relayFlags
	fs := flagSet("relay", errOut)
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	b, err := f.build(errOut)
	if err != nil {
		return err
	}
	defer b.close()

	sqlDB, err := migrate.Open(b.dialect, f.db.dsn)
	if err != nil {
		return err
	}
	defer sqlDB.Close()

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	metrics, err := otelherald.New(otelherald.Config{MeterProvider: provider, System: b.system})
	if err != nil {
		return err
	}
	b.cfg.Observer = metrics

	r, err := relay.New(sqlDB, b.deliver, b.cfg)
	if err != nil {
		if errors.Is(err, envelope.ErrConfiguration) {
			return &usageError{msg: err.Error()}
		}
		return err
	}
	unregister, err := metrics.ObserveBacklog(r)
	if err != nil {
		return err
	}
	defer func() { _ = unregister() }()

	var admin *adminServer
	if b.adminAddr != "" {
		var page http.Handler
		if f.adminPassword != "" {
			if page, err = adminPage(sqlDB, r, f.adminUser, f.adminPassword, f.adminReadOnly, b.logger); err != nil {
				return err
			}
		}
		admin, err = startAdmin(b.adminAddr, sqlDB, b.wake, reader, page, b.logger)
		if err != nil {
			return err
		}
		defer admin.close()
	}

	if err := r.Start(ctx); err != nil {
		return err
	}
	b.logger.Info("herald relay: running", slog.String("relay", r.Name()), slog.String("dialect", string(b.dialect)))
	select {
	case <-ctx.Done():
		b.logger.Info("herald relay: stopping", slog.String("relay", r.Name()), slog.Duration("bound", f.stopTimeout))
	case <-r.Stopped():
		// The run ended by itself: the table was missing when the
		// database first answered.
		return fmt.Errorf("herald relay: the relay stopped by itself (see the log above)")
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.stopTimeout)
	defer cancel()
	if err := r.Stop(sctx); err != nil {
		return err
	}
	b.logger.Info("herald relay: stopped", slog.String("relay", r.Name()))
	return nil
}

// watchedWakeup is the relay's wakeup, telling /readyz whether its
// listener is subscribed: up from the first call of fn with nil topics
// (the wakeup packages call it once subscribed, and again after every
// re-subscription) until Listen returns.
type watchedWakeup struct {
	wakeup.Wakeup
	up atomic.Bool
}

func (w *watchedWakeup) Listen(ctx context.Context, fn func(topics []string)) error {
	defer w.up.Store(false)
	return w.Wakeup.Listen(ctx, func(topics []string) {
		if topics == nil {
			w.up.Store(true)
		}
		fn(topics)
	})
}
