package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverycall"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func ev(topic string) *envelope.Event {
	return &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: topic, Payload: []byte(`{"a":1}`)}
}

// named records the topics it is given.
type named struct {
	mu     sync.Mutex
	topics []string
	closed int
}

func (n *named) Deliver(_ context.Context, e *envelope.Event) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.topics = append(n.topics, e.Topic)
	return nil
}

func (n *named) Close() error { n.closed++; return nil }

func (n *named) got() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := slices.Clone(n.topics)
	slices.Sort(s)
	return s
}

// batcher is a BatchDelivery that records its calls.
type batcher struct {
	named
	calls atomic.Int32
}

func (b *batcher) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	b.calls.Add(1)
	for _, e := range es {
		_ = b.Deliver(ctx, e)
	}
	return nil
}

func TestRouterPicksExactThenPatternThenFallback(t *testing.T) {
	t.Parallel()
	exact, billing, billingPaid, fallback := &named{}, &named{}, &named{}, &named{}
	r, err := delivery.Router(map[string]delivery.Delivery{
		"billing.*":      billing,
		"billing.paid.*": billingPaid,
		"billing.audit":  exact,
	}, fallback)
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]*named{
		"billing.audit":       exact,
		"billing.paid.card":   billingPaid, // the longer prefix wins
		"billing.refund":      billing,
		"billing.audit.extra": billing,
		"library.loan":        fallback,
	} {
		if got := r.Route(topic); got != want {
			t.Errorf("Route(%q) picked the wrong delivery", topic)
		}
	}
	// RouterOf keeps the order given.
	r2, err := delivery.RouterOf([]delivery.Route{{"billing.*", billing}, {"billing.paid.*", billingPaid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Route("billing.paid.card") != billing {
		t.Error("RouterOf: the first matching pattern must win")
	}
	// Prefixes are literal: '_' is no wildcard.
	r3, err := delivery.Router(map[string]delivery.Delivery{"a_b.*": exact}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r3.Route("axb.c") != nil || r3.Route("a_b.c") != exact {
		t.Error("a_b.* must match a_b.c and not axb.c")
	}
	if err := r.Close(); err != nil || exact.closed != 1 || billing.closed != 1 || fallback.closed != 1 {
		t.Fatalf("Close: %v, closed %d %d %d", err, exact.closed, billing.closed, fallback.closed)
	}
}

func TestRouterUnroutedEventFails(t *testing.T) {
	t.Parallel()
	r, err := delivery.Router(map[string]delivery.Delivery{"billing.*": &named{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = r.Deliver(context.Background(), ev("library.loan"))
	if !errors.Is(err, delivery.ErrDelivery) || !strings.Contains(err.Error(), "library.loan") {
		t.Fatalf("unrouted: %v", err)
	}
	errs := r.DeliverBatch(context.Background(), []*envelope.Event{ev("billing.x"), ev("other")})
	if errs[0] != nil || !errors.Is(errs[1], delivery.ErrDelivery) {
		t.Fatalf("batch: %v", errs)
	}
}

func TestRouterRejectsBadRoutes(t *testing.T) {
	t.Parallel()
	for _, routes := range []map[string]delivery.Delivery{
		{"bill*ing": &named{}},
		{"": &named{}},
		{"a.?": &named{}},
		{"a.b": nil},
	} {
		if _, err := delivery.Router(routes, nil); !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("%v: %v, want ErrConfiguration", routes, err)
		}
	}
	_, err := delivery.RouterOf([]delivery.Route{{"a.*", &named{}}, {"a.*", &named{}}}, nil)
	if !errors.Is(err, envelope.ErrConfiguration) {
		t.Errorf("duplicate pattern: %v", err)
	}
}

func TestRouterBatchSplitsByRoute(t *testing.T) {
	t.Parallel()
	b := &batcher{}
	plain := &named{}
	panicky := delivery.Func(func(context.Context, *envelope.Event) error { panic("boom") })
	r, err := delivery.Router(map[string]delivery.Delivery{"kafka.*": b, "hook.*": plain, "bad": panicky}, nil)
	if err != nil {
		t.Fatal(err)
	}
	es := []*envelope.Event{ev("kafka.a"), ev("hook.a"), ev("kafka.b"), ev("hook.b"), ev("bad")}
	errs := r.DeliverBatch(context.Background(), es)
	for i, err := range errs[:4] {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	var pe *delivery.PanicError
	if !errors.As(errs[4], &pe) || pe.Value != "boom" {
		t.Fatalf("panic: %v", errs[4])
	}
	if b.calls.Load() != 1 || !slices.Equal(b.got(), []string{"kafka.a", "kafka.b"}) {
		t.Fatalf("batch route: %d calls, %v", b.calls.Load(), b.got())
	}
	if !slices.Equal(plain.got(), []string{"hook.a", "hook.b"}) {
		t.Fatalf("plain route: %v", plain.got())
	}
}

func TestEachBoundsConcurrencyAndTime(t *testing.T) {
	t.Parallel()
	var running, peak atomic.Int32
	release := make(chan struct{})
	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if e.Topic == "slow" {
			<-ctx.Done()
			return ctx.Err()
		}
		<-release
		return nil
	})
	es := []*envelope.Event{ev("slow")}
	for range 9 {
		es = append(es, ev("fast"))
	}
	done := make(chan []error)
	go func() { done <- deliverycall.Each(context.Background(), d, es, 3, 50*time.Millisecond) }()
	testkit.Eventually(t, 10*time.Second, func() bool { return running.Load() == 3 }, "3 deliveries running")
	close(release)
	errs := <-done
	if peak.Load() != 3 {
		t.Fatalf("peak concurrency %d, want 3", peak.Load())
	}
	var te *delivery.TimeoutError
	if !errors.As(errs[0], &te) || !errors.Is(errs[0], context.DeadlineExceeded) || !strings.Contains(errs[0].Error(), "timed out after 50ms") {
		t.Fatalf("slow event: %v", errs[0])
	}
	for _, err := range errs[1:] {
		if err != nil {
			t.Fatal(err)
		}
	}
}

type badBatch struct{ named }

func (b *badBatch) DeliverBatch(context.Context, []*envelope.Event) []error {
	return []error{nil}
}

func TestCallBatchChecksItsResult(t *testing.T) {
	t.Parallel()
	errs := deliverycall.CallBatch(context.Background(), &badBatch{}, []*envelope.Event{ev("a"), ev("b")})
	if len(errs) != 2 || errs[0] == nil || errs[1] == nil {
		t.Fatalf("wrong-length result must fail every event: %v", errs)
	}
	errs = deliverycall.CallBatch(context.Background(), &batcher{}, []*envelope.Event{ev("a"), ev("b")})
	if len(errs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("nil result means all delivered: %v", errs)
	}
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	e := ev("library.loan.updated")
	e.Sequence = 42
	e.Headers = map[string]string{"traceparent": "00-1", delivery.HeaderTopic: "spoofed", "Herald-Sequence": "1", "herald-ordering-key": "spoofed"}
	h := delivery.Headers(e)
	if h[delivery.HeaderEventID] != e.ID.String() || h[delivery.HeaderTopic] != e.Topic || h[delivery.HeaderSequence] != "42" ||
		h["traceparent"] != "00-1" || len(h) != 4 {
		t.Fatalf("Headers of an unordered event: %v, want herald's three (no ordering key) and traceparent", h)
	}
	if e.Headers[delivery.HeaderTopic] != "spoofed" {
		t.Fatal("Headers must not modify the event")
	}
	l := delivery.HeaderList(e)
	if len(l) != 4 || l[0].Name != delivery.HeaderEventID || l[1].Name != delivery.HeaderSequence || l[2].Name != delivery.HeaderTopic || l[3].Name != "traceparent" {
		t.Fatalf("HeaderList: %v", l)
	}
	if string(delivery.Body(e)) != `{"a":1}` || string(delivery.Body(&envelope.Event{})) != "null" {
		t.Fatal("Body")
	}
	if delivery.Key(e) != nil {
		t.Fatal("Key of an unordered event must be nil")
	}
	e.OrderingKey = "library.Loan:7"
	if string(delivery.Key(e)) != "library.Loan:7" {
		t.Fatal("Key")
	}
	if h := delivery.Headers(e); h[delivery.HeaderOrderingKey] != "library.Loan:7" || len(h) != 5 {
		t.Fatalf("Headers of an ordered event: %v, want herald-ordering-key", h)
	}
	// A tenant's event carries herald-tenant; an event header of that
	// name, in any case, is dropped.
	e.Headers["Herald-Tenant"] = "forged"
	if h := delivery.Headers(e); len(h) != 5 || h["Herald-Tenant"] != "" {
		t.Fatalf("Headers of an event without a tenant: %v, want no herald-tenant", h)
	}
	e.Tenant = "acme"
	if h := delivery.Headers(e); h[delivery.HeaderTenant] != "acme" || len(h) != 6 {
		t.Fatalf("Headers of a tenant's event: %v, want herald-tenant acme", h)
	}
}

// ByAggregate groups the topics of one captured model, which differ only
// by their operation, into one destination.
func TestByAggregate(t *testing.T) {
	t.Parallel()
	for topic, want := range map[string]string{
		"shop.order.inserted":        "shop.order",
		"shop.order.updated":         "shop.order",
		"shop.order.deleted":         "shop.order",
		"shop.order_item.updated":    "shop.order_item",
		"mail.send":                  "mail.send",
		"updated":                    "updated",
		".updated":                   ".updated",
		"shop.order.updated.v2":      "shop.order.updated.v2",
		"shop.orderupdated":          "shop.orderupdated",
		"library.loan.overdue":       "library.loan.overdue",
		"billing.invoice.inserted.x": "billing.invoice.inserted.x",
	} {
		if got := delivery.ByAggregate(ev(topic)); got != want {
			t.Errorf("ByAggregate(%q) = %q, want %q", topic, got, want)
		}
		if got := delivery.ByTopic(ev(topic)); got != topic {
			t.Errorf("ByTopic(%q) = %q", topic, got)
		}
	}
}

// An event header naming one of herald's in another case is left out of
// every transport's headers (Headers, HeaderList): herald's value is the
// only one a case-insensitive lookup can find.
func TestHeraldHeadersShadowNoCase(t *testing.T) {
	t.Parallel()
	for range 20 { // map order varies between calls
		e := ev("library.loan.updated")
		e.Headers = map[string]string{"Herald-Event-Id": "forged", "HERALD-TOPIC": "forged", "herald-Event-ID": "forged", "Herald-Other": "kept"}
		h := delivery.Headers(e)
		for k, v := range h {
			if (strings.EqualFold(k, delivery.HeaderEventID) && v != e.ID.String()) || (strings.EqualFold(k, delivery.HeaderTopic) && v != e.Topic) {
				t.Fatalf("Headers: %s = %q shadows herald's own (%v)", k, v, h)
			}
		}
		if h["Herald-Other"] != "kept" || len(h) != len(delivery.Headers(ev("x")))+1 {
			t.Fatalf("Headers: %v, want herald's own and Herald-Other", h)
		}
		if l := delivery.HeaderList(e); len(l) != len(h) {
			t.Fatalf("HeaderList: %v", l)
		}
	}
}

func ExampleFunc() {
	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		fmt.Printf("%s %s\n", e.Topic, delivery.Body(e))
		return nil
	})
	_ = d.Deliver(context.Background(), &envelope.Event{Topic: "library.loan.updated", Payload: []byte(`{"id":7}`)})
	// Output: library.loan.updated {"id":7}
}

func ExampleRouter() {
	printer := func(name string) delivery.Delivery {
		return delivery.Func(func(ctx context.Context, e *envelope.Event) error {
			fmt.Println(name, "<-", e.Topic)
			return nil
		})
	}
	r, err := delivery.Router(map[string]delivery.Delivery{
		"billing.*":    printer("kafka"),
		"billing.paid": printer("webhook"),
	}, printer("fallback"))
	if err != nil {
		panic(err)
	}
	for _, topic := range []string{"billing.paid", "billing.refunded", "library.loan.updated"} {
		_ = r.Deliver(context.Background(), &envelope.Event{Topic: topic})
	}
	// Output:
	// webhook <- billing.paid
	// kafka <- billing.refunded
	// fallback <- library.loan.updated
}

// wrapped is the usual middleware shape: a Delivery held by value. Its
// type is comparable; its value is not when next holds a Func.
type wrapped struct{ next delivery.Delivery }

func (w wrapped) Deliver(ctx context.Context, e *envelope.Event) error { return w.next.Deliver(ctx, e) }
func (w wrapped) Close() error                                         { return w.next.Close() }

// Regression (issue 12 item 6): building a router over a by-value wrapper
// of a Func panicked with "hash of unhashable type".
func TestRouterTakesDeliveriesOfComparableTypeButUnhashableValue(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	f := delivery.Func(func(context.Context, *envelope.Event) error { calls.Add(1); return nil })
	shared := &named{}
	r, err := delivery.Router(map[string]delivery.Delivery{
		"a.*": wrapped{next: f},
		"b.*": wrapped{next: f},
		"c.x": wrapped{next: shared}, // comparable value: kept once
		"c.y": wrapped{next: shared},
		"d.*": struct{ delivery.Delivery }{f},
	}, wrapped{next: f})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	es := []*envelope.Event{{Topic: "a.1"}, {Topic: "b.1"}, {Topic: "c.x"}, {Topic: "c.y"}, {Topic: "d.1"}, {Topic: "zzz"}}
	for i, err := range r.DeliverBatch(ctx, es) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if calls.Load() != 4 || len(shared.got()) != 2 {
		t.Fatalf("the func got %d events, the shared delivery %v", calls.Load(), shared.got())
	}
	if err := r.Close(); err != nil || shared.closed != 1 {
		t.Fatalf("Close: %v; the shared delivery closed %d times, want once", err, shared.closed)
	}
}

// A zero Routing has no route and no fallback: every event is unrouted,
// nothing panics.
func TestZeroRoutingRefusesEverything(t *testing.T) {
	t.Parallel()
	var r delivery.Routing
	e := &envelope.Event{Topic: "a"}
	if err := r.Deliver(context.Background(), e); !errors.Is(err, delivery.ErrDelivery) {
		t.Fatalf("Deliver: %v", err)
	}
	if errs := r.DeliverBatch(context.Background(), []*envelope.Event{e}); !errors.Is(errs[0], delivery.ErrDelivery) {
		t.Fatalf("DeliverBatch: %v", errs)
	}
	if r.Route("a") != nil {
		t.Fatal("Route on a zero Routing")
	}
}
