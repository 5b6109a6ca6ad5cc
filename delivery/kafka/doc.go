// Package kafka delivers herald events to Kafka with franz-go.
//
// Each event becomes one record: to Config.Topic, or to Config.TopicFunc's
// answer, by default delivery.ByAggregate — the event's topic less its
// operation, so a captured row's "shop.order.inserted" and
// "shop.order.updated" both go to the Kafka topic "shop.order"; the
// ordering key as the record key, so the events of one key stay in one
// partition and keep their order; the JSON payload as the value; the
// event's headers plus herald-event-id, herald-topic, herald-sequence and
// herald-ordering-key as record headers, so a consumer de-duplicates on
// the id and orders on the sequence with no herald code. The Delivery is a
// delivery.BatchDelivery: a relay's batch is produced at once — acks from
// all in-sync replicas, the idempotent producer — and each record's result
// is mapped back to its event, so one refused record fails only its event.
//
// The delivery takes a ready *kgo.Client (and never closes it) or builds
// one from seed brokers (and flushes and closes it in Close).
//
// Events of one ordering key reach one partition only if TopicFunc maps
// them all to one Kafka topic: ByAggregate does for captured events at the
// default topic template; give your own function (as Debezium's outbox
// router routes by aggregate) when a key spans topics that differ
// otherwise.
//
// Failures stay with their event and come fast. A record over the topic's
// max.message.bytes makes Kafka refuse its whole partition batch; the
// refused records are produced again one by one, so only the oversized
// one fails (MESSAGE_TOO_LARGE). With a client the delivery built, a
// cluster none of whose brokers can be reached fails the batch once every
// connection attempt has failed for UnreachableAfter (2 s), with the
// dial's error — "dial tcp 127.0.0.1:9092: connect: connection refused" —
// not after the relay's DeliveryTimeout with a bare "context deadline
// exceeded"; a ready client waits for the context. An empty batch returns
// at once.
//
// Guarantee: Deliver returns nil only for an event whose record Kafka
// acknowledged; a record still unacknowledged when the relay's delivery
// timeout ends fails its event, which is then produced again (receivers
// de-duplicate on herald-event-id).
package kafka
