// Package river delivers herald events as River jobs
// (github.com/riverqueue/river): each event becomes one background job,
// its args built from the event by Config.Args, with the queue, priority
// and unique options that function gives.
//
// When River's tables are in the outbox's database, New's Delivery is a
// delivery.TxDelivery: the relay inserts a batch's jobs with one
// InsertManyTx in the very transaction that marks the events published,
// and commits it only when the mark took every event (none was taken over
// by another relay meanwhile). A job exists exactly when its event is
// marked published — exactly once into River, not at least once: a relay
// that crashes before the commit leaves neither job nor mark, and the
// event is delivered again later, once. Build the client on a
// riverdatabasesql driver over the *sql.DB the relay uses (an insert-only
// client: no Queues, no Workers); work the jobs with any River client
// (riverpgxv5) elsewhere:
//
//	client, err := river.NewClient(riverdatabasesql.New(sqlDB), &river.Config{})
//	d, err := heraldriver.New(heraldriver.Config{Client: client, Args: func(e *envelope.Event) (river.JobArgs, *river.InsertOpts, error) {
//		return SendMailArgs{EventID: e.ID.String(), Payload: e.Payload}, &river.InsertOpts{Queue: "mail"}, nil
//	}})
//	r, err := relay.New(sqlDB, d, relay.Config{Topics: []string{"mail.*"}})
//
// Wrapping keeps it so: otelherald.Delivery of it is a TxDelivery, and so
// is a delivery.Router whose every route is one (delivery.AsTx). A Router
// with a route of another kind delivers each event on its own, outside
// the mark, at least once: give the River routes a relay of their own
// (relay.Config.Topics).
//
// When River is in another database, NewAtLeastOnce inserts a batch's
// jobs with one InsertMany before the relay marks the events: at least
// once, with UniqueOpts.ByArgs on each job so that an event delivered
// again finds its job instead of adding one — put the event id in the
// args (in a field tagged `river:"unique"`, or keep the args unique as a
// whole).
//
// An event whose Args fails is a Permanent failure: dead-lettered at once,
// and no job of it is inserted (the relay rolls the transaction back and
// inserts the rest of the batch without it).
package river
