package relay_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/deliverycall"
	"github.com/heraldgo/herald/relay"
)

// TestDefaultConcurrencyIsTheRouters: a Router with Concurrency 0 delivers
// a plain route's events as many at once as a relay does a plain
// delivery's (delivery.Routing.Concurrency's doc says so).
func TestDefaultConcurrencyIsTheRouters(t *testing.T) {
	if relay.DefaultConcurrency != deliverycall.DefaultConcurrency {
		t.Fatalf("relay.DefaultConcurrency = %d, the Router's default %d", relay.DefaultConcurrency, deliverycall.DefaultConcurrency)
	}
}
