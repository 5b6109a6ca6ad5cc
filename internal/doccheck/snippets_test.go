package doccheck

// The snippets the documentation quotes that are fragments rather than
// whole examples, each in a function of its own so that it compiles; they
// are not run (whole programs are: examples/readme, examples/quickstart
// and the packages' Example functions). TestSnippetsCompile finds them
// here.

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"

	_ "github.com/go-sql-driver/mysql" // "mysql"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"go.opentelemetry.io/otel/metric"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/otelherald"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup"
	"github.com/heraldgo/herald/wakeup/amqpfanout"
	"github.com/heraldgo/herald/wakeup/kafkasignal"
	"github.com/heraldgo/herald/wakeup/pgnotify"
	"github.com/heraldgo/herald/wakeup/redispubsub"
)

func publish(context.Context, string, json.RawMessage) error { return nil }

func alert(...any) {}

// delivery.Func's documentation.
func deliveryFunc() delivery.Delivery {
	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		return publish(ctx, e.Topic, e.Payload)
	})
	return d
}

// delivery.Router's documentation.
func deliveryRouter(kafkaDelivery, webhookDelivery delivery.Delivery) (*delivery.Routing, error) {
	d, err := delivery.Router(map[string]delivery.Delivery{
		"billing.*":            kafkaDelivery,
		"library.loan.overdue": webhookDelivery,
	}, nil)
	return d, err
}

// relay.ObserverFuncs's documentation.
func observerFuncs() relay.Config {
	cfg := relay.Config{Observer: relay.ObserverFuncs{
		OnDeadLettered: func(ctx context.Context, d relay.DeadLettered) { alert(d.Event.ID, d.Err) },
	}}
	return cfg
}

// README.md, "Deliveries".
func readmeDeliveries(sqlDB *sql.DB, secret string) {
	k, err := kafka.New(kafka.Config{Brokers: []string{"kafka:9092"}}) // Kafka topic = delivery.ByAggregate: shop.order.* → shop.order
	hook, err := webhook.New(webhook.Config{
		URL: "https://billing.example.com/events", Secret: secret, // herald-signature: sha256=<hex HMAC>
	})
	d, err := delivery.Router(map[string]delivery.Delivery{"billing.*": hook}, k)
	r, err := relay.New(sqlDB, d, relay.Config{})
	// ... r.Run(ctx); then d.Close() closes both
	_, _ = r, err
}

// README.md, "Deliveries": a destination of one's own.
func readmeTopicFunc(brokers []string) (*kafka.Delivery, error) {
	k, err := kafka.New(kafka.Config{Brokers: brokers, TopicFunc: func(e *envelope.Event) string {
		aggregate, _, _ := strings.Cut(e.Topic, ".") // order.placed, order.shipped → outbox.order
		return "outbox." + aggregate
	}})
	return k, err
}

// envelope's package documentation.
func envelopeDoc(ctx context.Context, db *sql.DB) error {
	err := envelope.Migrate(ctx, db, envelope.Postgres, "") // herald_outbox at envelope.LatestVersion
	return err
}

// gormcapture's package documentation.
type Reader struct{ ID int64 }

type Loan struct {
	ID       int64
	Status   string
	Fee      decimal.Decimal `gorm:"type:numeric(10,2)"`
	ReaderID int64
	Secret   string `herald:"sensitive"` // left out of events unless named in Fields
}

func (Loan) ChangeCapture() envelope.Options {
	return envelope.Options{Payload: envelope.BeforeAndAfter}
}

func gormcaptureDoc(ctx context.Context, dsn string, w wakeup.Wakeup) error {
	db, _ := gorm.Open(postgres.Open(dsn))
	sqlDB, _ := db.DB()
	_ = envelope.Migrate(ctx, sqlDB, envelope.Postgres, "") // the outbox table
	err := db.Use(gormcapture.New(gormcapture.Config{
		Namespace: "library",                 // topics library.loan.updated, label library.Loan
		Models:    []any{&Reader{}, &Loan{}}, // validated now; their constraint tags reveal DB cascades
		Wakeup:    w,                         // optional
	}))
	return err
}

