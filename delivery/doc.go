// Package delivery is where the relay hands events over: the Delivery and
// BatchDelivery interfaces, the Func adapter for a Go function, the Router
// that picks a delivery by topic, and the helpers every transport uses to
// turn an event into a message body, headers and a key.
//
// Transports live in subpackages — delivery/kafka (franz-go),
// delivery/redisstream (go-redis), delivery/webhook (net/http) and
// delivery/amqp (amqp091-go) — so their client libraries stay out of the
// build of services that do not import them.
//
// Every transport sends the event's JSON payload as the body (Body) and the
// event's headers plus its id, topic, sequence, ordering key and tenant
// (HeaderEventID, HeaderTopic, HeaderSequence, HeaderOrderingKey,
// HeaderTenant) as message headers (Headers), herald's values winning over
// an event header of the same name in any case: a consumer de-duplicates
// on the id, orders a key's messages on the sequence and routes a
// tenant's messages with no herald code.
//
// Header values are strings (envelope.Message.Headers is a
// map[string]string), not any JSON value: every transport's header is a
// string or bytes (HTTP, NATS, Kafka record headers, Redis stream fields,
// watermill metadata) and a typed value would reach consumers in a
// different form on each. Put structured data in the payload, or encode it
// yourself (JSON text) into one header. Transports
// that have a message key use the ordering key (Key), so one key stays in
// one partition.
//
// A broker orders messages within one destination (a Kafka topic's
// partition, a Redis stream, a queue) only, so every event of one ordering
// key must reach one destination. The transports' destination functions
// (kafka.Config.TopicFunc, redisstream.Config.StreamFunc,
// amqp.Config.RoutingKeyFunc) default to ByAggregate: the topic less its
// operation, so a captured row's events — "shop.order.inserted",
// "shop.order.updated", "shop.order.deleted" at the default topic
// template — share the destination "shop.order". ByTopic keeps a
// destination per topic; a function of your own routes by aggregate as
// Debezium's outbox router does, and must give one answer per key.
//
// A failure retrying cannot mend — an event no route accepts, a
// destination function that gives none — is marked Permanent, and the
// relay dead-letters its event at the first attempt.
//
// Guarantee: a Delivery reports success (a nil error) only for an event it
// has handed over; anything else — an error, a panic, a timeout, an event no
// route accepts — leaves the event unpublished: retried later, or
// dead-lettered (at once for a Permanent failure) until RetryDeadLettered.
package delivery
