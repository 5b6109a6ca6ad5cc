package otelherald

import (
	"context"
	"database/sql"
	"maps"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverycall"
)

// RecordTraceContext makes every herald writer of the process record the
// trace context of a write's ctx in the headers of the events it inserts
// (traceparent and tracestate for W3C Trace Context): captured writes of
// gormcapture and entcapture, Enqueue, envelope.Writer.Write. p is the
// propagator; nil = otel.GetTextMapPropagator() at each write (so one set
// later with otel.SetTextMapPropagator is used). A header the event's
// message sets itself wins. It returns a function that removes the hook.
//
// A ctx without a span (or a propagator that injects nothing — the
// global one until otel.SetTextMapPropagator is called) adds nothing.
func RecordTraceContext(p propagation.TextMapPropagator) (restore func()) {
	return envelope.SetContextHeaders(func(ctx context.Context) map[string]string {
		prop := p
		if prop == nil {
			prop = otel.GetTextMapPropagator()
		}
		c := propagation.MapCarrier{}
		prop.Inject(ctx, c)
		return c
	})
}

// TraceConfig configures Delivery's spans. The zero value uses the global
// TracerProvider and propagator.
type TraceConfig struct {
	// TracerProvider makes the tracer; nil = otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator extracts the writer's context from an event's headers and
	// injects the span's; nil = otel.GetTextMapPropagator().
	Propagator propagation.TextMapPropagator
	// System is the messaging.system attribute; "" = "herald".
	System string
	// Link makes each span a root linked to the writer's context instead
	// of its child (a new trace per delivery). With it false (the default)
	// the request that wrote the event, its delivery and the consumer are
	// one trace.
	Link bool
}

// Delivery wraps d so that each event it delivers has a span: kind
// producer, named "<topic> send", the child of the writer's context found
// in the event's headers (see RecordTraceContext; or linked to it, with
// TraceConfig.Link), with messaging.system, messaging.destination.name
// (the topic), messaging.message.id (the event id) and
// messaging.operation.name "send". The span's context replaces the
// writer's in the headers d is given — every transport of package
// delivery sends an event's headers on (Kafka record headers, AMQP
// headers, HTTP request headers, Redis stream fields), so a consumer that
// extracts traceparent continues the trace from this span. The span ends
// with d's result: status Error and the error recorded when it failed.
//
// d is given a copy of each event with its own headers; the relay's event
// is not changed. When d is a delivery.BatchDelivery, so is the result:
// one span per event of a batch, one DeliverBatch call. When d is a
// delivery.TxDelivery (delivery.AsTx: a River delivery, a Router of them),
// so is the result: its writes stay in the relay's mark transaction,
// exactly once.
func Delivery(d delivery.Delivery, cfg TraceConfig) delivery.Delivery {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.System == "" {
		cfg.System = "herald"
	}
	t := &tracing{d: d, cfg: cfg, tracer: cfg.TracerProvider.Tracer(ScopeName)}
	if td, ok := delivery.AsTx(d); ok {
		return &txTracing{tracing: t, td: td}
	}
	if b, ok := d.(delivery.BatchDelivery); ok {
		return &batchTracing{tracing: t, b: b}
	}
	return t
}

type tracing struct {
	d      delivery.Delivery
	cfg    TraceConfig
	tracer trace.Tracer
}

type batchTracing struct {
	*tracing
	b delivery.BatchDelivery
}

var (
	_ delivery.Delivery      = (*tracing)(nil)
	_ delivery.BatchDelivery = (*batchTracing)(nil)
)

func (t *tracing) propagator() propagation.TextMapPropagator {
	if t.cfg.Propagator != nil {
		return t.cfg.Propagator
	}
	return otel.GetTextMapPropagator()
}

// start starts e's span and returns the copy of e to deliver.
func (t *tracing) start(ctx context.Context, e *envelope.Event) (context.Context, trace.Span, *envelope.Event) {
	p := t.propagator()
	writer := p.Extract(context.Background(), propagation.MapCarrier(e.Headers))
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.system", t.cfg.System),
		attribute.String("messaging.destination.name", e.Topic),
		attribute.String("messaging.message.id", e.ID.String()),
		attribute.String("messaging.operation.name", "send"),
		attribute.String("messaging.operation.type", "send"),
	)}
	// The writer's baggage goes on with the span's context.
	parent := baggage.ContextWithBaggage(ctx, baggage.FromContext(writer))
	if sc := trace.SpanContextFromContext(writer); sc.IsValid() {
		if t.cfg.Link {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}), trace.WithNewRoot())
		} else {
			parent = trace.ContextWithRemoteSpanContext(parent, sc)
		}
	}
	ctx, span := t.tracer.Start(parent, e.Topic+" send", opts...)
	ec := *e
	ec.Headers = maps.Clone(e.Headers)
	if ec.Headers == nil {
		ec.Headers = map[string]string{}
	}
	// The writer's tracestate must not be sent on beside this span's
	// traceparent unless the propagator sets it again (baggage is, from
	// parent).
	for _, f := range p.Fields() {
		delete(ec.Headers, f)
	}
	p.Inject(ctx, propagation.MapCarrier(ec.Headers))
	return ctx, span, &ec
}

func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attribute.String("error.type", ErrorType(err)))
	}
	span.End()
}

// Deliver delivers e in its span.
func (t *tracing) Deliver(ctx context.Context, e *envelope.Event) error {
	ctx, span, ec := t.start(ctx, e)
	err := deliverycall.Call(ctx, t.d, ec)
	end(span, err)
	return err
}

// Close closes the wrapped delivery.
func (t *tracing) Close() error { return t.d.Close() }

// DeliverBatch delivers es in one call of the wrapped DeliverBatch, each
// event in its span.
func (t *batchTracing) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	spans := make([]trace.Span, len(es))
	cs := make([]*envelope.Event, len(es))
	for i, e := range es {
		_, spans[i], cs[i] = t.start(ctx, e)
	}
	errs := deliverycall.CallBatch(ctx, t.b, cs)
	for i, s := range spans {
		end(s, errs[i])
	}
	return errs
}

// txTracing traces a TxDelivery and stays one.
type txTracing struct {
	*tracing
	td delivery.TxDelivery
}

var _ delivery.TxDelivery = (*txTracing)(nil)

// DeliverTx delivers es in one call of the wrapped DeliverTx, each event
// in its span.
func (t *txTracing) DeliverTx(ctx context.Context, tx *sql.Tx, es []*envelope.Event) []error {
	spans := make([]trace.Span, len(es))
	cs := make([]*envelope.Event, len(es))
	for i, e := range es {
		_, spans[i], cs[i] = t.start(ctx, e)
	}
	errs := deliverycall.CallTx(ctx, t.td, tx, cs)
	for i, s := range spans {
		end(s, errs[i])
	}
	return errs
}