// README.md, "Running herald in production": dead letters and monitoring.
func operations(ctx context.Context, r *relay.Relay, ids []uuid.UUID) {
	n, err := r.RetryDeadLettered(ctx, relay.Filter{Topics: []string{"billing.*"}}) // or Filter{IDs: ids}

	b, err := r.Backlog(ctx) // b.Pending, b.OldestPendingAge, b.DeadLettered: export them as gauges
	_, _, _, _ = n, err, b, ids
}

// README.md, "Running herald in production": metrics in OpenTelemetry.
func otelMetrics(db *sql.DB, d delivery.Delivery, provider metric.MeterProvider) error {
	m, err := otelherald.New(otelherald.Config{MeterProvider: provider, System: "kafka"})
	r, err := relay.New(db, d, relay.Config{Name: "relay-1", Observer: m})
	stop, err := m.ObserveBacklog(r) // herald.backlog.* by topic, one statement per BacklogInterval
	_ = stop
	return err
}

// README.md, "Wakeups".
func readmeWakeups(dsn string, db *gorm.DB, sqlDB *sql.DB, d delivery.Delivery) {
	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn}) // one per process
	defer w.Close()
	err = db.Use(gormcapture.New(gormcapture.Config{Wakeup: w})) // captured writes and Enqueue NOTIFY in their transaction
	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})       // the relay LISTENs
	_, _ = r, err
}

// The wakeup transports' package documentation.
func wakeupPgnotify(dsn string, db *gorm.DB, sqlDB *sql.DB, d delivery.Delivery) {
	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn})
	defer w.Close()
	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
	_, _ = r, err
}

func wakeupRedis(db *gorm.DB, sqlDB *sql.DB, d delivery.Delivery) {
	w, err := redispubsub.New(redispubsub.Config{URL: "redis://127.0.0.1:6379/0"})
	defer w.Close()
	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
	_, _ = r, err
}

func wakeupKafka(db *gorm.DB, sqlDB *sql.DB, d delivery.Delivery) {
	w, err := kafkasignal.New(kafkasignal.Config{Brokers: []string{"127.0.0.1:9092"}})
	defer w.Close()
	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
	_, _ = r, err
}

func wakeupAMQP(db *gorm.DB, sqlDB *sql.DB, d delivery.Delivery) {
	w, err := amqpfanout.New(amqpfanout.Config{URL: "amqp://guest:guest@127.0.0.1:5672/"})
	defer w.Close()
	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
	_, _ = r, err
}

// Referenced, so the linters do not report the fragments unused.
var _ = []any{otelMetrics, readmeWakeups, wakeupPgnotify, wakeupRedis, wakeupKafka, wakeupAMQP, operations, deliveryFunc, deliveryRouter, observerFuncs, readmeDeliveries, readmeTopicFunc, envelopeDoc, gormcaptureDoc, Loan{}.ChangeCapture, readmeMySQL, readmeGormMySQL}

// README.md, "MySQL and MariaDB": GORM capture.
func readmeGormMySQL(ctx context.Context, check func(error)) {
	gdb, err := gorm.Open(mysql.Open("app@tcp(127.0.0.1:3306)/shop?parseTime=true"), &gorm.Config{})
	check(err)
	sqlDB, err := gdb.DB()
	check(err)
	check(envelope.Migrate(ctx, sqlDB, envelope.MySQL, ""))
	check(gdb.Use(gormcapture.New(gormcapture.Config{Models: []any{&Loan{}}})))
	check(gdb.Create(&Loan{Status: "lent"}).Error) // the row and its event, in one transaction
}

// README.md, "MySQL and MariaDB".
func readmeMySQL(ctx context.Context, d delivery.Delivery, check func(error)) {
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/shop?parseTime=true")
	check(err)
	check(envelope.Migrate(ctx, db, envelope.MySQL, "")) // herald_outbox, its key-lock rows, its paused topics
	w, err := envelope.NewWriter(envelope.MySQL, "")
	check(err)
	tx, err := db.BeginTx(ctx, nil)
	check(err)
	// ... the service's own writes in tx ...
	_, err = w.Write(ctx, tx, []envelope.Message{{Topic: "shop.order.placed", OrderingKey: "order:42", Payload: map[string]any{"id": 42}}})
	check(err)
	check(tx.Commit())
	r, err := relay.New(db, d, relay.Config{Wakeup: wakeup.NewInProcess()}) // the dialect told from the driver
	_, _ = r, err
}
