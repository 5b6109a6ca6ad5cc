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
// per Wakeup value shared by all the relays of the process. A consumer is
// subscribed — its relays told to poll once for what came before — when
// its first fetch comes back. It ends at once on a failed broker
// connection (connect, write or read), on any error a fetch carries (an
// ACL refusing Read, the signal topic deleted or recreated, a leader
// moved), or after Config.HealthCheck without a response from the brokers
// (a link that stays up but passes nothing; a healthy one answers a fetch
// every second). It is then rebuilt with back-off — a WARN per failure, an
// ERROR from the fifth in a row on, a consumer that fails within 10 s of
// subscribing counting as one more failure in a row — from the topic's
// new end offsets, while the relays are told to poll every PollWhileDown,
// and once more when it is subscribed again (signals sent meanwhile reach
// no one). The Wakeup's clients retry a request after 50 ms, doubling to
// 1 s (franz-go's default is 250 ms to 5 s), so a signal produced during a
// short outage goes out within about a second of the link coming back.
//
// Give one Wakeup value to both the writer side and the relays:
//
//	w, err := kafkasignal.New(kafkasignal.Config{Brokers: []string{"127.0.0.1:9092"}})
//	defer w.Close()
//	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
//	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
package kafkasignal
