// Package kafkasignal wakes relays through a Kafka signal topic (franz-go).
//
// Writers produce each topic of a transaction once, after it committed
// (gormcapture does it for captured writes and Enqueue; never after a
// rollback), as a record whose value is the topic name, to a signal topic
// created when absent with one partition and a one-minute retention.
// Producing never blocks the writer: one goroutine produces, and topics
// signalled while a produce is in flight are coalesced into the next one.
//
// Relays read the signal topic from its end offsets, outside any consumer
// group (nothing is committed, no rebalance ever waits), on one consumer
// per Wakeup value shared by all the relays of the process. A dropped
// broker connection is reopened by the client and reading resumes at its
// offset, so nothing is missed; a cluster that stays unreachable is found
// by a ping after HealthCheck of quiet, and the consumer is rebuilt with
// back-off (a WARN per failure, an ERROR from the fifth in a row on) while
// the relays are told to poll.
//
// Give one Wakeup value to both the writer side and the relays:
//
//	w, err := kafkasignal.New(kafkasignal.Config{Brokers: []string{"127.0.0.1:9092"}})
//	defer w.Close()
//	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
//	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
package kafkasignal
