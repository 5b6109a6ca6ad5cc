// Package otelherald reports what herald's relays do as OpenTelemetry
// metrics, and carries traces from the writes that make events to the
// consumers that receive them. It is a package of its own so that
// herald's core imports no OpenTelemetry.
//
// A *Metrics is a relay.Observer (and relay.PollObserver): put it in
// relay.Config.Observer, and register a relay's backlog gauges with
// ObserveBacklog.
//
//	m, err := otelherald.New(otelherald.Config{MeterProvider: provider})
//	if err != nil { … }
//	r, err := relay.New(db, d, relay.Config{Name: "relay-1", Observer: m})
//	if err != nil { … }
//	stop, err := m.ObserveBacklog(r)
//
// # Instruments
//
// Named after OpenTelemetry's messaging semantic conventions where one
// fits, herald.* where none does. Every instrument carries
// messaging.system (Config.System, "herald" by default) and
// herald.relay.name; per-event ones carry messaging.destination.name (the
// event's topic).
//
//	messaging.client.sent.messages       counter {message}   each delivery: without error.type when accepted, with error.type when it failed (retried or dead-lettered)
//	herald.events.dead_lettered          counter {event}     events dead-lettered (out of attempts, or a permanent failure), with error.type
//	herald.delivery.delay                histogram s         from the event's commit (created_at) to its delivery
//	messaging.client.operation.duration  histogram s         delivering one leased batch (messaging.operation.name "send")
//	herald.relay.poll.duration           histogram s         one poll: lease, delivery, marks
//	herald.relay.lease.duration          histogram s         the lease statement
//	herald.relay.poll.events             histogram {event}   events a poll leased (0 for an empty lease)
//	herald.backlog.pending               gauge {event}       pending events by topic (due, waiting to retry, leased)
//	herald.backlog.oldest_pending_age    gauge s             age of the oldest pending event by topic, by the database's clock
//	herald.backlog.dead_lettered         gauge {event}       dead-lettered events by topic
//	herald.backlog.paused                gauge {topic}       1 for a paused topic, 0 once resumed, by topic
//
// With Config.TracerProvider each poll is also a span, "herald.relay.poll".
//
// error.type is "permanent" (delivery.ErrPermanent), "decode" (a row the
// relay could not decode, *relay.DecodeError), "timeout" (the delivery's
// context ran out) or "_OTHER".
//
// The backlog gauges come from relay.BacklogByTopic: one statement for all
// topics, run when the meter collects and at most once per
// Config.BacklogInterval (its result is kept meanwhile), so a scrape every
// few seconds does not query the database every few seconds.
//
// # Traces
//
// RecordTraceContext, in the writing service, installs
// envelope.SetContextHeaders with a propagator: every herald write
// (captured GORM and ent writes, also those fused into one statement with
// their row, Enqueue, envelope.Writer.Write) records the trace context of
// its ctx in its events' headers — traceparent and tracestate for W3C
// Trace Context — where the message does not set them.
//
//	defer otelherald.RecordTraceContext(nil)() // in the writing service: nil = the global propagator
//
// Delivery, in the relay, wraps a delivery.Delivery (a BatchDelivery stays
// one) so that every event is sent in a span: kind producer, named
// "<topic> send", the child of the writer's context extracted from the
// event's headers (or, with TraceConfig.Link, a root linked to it), with
// messaging.system, messaging.destination.name, messaging.message.id (the
// event id) and messaging.operation.name "send"; a failed delivery ends
// it with status Error, the error recorded and error.type. The span's
// context (with the writer's baggage) replaces the writer's in the
// headers the wrapped delivery is given, and every transport of herald sends an event's headers on (Kafka
// record headers, AMQP headers, HTTP request headers, the headers field of
// a Redis stream entry), so a consumer that extracts traceparent with the
// propagator continues the trace:
//
//	r, err := relay.New(db, otelherald.Delivery(d, otelherald.TraceConfig{System: "kafka"}), relay.Config{…})
package otelherald

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/relay"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/heraldgo/herald/otelherald"

// DefaultBacklogInterval is how long a backlog reading is kept.
const DefaultBacklogInterval = 15 * time.Second

// Config configures Metrics. The zero value uses the global MeterProvider.
type Config struct {
	// MeterProvider makes the meter; nil = otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// System is the messaging.system attribute: the system the relay
	// delivers to ("kafka", "rabbitmq", …); "" = "herald".
	System string
	// BacklogInterval is the longest a backlog reading is kept before the
	// next collection reads it again; 0 = DefaultBacklogInterval.
	BacklogInterval time.Duration
	// BacklogTimeout bounds one backlog reading; 0 = 5 s.
	BacklogTimeout time.Duration
	// TracerProvider, when set, records each poll of a relay as a span
	// named "herald.relay.poll" (kind internal; herald.relay.name,
	// messaging.system, herald.relay.poll.events; status Error and
	// error.type for a failed poll), started and ended at the poll's own
	// times. nil = no poll spans: a relay polls every few hundred
	// milliseconds when idle, and most tracing backends would rather not
	// keep those.
	TracerProvider trace.TracerProvider
}

