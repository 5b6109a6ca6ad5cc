package promtext_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/heraldgo/herald/internal/promparse"
	"github.com/heraldgo/herald/otelherald/promtext"
)

func TestName(t *testing.T) {
	for _, c := range []struct{ name, unit, typ, want string }{
		{"herald.delivery.delay", "s", "histogram", "herald_delivery_delay_seconds"},
		{"messaging.client.sent.messages", "{message}", "counter", "messaging_client_sent_messages_total"},
		{"herald.backlog.pending", "{event}", "gauge", "herald_backlog_pending"},
		{"herald.backlog.oldest_pending_age", "s", "gauge", "herald_backlog_oldest_pending_age_seconds"},
		{"http.server.request.duration_seconds", "s", "histogram", "http_server_request_duration_seconds"},
		{"cpu.utilization", "1", "gauge", "cpu_utilization_ratio"},
		{"requests", "1", "counter", "requests_total"},
		{"queue.bytes", "By", "gauge", "queue_bytes"},
		{"net.io", "By{packet}", "counter", "net_io_bytes_total"},
		{"throughput", "By/s", "gauge", "throughput_bytes_per_second"},
		{"jobs.done_total", "", "counter", "jobs_done_total"},
		{"2xx--weird..name", "", "gauge", "_2xx_weird_name"},
	} {
		if got := promtext.Name(c.name, c.unit, c.typ); got != c.want {
			t.Errorf("Name(%q, %q, %s) = %q, want %q", c.name, c.unit, c.typ, got, c.want)
		}
	}
}

// TestWriteParsesStrictly writes each kind of instrument through a real
// SDK and reads the text back with a strict parser: the names, the
// labels (escaped), cumulative buckets, counters, gauges.
func TestWriteParsesStrictly(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()
	m := mp.Meter("test")
	c, _ := m.Int64Counter("shop.orders", metric.WithUnit("{order}"), metric.WithDescription("Orders.\nTwo lines, a \\ too."))
	h, _ := m.Float64Histogram("shop.latency", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(0.1, 1, 10))
	ud, _ := m.Int64UpDownCounter("shop.queue", metric.WithUnit("{order}"))
	g, _ := m.Float64Gauge("shop.temperature", metric.WithUnit("Cel"))
	hostile := attribute.String("shop.name", "a \"quoted\" \\ name\nwith a newline")
	c.Add(ctx, 3, metric.WithAttributes(hostile))
	c.Add(ctx, 2, metric.WithAttributes(attribute.String("shop.name", "b")))
	for _, v := range []float64{0.05, 0.5, 0.7, 5, 50} {
		h.Record(ctx, v, metric.WithAttributes(attribute.String("shop.name", "b")))
	}
	ud.Add(ctx, 5)
	ud.Add(ctx, -7)
	g.Record(ctx, 21.5)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := promtext.Write(&b, &rm); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	fams, err := promparse.Parse(text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	want := map[string]string{"shop_orders_total": "counter", "shop_latency_seconds": "histogram", "shop_queue": "gauge", "shop_temperature_celsius": "gauge"}
	if len(fams) != len(want) {
		t.Fatalf("families %v, want %v\n%s", keys(fams), want, text)
	}
	for n, typ := range want {
		if fams[n] == nil || fams[n].Type != typ {
			t.Fatalf("%s: %+v, want a %s\n%s", n, fams[n], typ, text)
		}
	}
	if fams["shop_orders_total"].Help != `Orders.\nTwo lines, a \\ too.` {
		t.Errorf("HELP %q", fams["shop_orders_total"].Help)
	}
	byName := map[string]float64{}
	for _, s := range fams["shop_orders_total"].Samples {
		byName[s.Labels["shop_name"]] = s.Value
	}
	if byName["a \"quoted\" \\ name\nwith a newline"] != 3 || byName["b"] != 2 {
		t.Errorf("counter samples %v\n%s", byName, text)
	}
	buckets := map[string]float64{}
	for _, s := range fams["shop_latency_seconds"].Samples {
		switch s.Name {
		case "shop_latency_seconds_bucket":
			buckets[s.Labels["le"]] = s.Value
		case "shop_latency_seconds_count":
			buckets["count"] = s.Value
		case "shop_latency_seconds_sum":
			buckets["sum"] = s.Value
		}
	}
	if buckets["0.1"] != 1 || buckets["1"] != 3 || buckets["10"] != 4 || buckets["+Inf"] != 5 || buckets["count"] != 5 || buckets["sum"] != 56.25 {
		t.Errorf("histogram %v, want cumulative 1, 3, 4, 5 and sum 56.25\n%s", buckets, text)
	}
	if v := fams["shop_queue"].Samples[0].Value; v != -2 {
		t.Errorf("up-down counter %v, want -2", v)
	}
}

func keys(m map[string]*promparse.Family) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
