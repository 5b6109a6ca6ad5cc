package river_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/heraldgo/herald/delivery"
	heraldriver "github.com/heraldgo/herald/delivery/river"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverytest"
	"github.com/heraldgo/herald/otelherald"
)

// TestTracedExactlyOnceThroughRelay: wrappers keep River's delivery in the
// relay's mark transaction. Each job row's xmin (the transaction that
// inserted it) equals its outbox row's (the transaction that marked it)
// for a traced River delivery, a Router of traced ones and a traced
// Router; a Router with a plain route is no TxDelivery, and its jobs are
// inserted outside the mark — which shows the check tells the two apart.
func TestTracedExactlyOnceThroughRelay(t *testing.T) {
	t.Parallel()
	const events = 60
	for _, tc := range []struct {
		name   string
		build  func(rd delivery.Delivery, tc otelherald.TraceConfig) delivery.Delivery
		inMark bool
	}{
		{"traced", func(rd delivery.Delivery, c otelherald.TraceConfig) delivery.Delivery {
			return otelherald.Delivery(rd, c)
		}, true},
		{"router of traced", func(rd delivery.Delivery, c otelherald.TraceConfig) delivery.Delivery {
			r, err := delivery.Router(map[string]delivery.Delivery{"a.*": otelherald.Delivery(rd, c), "b.*": otelherald.Delivery(rd, c)}, nil)
			if err != nil {
				panic(err)
			}
			return r
		}, true},
		{"traced router", func(rd delivery.Delivery, c otelherald.TraceConfig) delivery.Delivery {
			r, err := delivery.Router(map[string]delivery.Delivery{"a.*": rd, "b.*": rd}, nil)
			if err != nil {
				panic(err)
			}
			return otelherald.Delivery(r, c)
		}, true},
		{"mixed router", func(rd delivery.Delivery, _ otelherald.TraceConfig) delivery.Delivery {
			r, err := delivery.Router(map[string]delivery.Delivery{"a.*": rd, "b.*": delivery.Func(func(context.Context, *envelope.Event) error { return nil })}, rd)
			if err != nil {
				panic(err)
			}
			return r
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, _ := deliverytestDB(t)
			migrate(t, db)
			w, err := envelope.NewWriter(envelope.Postgres, "")
			if err != nil {
				t.Fatal(err)
			}
			env := &deliverytest.Env{DB: db, W: w}
			rd, err := heraldriver.New(heraldriver.Config{Client: insertClient(t, db, ""), Args: jobOf})
			if err != nil {
				t.Fatal(err)
			}
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			d := tc.build(rd, otelherald.TraceConfig{TracerProvider: tp, System: "river"})
			if _, ok := delivery.AsTx(d); ok != tc.inMark {
				t.Fatalf("AsTx: %v, want %v", ok, tc.inMark)
			}
			ms := make([]envelope.Message, events)
			for i := range ms {
				topic := "a.order.inserted"
				if i%2 == 1 {
					topic = "c.order.inserted" // the fallback in the mixed router: River too
					if tc.inMark {
						topic = "b.order.inserted"
					}
				}
				ms[i] = envelope.Message{Topic: topic, OrderingKey: fmt.Sprintf("k%d", i%7), Payload: i}
			}
			env.Write(t, ms...)
			env.StartRelay(t, d, deliverytest.RelayConfig())
			env.WaitPublished(t, time.Minute)
			jobsN := count(t, db, `SELECT count(*) FROM river_job`)
			same := count(t, db, `SELECT count(*) FROM river_job j JOIN herald_outbox o ON o.id::text = j.args->>'event_id' WHERE j.xmin = o.xmin`)
			if jobsN != events {
				t.Fatalf("%d jobs for %d events", jobsN, events)
			}
			if tc.inMark && same != events {
				t.Fatalf("%d of %d jobs inserted by their event's mark transaction; want all", same, events)
			}
			if !tc.inMark && same != 0 {
				t.Fatalf("%d jobs of a mixed router inserted by the mark transaction; want none", same)
			}
			if tc.name != "mixed router" && len(spans.Ended()) < events {
				t.Fatalf("%d spans for %d events", len(spans.Ended()), events)
			}
		})
	}
}
