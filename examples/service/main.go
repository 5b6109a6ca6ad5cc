// Command service is an HTTP service written as a herald user would write
// it: GORM on PostgreSQL with captured models, an order API that honours
// the Idempotency-Key request header, and the relay that sends the shop's
// events to Kafka and the billing events to a signed webhook, woken by
// PostgreSQL LISTEN/NOTIFY.
//
//	go run ./examples/service -kafka 127.0.0.1:9092 -webhook-url https://billing.example/hooks -webhook-secret s3cret
//
// Without a Kafka, -kafka-fake runs an in-process Kafka (franz-go's kfake)
// instead and logs its address, which any Kafka client can consume from
// while the service runs (kcat -b <addr> -t shop.order -C); its records are
// gone when the service exits:
//
//	go run ./examples/service -kafka-fake -webhook-url http://127.0.0.1:9000/hooks -webhook-allow-private
//
// An order's events share its ordering key "order:<id>": the captured
// shop.order.inserted and shop.order.updated and the API's own
// shop.order.placed. They go to one Kafka topic, the aggregate's
// (shop.order: shopTopic, a Config.TopicFunc), so they reach one partition
// and a consumer reads them in sequence order (the herald-sequence
// header); -kafka-topic sends every shop event to one topic instead.
//
// The relay runs in the service's process by default (-mode all). Run it
// as a process of its own — one relay process beside many API replicas —
// with -mode api for the API and -mode relay for the relay; the API's
// commits still wake it at once through NOTIFY. The relay logs "relay
// started" once it runs, in every mode but api.
//
// With -read-model the service also consumes its own shop.order events
// from Kafka into the table customer_totals (orders and items per
// customer) through an inbox, so each event counts once however often
// Kafka delivers it:
//
//	go run ./examples/service -kafka-fake -read-model -webhook-url http://127.0.0.1:9000/hooks -webhook-allow-private
//
// SIGTERM (or Ctrl-C) shuts it down gracefully: the HTTP server stops
// accepting requests and finishes the ones in flight, then the relay
// stops after delivering and marking the batch in hand.
//
// Endpoints:
//
//	POST /orders                  {"customer":"ada","item":"book","qty":2}   → 201 {"order_id":1,"event_id":"…"}
//	POST /orders/{id}/cancel      {"reason":"…"}                            → 200 {"order_id":1,"event_id":"…"}
//	GET  /healthz
//
// A request with an Idempotency-Key header is done once: a retry with the
// same key and the same body returns the first answer (the same event id)
// and changes nothing; the same key with another body is 409 Conflict.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup/pgnotify"
)

// Config is the service's configuration, from flags.
type Config struct {
	Mode         string // all, api or relay
	Addr         string
	DSN          string
	KafkaBrokers []string
	// KafkaFake runs an in-process Kafka (kfake) instead of KafkaBrokers.
	KafkaFake bool
	// KafkaTopic is the one Kafka topic of every shop event; "" = its
	// aggregate's (shopTopic).
	KafkaTopic    string
	WebhookURL    string
	WebhookSecret string
	// AllowPrivateWebhook lets the webhook reach loopback and private
	// addresses (a receiver on the same host or in the cluster).
	AllowPrivateWebhook bool
	// ReadModel consumes the service's own shop.order events from Kafka
	// into the customer_totals table, each event once (the inbox).
	ReadModel bool
}

