package promtext_test

import (
	"net/http"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/heraldgo/herald/otelherald"
	"github.com/heraldgo/herald/otelherald/promtext"
)

// A relay's otelherald metrics on /metrics for Prometheus to scrape.
func ExampleHandler() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	http.Handle("/metrics", promtext.Handler(reader))

	m, err := otelherald.New(otelherald.Config{MeterProvider: provider})
	if err != nil {
		panic(err)
	}
	_ = m // relay.Config{Observer: m}; m.ObserveBacklog(r)
}
