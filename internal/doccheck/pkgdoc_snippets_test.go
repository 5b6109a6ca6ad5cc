package doccheck

// The snippets at the top of the package documentation of envelope,
// delivery and relay (issue 23 §4): compiled here, not run.

import (
	"context"
	"database/sql"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

var _ = []any{envelopeDocWrite, deliveryDocFunc, relayDocStart}

// envelope's package documentation.
func envelopeDocWrite(ctx context.Context, db *sql.DB, tx *sql.Tx, loan any) error {
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil { // herald_outbox, up to date
		return err
	}
	w, err := envelope.NewWriter(envelope.Postgres, "")
	if err != nil {
		return err
	}
	_, err = w.Write(ctx, tx, []envelope.Message{{Topic: "library.loan.created", OrderingKey: "loan:7", Payload: loan}})
	return err
}

// delivery's package documentation.
func deliveryDocFunc(db *sql.DB) (*relay.Relay, error) {
	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		return publish(ctx, e.Topic, e.Payload) // nil only once the event is handed over
	})
	r, err := relay.New(db, d, relay.Config{})
	return r, err
}

// relay's package documentation.
func relayDocStart(ctx context.Context, db *sql.DB, d delivery.Delivery) error {
	r, err := relay.New(db, d, relay.Config{}) // the dialect is detected from db
	if err != nil {
		return err // a bad option or a missing table: envelope.ErrConfiguration
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	defer r.Stop(context.Background())
	return nil
}