// Metrics records a relay's deliveries, polls and backlog.
type Metrics struct {
	cfg    Config
	meter  metric.Meter
	system attribute.KeyValue

	sent, dead                  metric.Int64Counter
	delay, sendDur, poll, lease metric.Float64Histogram
	events                      metric.Int64Histogram
	pending, deadGauge, paused  metric.Int64ObservableGauge
	oldest                      metric.Float64ObservableGauge
	tracer                      trace.Tracer // nil without Config.TracerProvider
}

var _ relay.PollObserver = (*Metrics)(nil)

// secondsBuckets are the histograms' bucket boundaries in seconds, from
// a millisecond (a relay woken at commit) to ten minutes (a backlog).
var secondsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// New creates the instruments.
func New(cfg Config) (*Metrics, error) {
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.System == "" {
		cfg.System = "herald"
	}
	if cfg.BacklogInterval < 0 || cfg.BacklogTimeout < 0 {
		return nil, &envelope.Error{Kind: envelope.ErrConfiguration, Where: "otelherald.Config",
			Msg: fmt.Sprintf("BacklogInterval (%s) and BacklogTimeout (%s) must not be negative", cfg.BacklogInterval, cfg.BacklogTimeout)}
	}
	if cfg.BacklogInterval == 0 {
		cfg.BacklogInterval = DefaultBacklogInterval
	}
	if cfg.BacklogTimeout == 0 {
		cfg.BacklogTimeout = 5 * time.Second
	}
	m := &Metrics{cfg: cfg, meter: cfg.MeterProvider.Meter(ScopeName), system: attribute.String("messaging.system", cfg.System)}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.sent, err = m.meter.Int64Counter("messaging.client.sent.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries of events: without error.type when accepted, with it when the delivery failed."))
	add(err)
	m.dead, err = m.meter.Int64Counter("herald.events.dead_lettered", metric.WithUnit("{event}"),
		metric.WithDescription("Events dead-lettered: out of attempts, or failed permanently."))
	add(err)
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(secondsBuckets...))
		add(err)
		return h
	}
	m.delay = seconds("herald.delivery.delay", "From an event's commit (created_at) to its delivery.")
	m.sendDur = seconds("messaging.client.operation.duration", "Delivering one leased batch.")
	m.poll = seconds("herald.relay.poll.duration", "One poll of a relay: lease, delivery and marks.")
	m.lease = seconds("herald.relay.lease.duration", "A relay's lease statement.")
	m.events, err = m.meter.Int64Histogram("herald.relay.poll.events", metric.WithUnit("{event}"),
		metric.WithDescription("Events a poll leased."),
		metric.WithExplicitBucketBoundaries(0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000))
	add(err)
	m.pending, err = m.meter.Int64ObservableGauge("herald.backlog.pending", metric.WithUnit("{event}"),
		metric.WithDescription("Pending events (due, waiting to retry, leased), by topic."))
	add(err)
	m.deadGauge, err = m.meter.Int64ObservableGauge("herald.backlog.dead_lettered", metric.WithUnit("{event}"),
		metric.WithDescription("Dead-lettered events, by topic."))
	add(err)
	m.paused, err = m.meter.Int64ObservableGauge("herald.backlog.paused", metric.WithUnit("{topic}"),
		metric.WithDescription("1 for a paused topic (no relay of the table leases its events), 0 once resumed, by topic."))
	add(err)
	m.oldest, err = m.meter.Float64ObservableGauge("herald.backlog.oldest_pending_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest pending event, by topic, by the database's clock."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelherald: creating instruments: %w", err)
	}
	if cfg.TracerProvider != nil {
		m.tracer = cfg.TracerProvider.Tracer(ScopeName)
	}
	return m, nil
}

func (m *Metrics) eventAttrs(relayName string, e *envelope.Event, errType string) metric.MeasurementOption {
	kv := []attribute.KeyValue{m.system, attribute.String("herald.relay.name", relayName),
		attribute.String("messaging.destination.name", e.Topic), attribute.String("messaging.operation.name", "send")}
	if errType != "" {
		kv = append(kv, attribute.String("error.type", errType))
	}
	return metric.WithAttributes(kv...)
}

// ErrorType is the error.type attribute of a failed delivery.
func ErrorType(err error) string {
	var de *relay.DecodeError
	switch {
	case errors.As(err, &de):
		return "decode"
	case errors.Is(err, delivery.ErrPermanent):
		return "permanent"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "_OTHER"
	}
}

