package otelherald_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/otelherald"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func openDB(t *testing.T, d envelope.Dialect) *sql.DB {
	t.Helper()
	if d == envelope.Postgres {
		db, _ := testkit.Postgres(t)
		return db
	}
	db, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// collected is one collection's data points, by instrument name and
// destination (topic; "" for per-poll instruments).
type collected struct {
	sums   map[string]map[string]int64 // counters and int gauges
	floats map[string]map[string]float64
	counts map[string]uint64          // histogram counts, all attributes together
	errs   map[string]int64           // messaging.client.sent.messages with error.type, by error.type
	keys   map[string]map[string]bool // attribute keys seen, by instrument
}

func (c collected) sawKeys(name string, s attribute.Set) {
	if c.keys[name] == nil {
		c.keys[name] = map[string]bool{}
	}
	for _, kv := range s.ToSlice() {
		c.keys[name][string(kv.Key)] = true
	}
}

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	c := collected{sums: map[string]map[string]int64{}, floats: map[string]map[string]float64{}, counts: map[string]uint64{}, errs: map[string]int64{}, keys: map[string]map[string]bool{}}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					topic, _ := p.Attributes.Value("messaging.destination.name")
					if et, ok := p.Attributes.Value("error.type"); ok && m.Name == "messaging.client.sent.messages" {
						c.errs[et.AsString()] += p.Value
						continue
					}
					if c.sums[m.Name] == nil {
						c.sums[m.Name] = map[string]int64{}
					}
					c.sums[m.Name][topic.AsString()] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					topic, _ := p.Attributes.Value("messaging.destination.name")
					if c.sums[m.Name] == nil {
						c.sums[m.Name] = map[string]int64{}
					}
					c.sums[m.Name][topic.AsString()] = p.Value
				}
			case metricdata.Gauge[float64]:
				for _, p := range data.DataPoints {
					topic, _ := p.Attributes.Value("messaging.destination.name")
					if c.floats[m.Name] == nil {
						c.floats[m.Name] = map[string]float64{}
					}
					c.floats[m.Name][topic.AsString()] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					c.counts[m.Name] += p.Count
					c.sawKeys(m.Name, p.Attributes)
				}
			case metricdata.Histogram[int64]:
				for _, p := range data.DataPoints {
					c.counts[m.Name] += p.Count
				}
			}
		}
	}
	return c
}

