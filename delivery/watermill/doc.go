// Package watermill turns any Watermill message.Publisher into a herald
// delivery, so every backend Watermill supports — AMQP, Kafka (Sarama),
// NATS, Google Pub/Sub, SNS/SQS, SQL, the in-memory Go channel — is a
// herald delivery.
//
// Each event is one Watermill message: its UUID the event id (what
// receivers de-duplicate on), its payload the JSON payload as stored, its
// metadata the event's headers plus herald-event-id, herald-topic,
// herald-sequence and herald-ordering-key (delivery.Headers). The
// Watermill topic is Config.Topic, or Config.TopicFunc's answer, by
// default delivery.ByAggregate — the event's topic less its operation, so
// a captured row's events share one topic.
//
// The Delivery is a delivery.BatchDelivery: a relay's batch is published
// one Publish call per message, in batch order, so what was published
// before the batch's context ended counts even when the whole batch would
// not fit in the relay's DeliveryTimeout (watermill-amqp with
// ConfirmDelivery waits for each message's confirmation in turn);
// Config.PublishBatch makes it one call per topic instead, for publishers
// that send many messages in one request. An event counts as delivered
// when its Publish returned nil. Give watermill-amqp a channel pool
// (Publish.ChannelPoolSize): without one each Publish opens and closes an
// AMQP channel. What that promises is the
// publisher's: configure it to return only once the broker has the
// message (watermill-amqp's Publish.ConfirmDelivery, a synchronous Kafka
// producer). Order is the publisher's too: a relay hands over a key's
// next event only after Publish returned for the one before, which keeps
// the key's order in a publisher that has sent a message when Publish
// returns; Watermill's Go channel keeps it only with
// BlockPublishUntilSubscriberAck.
//
// Publish takes no context. A Publish still running when the relay's
// DeliveryTimeout ends fails its events and goes on in the background;
// the relay retries them, so a broker that was only slow may receive a
// message twice (receivers de-duplicate on the UUID).
//
//	pub, err := amqp.NewPublisher(amqpCfg, watermill.NopLogger{}) // watermill-amqp
//	d, err := watermilld.New(watermilld.Config{Publisher: pub})   // this package
//	r, err := relay.New(sqlDB, d, relay.Config{})
//
// The delivery owns the publisher: Close closes it.
package watermill
