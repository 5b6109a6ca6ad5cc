// Package amqpfanout wakes relays through a RabbitMQ fanout exchange
// (amqp091-go).
//
// Writers publish each topic of a transaction once, after it committed
// (gormcapture does it for captured writes and Enqueue; never after a
// rollback), as a transient message whose body is the topic name.
// Publishing never blocks the writer: one goroutine publishes, and topics
// signalled while a publish is in flight are coalesced into the next one.
//
// Relays consume from an exclusive, auto-delete, server-named queue bound
// to the exchange: one queue and one connection per Wakeup value, shared
// by all the relays of the process, so every process hears every signal.
// When the connection drops (heartbeats find a silent one) it is reopened
// with back-off (a WARN per failure, an ERROR from the fifth in a row on)
// while the relays are told to poll; the queue goes with the connection,
// and the relays poll right after the new one is bound.
//
// Give one Wakeup value to both the writer side and the relays:
//
//	w, err := amqpfanout.New(amqpfanout.Config{URL: "amqp://guest:guest@127.0.0.1:5672/"})
//	defer w.Close()
//	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
//	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
package amqpfanout
