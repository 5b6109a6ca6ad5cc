package delivery

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverycall"
	"github.com/heraldgo/herald/internal/outbox"
)

// Route sends the events whose topic matches Pattern to Delivery. Pattern
// is a topic name or a prefix pattern ending in '*' ("billing.*"), as in
// the relay's Topics.
type Route struct {
	Pattern  string
	Delivery Delivery
}

// Routing is the Delivery that Router and RouterOf build: it picks, for
// each event, the delivery of its exact topic, else of the first prefix
// pattern that matches, else the fallback. An event nothing accepts fails
// with ErrDelivery and ErrPermanent: the relay dead-letters it at its
// first attempt, its last_error naming the topic.
//
// Routing is a BatchDelivery: a batch is split by route, a BatchDelivery
// route gets its share at once, and the events of plain routes are
// delivered up to Concurrency at once.
type Routing struct {
	exact    map[string]int // topic -> index in targets
	prefixes []prefixRoute
	fallback int        // index in targets, or -1
	targets  []Delivery // each distinct delivery once

	// Concurrency bounds how many events of plain (non-batch) routes are
	// delivered at once within one batch; 0 = 10, as relay.DefaultConcurrency.
	Concurrency int
}

type prefixRoute struct {
	prefix string
	target int
}

var _ BatchDelivery = (*Routing)(nil)

// Router routes by topic: the exact topic first, then the prefix patterns
// from the longest (most specific) prefix to the shortest, then fallback
// (nil = none: an unrouted event fails with ErrDelivery). A map has no
// order, so the most specific pattern wins; use RouterOf to give the order
// yourself. Errors match envelope.ErrConfiguration and name the pattern.
//
//	d, err := delivery.Router(map[string]delivery.Delivery{
//		"billing.*":            kafkaDelivery,
//		"library.loan.overdue": webhookDelivery,
//	}, nil)
func Router(routes map[string]Delivery, fallback Delivery) (*Routing, error) {
	list := make([]Route, 0, len(routes))
	for p, d := range routes {
		list = append(list, Route{Pattern: p, Delivery: d})
	}
	// Longest prefix first; among equals (a name and its prefix form), by text.
	sort.Slice(list, func(i, j int) bool {
		a, b := strings.TrimSuffix(list[i].Pattern, "*"), strings.TrimSuffix(list[j].Pattern, "*")
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return list[i].Pattern < list[j].Pattern
	})
	return RouterOf(list, fallback)
}

// RouterOf routes by topic: the exact topic first, then the first prefix
// pattern that matches in the order given, then fallback (nil = none).
// Errors match envelope.ErrConfiguration and name the route.
func RouterOf(routes []Route, fallback Delivery) (*Routing, error) {
	r := &Routing{exact: map[string]int{}, fallback: -1}
	// add returns d's index in targets. Deliveries whose value is
	// comparable (pointers, mostly) are kept once, so a delivery behind two
	// routes gets its events of both in one share and is closed once; a
	// Func is not comparable and gets a share per route. The value is
	// asked, not its type: a struct holding an interface (a middleware
	// wrapping a Func by value) has a comparable type, yet hashing it
	// panics when the interface holds a Func.
	seen := map[Delivery]int{}
	add := func(d Delivery) int {
		if reflect.ValueOf(d).Comparable() {
			if i, ok := seen[d]; ok {
				return i
			}
			seen[d] = len(r.targets)
		}
		r.targets = append(r.targets, d)
		return len(r.targets) - 1
	}
	for i, rt := range routes {
		where := fmt.Sprintf("Router route %q", rt.Pattern)
		p, err := envelope.ParseTopicPattern(where, rt.Pattern)
		if err != nil {
			return nil, err
		}
		if rt.Delivery == nil {
			return nil, outbox.Configurationf(where, "nil Delivery")
		}
		if p.Prefix {
			for _, q := range r.prefixes {
				if q.prefix == p.Text {
					return nil, outbox.Configurationf(where, "pattern listed twice (route %d)", i)
				}
			}
			r.prefixes = append(r.prefixes, prefixRoute{p.Text, add(rt.Delivery)})
		} else {
			if _, dup := r.exact[p.Text]; dup {
				return nil, outbox.Configurationf(where, "topic listed twice (route %d)", i)
			}
			r.exact[p.Text] = add(rt.Delivery)
		}
	}
	if fallback != nil {
		r.fallback = add(fallback)
	}
	return r, nil
}

// Route returns the delivery for topic, or nil when nothing accepts it.
func (r *Routing) Route(topic string) Delivery {
	if i := r.route(topic); i >= 0 {
		return r.targets[i]
	}
	return nil
}

func (r *Routing) route(topic string) int {
	if i, ok := r.exact[topic]; ok {
		return i
	}
	for _, p := range r.prefixes {
		if strings.HasPrefix(topic, p.prefix) {
			return p.target
		}
	}
	if r.fallback >= len(r.targets) { // a zero Routing: no routes, no fallback
		return -1
	}
	return r.fallback
}

// unrouted is the error of an event nothing accepts. It is permanent:
// routes are fixed when the Router is built, so trying again would fail
// the same way MaxAttempts times (16 s at the relay's defaults) before
// the event is dead-lettered anyway, its key held meanwhile.
func unrouted(e *envelope.Event) error {
	return Permanent(fmt.Errorf("%w: no route for topic %q (event %s) and no fallback; dead-lettered at its first attempt: add a route or a fallback, then RetryDeadLettered",
		ErrDelivery, e.Topic, e.ID))
}

// Deliver delivers e through its route.
func (r *Routing) Deliver(ctx context.Context, e *envelope.Event) error {
	d := r.Route(e.Topic)
	if d == nil {
		return unrouted(e)
	}
	return d.Deliver(ctx, e)
}

// DeliverBatch splits es by route and delivers each share: a BatchDelivery
// route gets its share in one call, a plain route's events go out up to
// Concurrency at once. Panics are recovered as that event's failure.
func (r *Routing) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	errs := make([]error, len(es))
	type share struct {
		d   Delivery
		idx []int
	}
	var shares []*share
	by := make([]*share, len(r.targets))
	for i, e := range es {
		t := r.route(e.Topic)
		if t < 0 {
			errs[i] = unrouted(e)
			continue
		}
		s := by[t]
		if s == nil {
			s = &share{d: r.targets[t]}
			by[t] = s
			shares = append(shares, s)
		}
		s.idx = append(s.idx, i)
	}
	conc := r.Concurrency
	if conc <= 0 {
		conc = deliverycall.DefaultConcurrency
	}
	done := make(chan struct{}, len(shares))
	for _, s := range shares {
		go func() {
			defer func() { done <- struct{}{} }()
			sub := make([]*envelope.Event, len(s.idx))
			for j, i := range s.idx {
				sub[j] = es[i]
			}
			var got []error
			if b, ok := s.d.(BatchDelivery); ok {
				got = callBatch(ctx, b, sub)
			} else {
				got = each(ctx, s.d, sub, conc, 0)
			}
			for j, i := range s.idx {
				errs[i] = got[j]
			}
		}()
	}
	for range shares {
		<-done
	}
	return errs
}

// Close closes every distinct route delivery and the fallback, and returns
// their errors joined.
func (r *Routing) Close() error {
	var errs []error
	for _, d := range r.targets {
		if err := d.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
