package otelherald_test

import (
	"context"
	"database/sql"
	"log"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/otelherald"
	"github.com/heraldgo/herald/relay"
)

// A relay's metrics through the OpenTelemetry SDK: the Metrics is the
// relay's Observer, and its backlog gauges are registered for the relay.
// Any reader or exporter of the SDK works (a periodic OTLP exporter, or
// the Prometheus exporter for a /metrics endpoint).
func Example() {
	ctx := context.Background()
	var (
		db *sql.DB           // the outbox's database
		d  delivery.Delivery // where the events go
	)
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = provider.Shutdown(ctx) }()

	m, err := otelherald.New(otelherald.Config{MeterProvider: provider, System: "kafka"})
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(db, d, relay.Config{Name: "relay-1", Observer: m})
	if err != nil {
		log.Fatal(err)
	}
	stop, err := m.ObserveBacklog(r) // herald.backlog.* by topic, one statement per BacklogInterval
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = stop() }()
	_ = r.Run(ctx)
}

// Traces from the request that wrote an event to the consumer that got
// it: RecordTraceContext puts the trace context of every write's ctx in
// its events' headers (traceparent, tracestate), and Delivery sends each
// event in a producer span, the child of that context, whose own context
// the transport carries on in the message's headers.
func ExampleDelivery() {
	ctx := context.Background()
	var (
		db *sql.DB           // the outbox's database
		d  delivery.Delivery // where the events go: Kafka, RabbitMQ, Redis, a webhook
	)
	tp := sdktrace.NewTracerProvider() // with the exporter of your choice
	defer func() { _ = tp.Shutdown(ctx) }()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	defer otelherald.RecordTraceContext(nil)() // in the writing service: nil = the global propagator
	traced := otelherald.Delivery(d, otelherald.TraceConfig{System: "kafka"})
	r, err := relay.New(db, traced, relay.Config{Name: "relay-1"})
	if err != nil {
		log.Fatal(err)
	}
	_ = r.Run(ctx)
}
