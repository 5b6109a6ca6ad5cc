package otelherald_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/otelherald"
)

type batchFunc struct {
	delivery.Func
	batch func(ctx context.Context, es []*envelope.Event) []error
}

func (b batchFunc) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	return b.batch(ctx, es)
}

// A failed delivery ends its span with status Error and the error
// recorded; with Link the span is a root linked to the writer's context;
// a batch gets one span per event; the writer's baggage goes on; the
// relay's event keeps its headers.
func TestDeliverySpans(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	wctx, writer := tp.Tracer("test").Start(baggage.ContextWithBaggage(context.Background(), bag), "write")
	writer.End()
	event := func(topic string) *envelope.Event {
		h := map[string]string{"x": "1"}
		prop.Inject(wctx, propagation.MapCarrier(h))
		return &envelope.Event{ID: uuid.New(), Topic: topic, Headers: h}
	}
	boom := errors.New("boom")
	var sent []map[string]string
	inner := batchFunc{
		Func: func(ctx context.Context, e *envelope.Event) error {
			sent = append(sent, e.Headers)
			if e.Topic == "bad" {
				return delivery.Permanent(boom)
			}
			return nil
		},
		batch: func(ctx context.Context, es []*envelope.Event) []error {
			errs := make([]error, len(es))
			for i, e := range es {
				sent = append(sent, e.Headers)
				if e.Topic == "bad" {
					errs[i] = boom
				}
			}
			return errs
		},
	}
	ctx := context.Background()
	d := otelherald.Delivery(inner, otelherald.TraceConfig{TracerProvider: tp, Propagator: prop, System: "test"}).(delivery.BatchDelivery)
	good, bad := event("good"), event("bad")
	before := good.Headers["traceparent"]
	if err := d.Deliver(ctx, good); err != nil {
		t.Fatal(err)
	}
	if err := d.Deliver(ctx, bad); !errors.Is(err, boom) {
		t.Fatalf("Deliver = %v", err)
	}
	if errs := d.DeliverBatch(ctx, []*envelope.Event{event("good"), event("bad")}); len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], boom) {
		t.Fatalf("DeliverBatch = %v", errs)
	}
	if good.Headers["traceparent"] != before || len(good.Headers) != 3 {
		t.Errorf("the relay's event was changed: %v", good.Headers)
	}
	linked := otelherald.Delivery(inner.Func, otelherald.TraceConfig{TracerProvider: tp, Propagator: prop, Link: true})
	if _, ok := linked.(delivery.BatchDelivery); ok {
		t.Error("Delivery of a plain Delivery is a BatchDelivery")
	}
	if err := linked.Deliver(ctx, event("good")); err != nil {
		t.Fatal(err)
	}

	spans := rec.Ended()[1:] // after "write"
	if len(spans) != 5 || len(sent) != 5 {
		t.Fatalf("%d spans, %d deliveries, want 5", len(spans), len(sent))
	}
	for i, s := range spans {
		if s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("span %d: kind %s", i, s.SpanKind())
		}
		sc := trace.SpanContextFromContext(prop.Extract(ctx, propagation.MapCarrier(sent[i])))
		if sc.SpanID() != s.SpanContext().SpanID() || sent[i]["x"] != "1" || sent[i]["baggage"] != "tenant=acme" {
			t.Errorf("span %d: the delivery got headers %v, not the span's context", i, sent[i])
		}
		failed := s.Name() == "bad send"
		if failed != (s.Status().Code == codes.Error) || failed != (len(s.Events()) == 1 && s.Events()[0].Name == "exception") {
			t.Errorf("span %d %q: status %v, events %v", i, s.Name(), s.Status(), s.Events())
		}
		if i < 4 && (s.Parent().SpanID() != writer.SpanContext().SpanID() || s.SpanContext().TraceID() != writer.SpanContext().TraceID()) {
			t.Errorf("span %d: parent %s, not the writer's", i, s.Parent().SpanID())
		}
	}
	l := spans[4]
	if l.Parent().IsValid() || len(l.Links()) != 1 || l.Links()[0].SpanContext.SpanID() != writer.SpanContext().SpanID() ||
		l.SpanContext().TraceID() == writer.SpanContext().TraceID() {
		t.Errorf("linked span: parent %v, links %v", l.Parent(), l.Links())
	}
}
