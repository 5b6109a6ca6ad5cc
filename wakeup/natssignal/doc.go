// Package natssignal wakes relays over a core NATS subject (nats.go).
//
// Writers publish each topic of a transaction once, after it committed
// (gormcapture does it for captured writes and Enqueue; never after a
// rollback), to Config.Subject ("herald.wakeup" by default). Publishing
// never blocks the writer: one goroutine publishes, and topics signalled
// while a publish is in flight are coalesced into the next one. The
// message is the topic name only. Core NATS, not JetStream: a signal is
// fire-and-forget, and a relay that is not subscribed at that moment
// misses it and finds the event by polling, which it does right after
// every (re)subscription.
//
// Relays subscribe on one connection per Wakeup value, shared by all the
// relays of the process. It pings the server every HealthCheck and is
// given up after two pings without an answer (a link that stays open but
// passes nothing); a lost connection is reopened with back-off (a WARN
// per failure, an ERROR from the fifth in a row on) while the relays are
// told to poll.
//
// Give one Wakeup value to both the writer side and the relays:
//
//	w, err := natssignal.New(natssignal.Config{URL: "nats://127.0.0.1:4222"})
//	defer w.Close()
//	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
//	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
package natssignal