// Delivered counts a delivery and records its delay.
func (m *Metrics) Delivered(ctx context.Context, d relay.Delivered) {
	attrs := m.eventAttrs(d.Relay, d.Event, "")
	m.sent.Add(ctx, 1, attrs)
	m.delay.Record(ctx, max(0, d.Delay.Seconds()), attrs)
}

// Failed counts a failed delivery that will be tried again.
func (m *Metrics) Failed(ctx context.Context, f relay.Failed) {
	m.sent.Add(ctx, 1, m.eventAttrs(f.Relay, f.Event, ErrorType(f.Err)))
}

// DeadLettered counts a failed delivery and a dead letter.
func (m *Metrics) DeadLettered(ctx context.Context, d relay.DeadLettered) {
	attrs := m.eventAttrs(d.Relay, d.Event, ErrorType(d.Err))
	m.sent.Add(ctx, 1, attrs)
	m.dead.Add(ctx, 1, attrs)
}

// Polled records a poll's durations and size.
func (m *Metrics) Polled(ctx context.Context, p relay.Poll) {
	kv := []attribute.KeyValue{m.system, attribute.String("herald.relay.name", p.Relay)}
	if p.Err != nil {
		kv = append(kv, attribute.String("error.type", ErrorType(p.Err)))
	}
	attrs := metric.WithAttributes(kv...)
	m.poll.Record(ctx, p.Duration.Seconds(), attrs)
	m.lease.Record(ctx, p.Lease.Seconds(), attrs)
	m.events.Record(ctx, int64(p.Leased), attrs)
	if p.Leased > 0 {
		// No messaging.batch.message_count: an attribute per batch size
		// would make a series per size; herald.relay.poll.events has the
		// sizes.
		m.sendDur.Record(ctx, p.Deliver.Seconds(), metric.WithAttributes(m.system, attribute.String("herald.relay.name", p.Relay),
			attribute.String("messaging.operation.name", "send")))
	}
	if m.tracer != nil {
		end := time.Now()
		_, span := m.tracer.Start(ctx, "herald.relay.poll", trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(end.Add(-p.Duration)), trace.WithAttributes(m.system,
				attribute.String("herald.relay.name", p.Relay), attribute.Int("herald.relay.poll.events", p.Leased)))
		if p.Err != nil {
			span.RecordError(p.Err)
			span.SetStatus(codes.Error, p.Err.Error())
			span.SetAttributes(attribute.String("error.type", ErrorType(p.Err)))
		}
		span.End(trace.WithTimestamp(end))
	}
}

// Backlogger is what ObserveBacklog reads: a *relay.Relay.
type Backlogger interface {
	Name() string
	BacklogByTopic(ctx context.Context) ([]relay.TopicBacklog, error)
}

// ObserveBacklog registers r's backlog gauges, by topic. The returned
// function unregisters them. A reading that fails keeps the last good one
// for the gauges and is returned to the SDK (which reports it to the
// global error handler).
func (m *Metrics) ObserveBacklog(r Backlogger) (unregister func() error, err error) {
	if r == nil {
		return nil, &envelope.Error{Kind: envelope.ErrConfiguration, Where: "otelherald.ObserveBacklog", Msg: "the relay is nil"}
	}
	var (
		mu   sync.Mutex
		last []relay.TopicBacklog
		at   time.Time
		seen = map[string]bool{} // topics reported once: 0 once they drain, not a series that vanishes
	)
	name := attribute.String("herald.relay.name", r.Name())
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		var readErr error
		if at.IsZero() || time.Since(at) >= m.cfg.BacklogInterval {
			ctx, cancel := context.WithTimeout(ctx, m.cfg.BacklogTimeout)
			b, err := r.BacklogByTopic(ctx)
			cancel()
			if err != nil {
				readErr = fmt.Errorf("otelherald: backlog of relay %q: %w", r.Name(), err)
			} else {
				last, at = b, time.Now()
			}
		}
		now := make(map[string]bool, len(last))
		observe := func(t relay.TopicBacklog) {
			attrs := metric.WithAttributes(m.system, name, attribute.String("messaging.destination.name", t.Topic))
			o.ObserveInt64(m.pending, t.Pending, attrs)
			o.ObserveInt64(m.deadGauge, t.DeadLettered, attrs)
			o.ObserveFloat64(m.oldest, t.OldestPendingAge.Seconds(), attrs)
			var paused int64
			if t.Paused {
				paused = 1
			}
			o.ObserveInt64(m.paused, paused, attrs)
		}
		for _, t := range last {
			now[t.Topic], seen[t.Topic] = true, true
			observe(t)
		}
		for topic := range seen {
			if !now[topic] {
				observe(relay.TopicBacklog{Topic: topic})
			}
		}
		return readErr
	}, m.pending, m.deadGauge, m.oldest, m.paused)
	if err != nil {
		return nil, fmt.Errorf("otelherald: registering the backlog gauges: %w", err)
	}
	return reg.Unregister, nil
}
