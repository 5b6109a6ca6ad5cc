// Package nats delivers herald events to NATS JetStream (nats.go).
//
// Each event is one message to Config.Subject, or to Config.SubjectFunc's
// answer, by default delivery.ByAggregate — the event's topic less its
// operation, so a captured row's "shop.order.inserted" and
// "shop.order.updated" share the subject "shop.order", and a stream that
// holds it stores them in sequence order. The data is the JSON payload as
// stored; the headers are the event's plus herald-event-id, herald-topic,
// herald-sequence and herald-ordering-key (delivery.Headers) and
// Nats-Msg-Id, the event id: JetStream's own de-duplication drops a
// redelivery of the event within the stream's duplicate window (two
// minutes by default), so a relay retrying after a lost acknowledgement
// stores it once. Config.Stream adds Nats-Expected-Stream, so a publish
// that another stream (or none) would take is refused.
//
// The Delivery is a delivery.BatchDelivery: a relay's batch is published
// at once with PublishMsgAsync, then every acknowledgement is awaited
// within the batch's context (the relay's DeliveryTimeout); an event
// counts as delivered only once JetStream acknowledged it. A connection
// built from Config.URL reconnects forever and keeps no reconnect buffer:
// while it is disconnected a batch fails at once and the relay retries it
// later. A subject that cannot be published to (empty, white space, an
// empty token, a wildcard) is a Permanent failure: the event is
// dead-lettered at once.
//
// A stream must hold the subjects (create it with the nats CLI or
// jetstream.CreateStream): a publish to a subject no stream holds fails
// ("no responders"), and the relay retries it.
//
// Guarantee: Deliver returns nil only for an event JetStream
// acknowledged as stored (or as a duplicate of one stored). A relay hands
// over the next event of a key only after the one before it was
// acknowledged, so a stream holds each key's events in order — provided
// every event of the key goes to one subject's stream, as ByAggregate
// sends a captured row's.
package nats