func main() {
	var cfg Config
	var brokers string
	flag.StringVar(&cfg.Mode, "mode", "all", "all (API and relay), api or relay")
	flag.StringVar(&cfg.Addr, "addr", "127.0.0.1:8080", "HTTP listen address (modes all and api)")
	flag.StringVar(&cfg.DSN, "dsn", envOr("HERALD_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL connection string")
	flag.StringVar(&brokers, "kafka", envOr("HERALD_KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka seed brokers, comma-separated")
	flag.BoolVar(&cfg.KafkaFake, "kafka-fake", false, "run an in-process Kafka (kfake) instead of -kafka, for trying the service without one")
	flag.StringVar(&cfg.KafkaTopic, "kafka-topic", "", "one Kafka topic for every shop.* event (default: the aggregate's, shop.order for an order's events)")
	flag.StringVar(&cfg.WebhookURL, "webhook-url", "", "URL receiving the billing.* events")
	flag.StringVar(&cfg.WebhookSecret, "webhook-secret", os.Getenv("WEBHOOK_SECRET"), "secret signing the webhook requests (herald-signature: sha256=…)")
	flag.BoolVar(&cfg.AllowPrivateWebhook, "webhook-allow-private", false, "let the webhook reach loopback and private addresses")
	flag.BoolVar(&cfg.ReadModel, "read-model", false, "consume the shop.order events from Kafka into customer_totals, each once (modes all and relay)")
	flag.Parse()
	cfg.KafkaBrokers = strings.Split(brokers, ",")

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := Run(ctx, cfg, nil); err != nil {
		log.Error("service failed", "error", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Run runs the service until ctx ends, then shuts it down gracefully. When
// listening is not nil it receives the HTTP address once the server
// accepts requests.
func Run(ctx context.Context, cfg Config, listening func(addr string)) error {
	if cfg.Mode != "all" && cfg.Mode != "api" && cfg.Mode != "relay" {
		return fmt.Errorf("-mode %q: want all, api or relay", cfg.Mode)
	}
	sqlDB, err := sql.Open("pgx", cfg.DSN)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	// The API's requests and the relay share this pool: keep room for
	// their connections idle, or every connection given back beyond
	// database/sql's default of two is closed and opened again for a later
	// statement (the relay logs a WARN when it sees that churn).
	sqlDB.SetMaxIdleConns(16)
	if err := envelope.Migrate(ctx, sqlDB, envelope.Postgres, ""); err != nil {
		return fmt.Errorf("migrate the outbox: %w", err)
	}

	// One wakeup for the process: the API's transactions NOTIFY through
	// it, the relay LISTENs on it.
	wake, err := pgnotify.New(pgnotify.Config{ConnString: cfg.DSN})
	if err != nil {
		return err
	}
	defer wake.Close()

	var r *relay.Relay
	if cfg.Mode != "api" {
		if cfg.KafkaFake {
			// shop.order exists at once; another aggregate's topic is
			// created when first produced to.
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "shop.order"),
				kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
			if err != nil {
				return fmt.Errorf("start the in-process Kafka: %w", err)
			}
			defer cluster.Close()
			cfg.KafkaBrokers = cluster.ListenAddrs()
			slog.Info("in-process Kafka (kfake) started; its records are lost when the service exits", "brokers", strings.Join(cfg.KafkaBrokers, ","))
		}
		router, err := newRouter(cfg)
		if err != nil {
			return err
		}
		defer router.Close()
		name := "service-relay-" + fmt.Sprint(os.Getpid())
		r, err = relay.New(sqlDB, router, relay.Config{Wakeup: wake, Name: name})
		if err != nil {
			return err
		}
		if err := r.Start(ctx); err != nil {
			return err
		}
		slog.Info("relay started", "relay", name, "mode", cfg.Mode, "kafka", strings.Join(cfg.KafkaBrokers, ","))
	}
	var readModelDone <-chan error
	readCtx, stopReadModel := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReadModel()
	if cfg.ReadModel && cfg.Mode != "api" {
		topic := cfg.KafkaTopic
		if topic == "" {
			topic = "shop.order"
		}
		if readModelDone, err = startReadModel(readCtx, sqlDB, cfg.KafkaBrokers, topic); err != nil {
			return err
		}
	}

	var srv *http.Server
	serveErr := make(chan error, 1)
	if cfg.Mode != "relay" {
		db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return err
		}
		if err := db.Use(gormcapture.New(gormcapture.Config{Namespace: "shop", Models: []any{&Order{}}, Wakeup: wake})); err != nil {
			return err
		}
		if err := db.AutoMigrate(&Order{}); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			return err
		}
		srv = &http.Server{Handler: NewAPI(db).Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- srv.Serve(ln) }()
		slog.Info("listening", "addr", ln.Addr().String(), "mode", cfg.Mode)
		if listening != nil {
			listening(ln.Addr().String())
		}
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return err
	}
	slog.Info("shutting down")
	// Stop taking requests and finish those in flight, then let the relay
	// deliver and mark the batch in hand (bounded by its lease).
	var errs []error
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		errs = append(errs, srv.Shutdown(sctx))
		cancel()
	}
	if r != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		errs = append(errs, r.Stop(sctx))
		cancel()
	}
	if readModelDone != nil {
		stopReadModel() // commits the offsets of what it handled
		errs = append(errs, <-readModelDone)
	}
	slog.Info("stopped")
	return errors.Join(errs...)
}

// shopTopic is the Kafka topic of a shop event: its aggregate, the first
// two parts of its topic ("shop.order.inserted", "shop.order.placed" →
// "shop.order"). An order's captured changes and the events the API
// enqueues for it share its ordering key, so they must share a topic to
// share a partition; delivery.ByAggregate, the default, would send
// shop.order.placed to a topic of its own.
func shopTopic(e *envelope.Event) string {
	parts := strings.SplitN(e.Topic, ".", 3)
	if len(parts) < 2 {
		return e.Topic
	}
	return parts[0] + "." + parts[1]
}

// newRouter sends shop.* to Kafka and billing.* to the signed webhook; an
// event of any other topic is dead-lettered at once (no route).
func newRouter(cfg Config) (*delivery.Routing, error) {
	kcfg := kafka.Config{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaTopic}
	if cfg.KafkaTopic == "" {
		kcfg.TopicFunc = shopTopic
	}
	if cfg.KafkaFake {
		kcfg.ClientOptions = []kgo.Opt{kgo.AllowAutoTopicCreation()}
	}
	k, err := kafka.New(kcfg)
	if err != nil {
		return nil, err
	}
	wcfg := webhook.Config{URL: cfg.WebhookURL, Secret: cfg.WebhookSecret}
	if cfg.AllowPrivateWebhook {
		wcfg.AllowNetworks = []netip.Prefix{
			netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
			netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16"),
		}
	}
	w, err := webhook.New(wcfg)
	if err != nil {
		_ = k.Close()
		return nil, err
	}
	return delivery.RouterOf([]delivery.Route{
		{Pattern: "shop.*", Delivery: k},
		{Pattern: "billing.*", Delivery: w},
	}, nil)
}
