// Package redispubsub wakes relays with Redis pub/sub (go-redis v9).
//
// Writers PUBLISH each topic of a transaction once, after it committed
// (gormcapture does it for captured writes and Enqueue; never after a
// rollback). Publishing never blocks the writer: one goroutine publishes,
// and topics signalled while a publish is in flight are coalesced into the
// next one. The message is the topic name only.
//
// Relays SUBSCRIBE on one connection per Wakeup value, shared by all the
// relays of the process. When it drops it is reopened with back-off (a WARN
// per failure, an ERROR from the fifth in a row on) while the relays are
// told to poll. Pub/sub is fire-and-forget: a relay that is not subscribed
// at the moment of a PUBLISH misses it and finds the event by polling,
// which it does right after every (re)subscription.
//
// Give one Wakeup value to both the writer side and the relays:
//
//	w, err := redispubsub.New(redispubsub.Config{URL: "redis://127.0.0.1:6379/0"})
//	defer w.Close()
//	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
//	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
package redispubsub
