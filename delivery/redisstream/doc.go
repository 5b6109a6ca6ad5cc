// Package redisstream delivers herald events to Redis streams with
// go-redis.
//
// Each event is one XADD to Config.Stream, or to Config.StreamFunc's
// answer, by default delivery.ByAggregate — the event's topic less its
// operation, so a captured row's "shop.order.inserted" and
// "shop.order.updated" share the stream "shop.order" — with the fields
// id, topic, sequence, ordering_key, headers (a JSON object: the event's
// headers plus herald-event-id, herald-topic, herald-sequence and
// herald-ordering-key) and payload (the JSON payload as stored): a
// consumer using XRANGE or XREADGROUP alone de-duplicates on id and orders
// a key's entries on sequence. Config.MaxLen trims each stream with
// MAXLEN ~. The Delivery is
// a delivery.BatchDelivery: a relay's batch goes in one pipeline — one
// round trip — and each entry's result is mapped back to its event.
//
// The delivery takes a ready client (and never closes it) or builds one
// from a URL (and closes it in Close); a client it builds honours the
// context's deadline (go-redis's ContextTimeoutEnabled), so a batch ends
// with the relay's DeliveryTimeout — give a ready client the same option.
//
// An XADD counts as written only when Redis answered it with an entry id:
// a pipeline refused before it ran (a go-redis hook such as a circuit
// breaker or a rate limiter returning an error) fails every event of the
// batch with the hook's error.
//
// Guarantee: Deliver returns nil only for an event whose XADD Redis
// answered with an entry id. Entries are appended in batch order, and a
// relay hands over the next event of a key only after the one before it
// was appended, so a stream holds each key's events in order (an entry
// may repeat after a failure: consumers de-duplicate on the id field) —
// provided every event of the key goes to that stream, as ByAggregate
// sends a captured row's; a key whose topics differ otherwise needs a
// StreamFunc that gives them one stream.
package redisstream