// TestRelayMetrics runs a real relay with Metrics as its observer: three
// events delivered on one topic, one failing permanently on another (dead-
// lettered at its first attempt), and, with the relay stopped, one more
// event left pending; the counters, histograms and backlog gauges say so.
func TestRelayMetrics(t *testing.T) {
	t.Parallel()
	for _, d := range []envelope.Dialect{envelope.SQLite, envelope.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openDB(t, d)
			if err := envelope.Migrate(ctx, db, d, ""); err != nil {
				t.Fatal(err)
			}
			w, err := envelope.NewWriter(d, "")
			if err != nil {
				t.Fatal(err)
			}
			enqueue := func(topics ...string) {
				t.Helper()
				ms := make([]envelope.Message, len(topics))
				for i, topic := range topics {
					ms[i] = envelope.Message{Topic: topic, Payload: map[string]any{"i": i}}
				}
				if _, err := w.Write(ctx, db, ms); err != nil {
					t.Fatal(err)
				}
			}
			enqueue("shop.order", "shop.order", "shop.order", "mail.send")

			reader := sdkmetric.NewManualReader()
			provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = provider.Shutdown(ctx) })
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			m, err := otelherald.New(otelherald.Config{MeterProvider: provider, System: "kafka", BacklogInterval: time.Nanosecond, TracerProvider: tp})
			if err != nil {
				t.Fatal(err)
			}
			del := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
				if e.Topic == "mail.send" {
					return delivery.Permanent(errors.New("no such mailbox"))
				}
				return nil
			})
			r, err := relay.New(db, del, relay.Config{Name: "metrics", Observer: m,
				MinPollInterval: time.Millisecond, MaxPollInterval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			unregister, err := m.ObserveBacklog(r)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unregister() })
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				b, err := r.Backlog(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if b.Pending == 0 && b.DeadLettered == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the relay did not drain: %+v", b)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := r.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			enqueue("shop.order")
			pause := `INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES ('shop.order', '', now())`
			if d == envelope.SQLite {
				pause = `INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES ('shop.order', '', '` + outbox.TimeArg(d, time.Now()).(string) + `')`
			}
			if _, err := db.ExecContext(ctx, pause); err != nil {
				t.Fatal(err)
			}

			c := collect(t, reader)
			if got := c.sums["herald.backlog.paused"]; got["shop.order"] != 1 || got["mail.send"] != 0 {
				t.Errorf("herald.backlog.paused = %v, want shop.order: 1, mail.send: 0", got)
			}
			// A series per batch size would grow without bound.
			if c.keys["messaging.client.operation.duration"]["messaging.batch.message_count"] {
				t.Errorf("messaging.client.operation.duration carries messaging.batch.message_count: %v", c.keys["messaging.client.operation.duration"])
			}
			var polls, leasing int
			for _, s := range spans.Ended() {
				if s.Name() != "herald.relay.poll" {
					continue
				}
				polls++
				for _, kv := range s.Attributes() {
					if kv.Key == "herald.relay.poll.events" && kv.Value.AsInt64() > 0 {
						leasing++
					}
				}
				if !s.EndTime().After(s.StartTime()) {
					t.Errorf("poll span from %v to %v", s.StartTime(), s.EndTime())
				}
			}
			if polls == 0 || leasing == 0 {
				t.Errorf("%d herald.relay.poll spans, %d that leased events; want some of each", polls, leasing)
			}
			if got := c.sums["messaging.client.sent.messages"]["shop.order"]; got != 3 {
				t.Errorf("messaging.client.sent.messages{shop.order} = %d, want 3", got)
			}
			if got := c.errs["permanent"]; got != 1 || len(c.errs) != 1 {
				t.Errorf("failed sends by error.type = %v, want permanent: 1", c.errs)
			}
			if got := c.sums["herald.events.dead_lettered"]["mail.send"]; got != 1 {
				t.Errorf("herald.events.dead_lettered{mail.send} = %d, want 1", got)
			}
			if got := c.counts["herald.delivery.delay"]; got != 3 {
				t.Errorf("herald.delivery.delay has %d records, want 3", got)
			}
			if c.counts["herald.relay.poll.duration"] == 0 || c.counts["herald.relay.poll.duration"] != c.counts["herald.relay.lease.duration"] ||
				c.counts["herald.relay.poll.duration"] != c.counts["herald.relay.poll.events"] {
				t.Errorf("polls recorded: duration %d, lease %d, events %d; want the same, at least one",
					c.counts["herald.relay.poll.duration"], c.counts["herald.relay.lease.duration"], c.counts["herald.relay.poll.events"])
			}
			if c.counts["messaging.client.operation.duration"] == 0 {
				t.Error("no batch delivery recorded in messaging.client.operation.duration")
			}
			if got := c.sums["herald.backlog.pending"]; got["shop.order"] != 1 || got["mail.send"] != 0 {
				t.Errorf("herald.backlog.pending = %v, want shop.order: 1, mail.send: 0", got)
			}
			if got := c.sums["herald.backlog.dead_lettered"]; got["mail.send"] != 1 || got["shop.order"] != 0 {
				t.Errorf("herald.backlog.dead_lettered = %v, want mail.send: 1, shop.order: 0", got)
			}
			if _, ok := c.floats["herald.backlog.oldest_pending_age"]["shop.order"]; !ok {
				t.Errorf("herald.backlog.oldest_pending_age has no shop.order point: %v", c.floats["herald.backlog.oldest_pending_age"])
			}

			// The topic drains: its gauges say 0, not nothing.
			if _, err := r.RetryDeadLettered(ctx, relay.Filter{}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `DELETE FROM herald_outbox`); err != nil {
				t.Fatal(err)
			}
			c = collect(t, reader)
			if got := c.sums["herald.backlog.pending"]; len(got) != 2 || got["shop.order"] != 0 || got["mail.send"] != 0 {
				t.Errorf("after the table emptied, herald.backlog.pending = %v, want both topics at 0", got)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := otelherald.New(otelherald.Config{BacklogInterval: -time.Second})
	if !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("negative BacklogInterval: %v, want ErrConfiguration", err)
	}
	m, err := otelherald.New(otelherald.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ObserveBacklog(nil); !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("ObserveBacklog(nil): %v, want ErrConfiguration", err)
	}
}

func TestErrorType(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{delivery.Permanent(errors.New("x")), "permanent"},
		{&relay.DecodeError{Column: "payload", Err: errors.New("bad")}, "decode"},
		{context.DeadlineExceeded, "timeout"},
		{errors.New("refused"), "_OTHER"},
	} {
		if got := otelherald.ErrorType(c.err); got != c.want {
			t.Errorf("ErrorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
