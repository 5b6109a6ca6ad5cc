package doccheck

// The fragments the documentation of the NATS, Watermill and River
// deliveries and of the NATS wakeup quotes (see snippets_test.go).

import (
	"database/sql"
	"encoding/json"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/delivery"
	heraldriver "github.com/heraldgo/herald/delivery/river"
	watermilld "github.com/heraldgo/herald/delivery/watermill"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup/natssignal"
)

// Referenced, so the linters do not report the fragments unused.
var _ = []any{wakeupNATS, deliveryRiver, deliveryWatermill}

func wakeupNATS(db *gorm.DB, sqlDB *sql.DB, d delivery.Delivery) {
	w, err := natssignal.New(natssignal.Config{URL: "nats://127.0.0.1:4222"})
	defer w.Close()
	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
	_, _ = r, err
}

// SendMailArgs is the River job of delivery/river's documentation.
type SendMailArgs struct {
	EventID string          `json:"event_id" river:"unique"`
	Payload json.RawMessage `json:"payload"`
}

func (SendMailArgs) Kind() string { return "send_mail" }

func deliveryRiver(sqlDB *sql.DB) {
	client, err := river.NewClient(riverdatabasesql.New(sqlDB), &river.Config{})
	d, err := heraldriver.New(heraldriver.Config{Client: client, Args: func(e *envelope.Event) (river.JobArgs, *river.InsertOpts, error) {
		return SendMailArgs{EventID: e.ID.String(), Payload: e.Payload}, &river.InsertOpts{Queue: "mail"}, nil
	}})
	r, err := relay.New(sqlDB, d, relay.Config{Topics: []string{"mail.*"}})
	_, _ = r, err
}

func deliveryWatermill(sqlDB *sql.DB, amqpCfg amqp.Config) {
	pub, err := amqp.NewPublisher(amqpCfg, watermill.NopLogger{}) // watermill-amqp
	d, err := watermilld.New(watermilld.Config{Publisher: pub})   // this package
	r, err := relay.New(sqlDB, d, relay.Config{})
	_, _ = r, err
}
