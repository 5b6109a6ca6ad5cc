// Package amqp delivers herald events to RabbitMQ with amqp091-go.
//
// Each event is one persistent message, published to an existing exchange
// (Config.Exchange; "" = the default exchange) with Config.RoutingKey or
// Config.RoutingKeyFunc's answer as routing key, by default
// delivery.ByAggregate — the event's topic less its operation, so a
// captured row's "shop.order.inserted" and "shop.order.updated" share the
// routing key "shop.order" (on the default exchange, the queue
// "shop.order") and a queue holds them in sequence order — the JSON
// payload as body, the event id as message id, and the event's headers
// plus herald-event-id, herald-topic, herald-sequence and
// herald-ordering-key as headers. The Delivery
// is a delivery.BatchDelivery: a relay's batch is published on one channel
// in confirm mode and the broker's confirmations are awaited for the whole
// batch; an event succeeds only when its message is confirmed. A lost
// connection or channel is re-opened on the next call.
//
// The broker drops a message its exchange cannot route (no binding
// matches) — what pub/sub wants when nobody subscribes to a topic. With
// Config.Mandatory such a message is returned instead, and its event
// fails.
//
// Failures stay with their event. A routing key or header name longer
// than AMQP's 255-byte short string fails its event alone (ErrDelivery, at
// every attempt, until it dead-letters); the rest of the batch is
// published. Every write to the broker ends with the batch's context: a
// broker that stops reading (RabbitMQ's memory or disk alarm) or a dead
// link holds a batch only until the relay's DeliveryTimeout, and a batch
// that fails on its context closes its socket at once instead of waiting
// for a close-ok. Close waits at most 2 s for the broker's close-ok.
//
// Guarantee: Deliver returns nil only for an event whose message the
// broker confirmed; anything else fails the event, which is published
// again (consumers de-duplicate on the message id or herald-event-id).
package amqp
