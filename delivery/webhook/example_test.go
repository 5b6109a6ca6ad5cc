package webhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/envelope"
)

// A signed webhook and a receiver that checks the signature with Verify.
func Example() {
	const secret = "s3cret"
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Printf("%s %s\n", r.Header.Get("herald-topic"), body)
	}))
	defer receiver.Close()

	d, err := webhook.New(webhook.Config{
		URL:    receiver.URL + "/events",
		Secret: secret,
		// The test server listens on loopback, which the dial guard
		// refuses unless allowed.
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	e := &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: "billing.invoice.paid", Payload: []byte(`{"invoice":42}`)}
	if err := d.Deliver(context.Background(), e); err != nil {
		panic(err)
	}
	// Output: billing.invoice.paid {"invoice":42}
}

// One endpoint and secret per subscriber, with a check of the URL before
// every request.
func ExampleConfig_target() {
	type subscription struct{ url, secret string }
	subscriptions := map[string]subscription{ // by topic, for the example
		"billing.invoice.paid": {"https://hooks.example.com/billing", "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="},
	}
	d, err := webhook.New(webhook.Config{
		Target: func(ctx context.Context, e *envelope.Event) (webhook.Target, error) {
			s, ok := subscriptions[e.Topic]
			if !ok {
				return webhook.Target{}, fmt.Errorf("no subscription for %s", e.Topic)
			}
			return webhook.Target{URL: s.url, Secret: s.secret}, nil
		},
		Scheme: webhook.SchemeStandard,
	})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	fmt.Println("ready")
	// Output: ready
}
