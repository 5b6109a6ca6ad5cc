// Package delivery is where the relay hands events over: the [Delivery]
// and [BatchDelivery] interfaces, the [Func] adapter for a Go function, the
// [Router] that picks a delivery by topic, and the helpers every transport
// uses to turn an event into a message body, headers and a key.
//
//	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
//		return publish(ctx, e.Topic, e.Payload) // nil only once the event is handed over
//	})
//	r, err := relay.New(db, d, relay.Config{})
//
// # Guarantee
//
// A Delivery reports success (a nil error) only for an event it has handed
// over. Anything else (an error, a panic, a timeout, an event no route
// accepts) leaves the event unpublished: retried later, or dead-lettered
// (at once for a [Permanent] failure) until relay's RetryDeadLettered.
//
// # Transports
//
// Transports live in subpackages, each a module of its own:
// delivery/kafka (franz-go), delivery/redisstream (go-redis),
// delivery/amqp (amqp091-go), delivery/nats, delivery/river,
// delivery/watermill, and delivery/webhook (net/http) in this module. Their
// client libraries stay out of the build of services that do not import
// them.
//
// # Messages
//
// Every transport sends the event's JSON payload as the body ([Body]) and
// the event's headers plus its id, topic, sequence, ordering key and
// tenant ([HeaderEventID], [HeaderTopic], [HeaderSequence],
// [HeaderOrderingKey], [HeaderTenant]) as message headers ([Headers]).
// herald's values win over an event header of the same name. A consumer
// de-duplicates on the id, orders a key's messages on the sequence and
// routes a tenant's messages with no herald code. Transports that have a
// message key use the ordering key ([Key]), so one key stays in one
// partition.
//
// Header values are strings (envelope.Message.Headers is a
// map[string]string), not any JSON value: every transport's header is a
// string or bytes (HTTP, NATS, Kafka record headers, Redis stream fields,
// Watermill metadata), and a typed value would reach consumers in a
// different form on each. Put structured data in the payload, or encode it
// yourself (JSON text) into one header.
//
// # Destinations and order
//
// A broker orders messages within one destination (a Kafka topic's
// partition, a Redis stream, a queue) only, so every event of one ordering
// key must reach one destination. The transports' destination functions
// (kafka.Config.TopicFunc, redisstream.Config.StreamFunc,
// amqp.Config.RoutingKeyFunc) default to [ByAggregate]: the topic less its
// operation, so a captured row's events ("shop.order.inserted",
// "shop.order.updated", "shop.order.deleted" at the default topic
// template) share the destination "shop.order". [ByTopic] keeps a
// destination per topic. A function of your own routes by aggregate as
// Debezium's outbox router does, and must give one answer per key.
//
// # Failures
//
// A failure retrying cannot mend (an event no route accepts, a
// destination function that gives none) is marked [Permanent], and the
// relay dead-letters its event at the first attempt. A delivery that runs
// past the relay's DeliveryTimeout fails with a [*TimeoutError]; one that
// panics, with a [*PanicError].
//
// # Deliveries in the relay's transaction
//
// A [TxDelivery] (delivery/river's) writes its events in the relay's own
// transaction, the one that marks them published: its writes exist exactly
// when their events are marked, exactly once. A Router whose every route
// is one is one too ([AsTx]).
package delivery
