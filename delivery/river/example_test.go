package river_test

import (
	"database/sql"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"

	heraldriver "github.com/heraldgo/herald/delivery/river"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

// SendMailArgs is a River job made from a "mail.send" event.
type SendMailArgs struct {
	EventID string          `json:"event_id" river:"unique"`
	Payload json.RawMessage `json:"payload"`
}

func (SendMailArgs) Kind() string { return "send_mail" }

// A relay that turns "mail.*" events into River jobs, each inserted in
// the transaction that marks its event published: exactly once into
// River. River's tables are in the outbox's database (rivermigrate).
func ExampleNew() {
	var sqlDB *sql.DB // the outbox's database, River's tables in it
	client, err := river.NewClient(riverdatabasesql.New(sqlDB), &river.Config{})
	if err != nil {
		panic(err)
	}
	d, err := heraldriver.New(heraldriver.Config{Client: client, Args: func(e *envelope.Event) (river.JobArgs, *river.InsertOpts, error) {
		return SendMailArgs{EventID: e.ID.String(), Payload: e.Payload}, &river.InsertOpts{Queue: "mail"}, nil
	}})
	if err != nil {
		panic(err)
	}
	_, _ = relay.New, d // relay.New(sqlDB, d, relay.Config{Topics: []string{"mail.*"}})
}
