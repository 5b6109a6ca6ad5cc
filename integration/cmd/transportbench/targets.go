package main

import (
	"context"
	"database/sql"
	"log/slog"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/nats"
	heraldriver "github.com/heraldgo/herald/delivery/river"
	"github.com/heraldgo/herald/envelope"
)

// natsTarget is a JetStream stream of its own (memory storage) and a
// delivery to its subject; purge empties the stream, done deletes it.
func natsTarget(ctx context.Context, url, name string) (d delivery.Delivery, purge, done func()) {
	nc, err := natsgo.Connect(url)
	check(err)
	js, err := jetstream.New(nc)
	check(err)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}, Storage: jetstream.MemoryStorage})
	check(err)
	nd, err := nats.New(nats.Config{URL: url, Subject: name})
	check(err)
	return nd, func() { check(st.Purge(ctx)) }, func() {
		_ = nd.Close()
		_ = js.DeleteStream(context.Background(), name)
		nc.Close()
	}
}

// benchJob is the job of one event.
type benchJob struct {
	EventID string `json:"event_id"`
	Payload []byte `json:"payload"`
}

func (benchJob) Kind() string { return "transportbench" }

// riverTarget migrates River into the outbox's schema and returns a
// delivery inserting one job per event in the relay's mark transaction;
// empty truncates river_job.
func riverTarget(ctx context.Context, db *sql.DB) (d delivery.Delivery, empty func()) {
	quiet := slog.New(slog.DiscardHandler)
	m, err := rivermigrate.New(riverdatabasesql.New(db), &rivermigrate.Config{Logger: quiet})
	check(err)
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	check(err)
	c, err := river.NewClient(riverdatabasesql.New(db), &river.Config{Logger: quiet})
	check(err)
	rd, err := heraldriver.New(heraldriver.Config{Client: c, Args: func(e *envelope.Event) (river.JobArgs, *river.InsertOpts, error) {
		return benchJob{EventID: e.ID.String(), Payload: delivery.Body(e)}, nil, nil
	}})
	check(err)
	return rd, func() {
		_, err := db.ExecContext(ctx, `TRUNCATE river_job`)
		check(err)
	}
}
