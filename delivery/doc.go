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
// event's headers plus its id and topic (HeaderEventID, HeaderTopic) as
// message headers (Headers); transports that have a message key use the
// ordering key (Key), so one key stays in one partition.
//
// Guarantee: a Delivery reports success (a nil error) only for an event it
// has handed over; anything else — an error, a panic, a timeout, an event no
// route accepts — leaves the event to be delivered again.
package delivery
