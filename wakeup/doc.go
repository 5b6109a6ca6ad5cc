// Package wakeup carries "events were committed for these topics" from the
// code that writes outbox events to the relays that deliver them, so an idle
// relay can wait long between polls and still start delivering at once.
//
// A Wakeup is a hint, never the source of truth: relays keep polling the
// table, so a signal that is lost (a crash after commit, a broker restart, a
// transaction the capture could not see) costs latency, never an event.
//
// Guarantee: a writer signals only after its transaction committed, once per
// topic per transaction, and never for a rollback.
//
// InProcess wakes the relays of the writer's own process. Relays in other
// processes are woken by the transports in the subpackages — pgnotify
// (PostgreSQL LISTEN/NOTIFY, a TxSignaler), redispubsub, kafkasignal and
// amqpfanout — each in its own package so a service compiles only the
// client it uses. Create one value per process and give it to both the
// capture plugin and the relays.
//
// A cross-process listener that loses its link — the connection drops, or
// stays open and passes nothing, which its health check finds — tells its
// relays to poll (every PollWhileDown, and once more when it is back)
// while it reconnects with back-off; a listener that fails soon after it
// subscribed counts as failing again, so the back-off keeps growing and
// the fifth failure in a row is logged as an ERROR.
package wakeup
