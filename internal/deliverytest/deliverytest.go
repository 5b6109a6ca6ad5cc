// Package deliverytest is the conformance suite every herald delivery
// passes, through a real relay on PostgreSQL: the body is the payload as
// stored, byte for byte; the event's headers, its id, topic, sequence,
// ordering key and tenant arrive as headers; the events of one ordering
// key arrive in order (1,000 events over 100 keys); at the transport's defaults, a
// captured row's inserted, updated and deleted events arrive in one
// destination (stream, Kafka topic and partition, queue) in sequence
// order, read by a plain client of the broker; a receiver that is down
// makes deliveries fail, and they are retried and delivered once it is
// back; Close releases every connection and goroutine.
// Outage (and Stalled, for a receiver that can stop reading) runs a relay
// through a broker outage mid-run — 1,500 events on 50 keys, the receiver
// down for 5 s at least and until an event failed three times — and checks
// that no event is lost and that each key's first deliveries are in
// sequence order, logging the figures (a line starting "OUTAGE").
//
// A transport's test calls Run with a Suite that builds a receiver (a
// consumer of the broker, an HTTP server) and deliveries to it.
package deliverytest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverycall"
	"github.com/heraldgo/herald/internal/testkit"
)

// Topic is the topic of the events the suite writes.
const Topic = "conformance.loan.updated"

// Message is one message as a receiver got it.
type Message struct {
	Body    []byte
	Headers map[string]string // names lower-case
	Key     string            // the message key; "" when the transport has none
	// Destination is where the message was read from, as the broker
	// orders it: a stream, a Kafka topic and partition, a queue, a URL.
	// Set by AtDefaults receivers.
	Destination string
}

// Receiver is one receiver of a transport and the way to reach it.
type Receiver struct {
	// NewDelivery builds a delivery to the receiver; the suite closes it.
	NewDelivery func(t testing.TB) delivery.Delivery
	// Received returns every message received so far, in order of receipt.
	Received func(t testing.TB) []Message
	// Down makes the receiver unreachable (a cut proxy, a stopped private
	// server); Up makes it reachable again.
	Down, Up func(t testing.TB)
	// Conns, when set, counts the connections open to the receiver; the
	// suite checks it drops to zero after Close.
	Conns func() int
	// Stall, when set, makes the receiver stop reading what the delivery
	// sends, its connections left open (on), or read again (off): a
	// RabbitMQ under its memory or disk alarm.
	Stall func(t testing.TB, on bool)
	// Outage names what Down does, for the Outage test's report ("SIGKILL
	// of a private redis-server"); "" = "down".
	Outage string
}

// Suite describes a transport to the suite.
type Suite struct {
	// NewReceiver starts a fresh receiver for one test.
	NewReceiver func(t testing.TB) *Receiver
	// Keyed says the transport carries the ordering key as the message key.
	Keyed bool
	// AtDefaults starts a receiver whose delivery is built with nothing
	// but the broker's address: no topic, stream, routing key or
	// destination function. It reads every destination the delivery may
	// write events of topics to (all of them begin with one unique first
	// part, up to the first '.'), in the broker's order, and names each
	// message's Destination.
	AtDefaults func(t testing.TB, topics []string) *Receiver
	// SkipOutages, when set, is why Outage and Stalled are skipped (a
	// third-party client that cannot be run through them in this build).
	SkipOutages string
}

// Run runs the conformance tests. Call it from a test that is not
// parallel: its first subtest checks for leaked goroutines.
func Run(t *testing.T, s Suite) {
	t.Run("CloseReleases", func(t *testing.T) { closeReleases(t, s) })
	t.Run("Content", func(t *testing.T) { t.Parallel(); content(t, s) })
	t.Run("KeyOrder", func(t *testing.T) { t.Parallel(); keyOrder(t, s) })
	t.Run("RowOrderAtDefaults", func(t *testing.T) { t.Parallel(); rowOrderAtDefaults(t, s) })
	t.Run("DownThenUp", func(t *testing.T) { t.Parallel(); downThenUp(t, s) })
	t.Run("Outage", func(t *testing.T) {
		t.Parallel()
		if s.SkipOutages != "" {
			t.Skip(s.SkipOutages)
		}
		rc := s.NewReceiver(t)
		what := rc.Outage
		if what == "" {
			what = "down"
		}
		outage(t, rc, what, rc.Down, rc.Up)
	})
	t.Run("Stalled", func(t *testing.T) {
		t.Parallel()
		if s.SkipOutages != "" {
			t.Skip(s.SkipOutages)
		}
		rc := s.NewReceiver(t)
		if rc.Stall == nil {
			t.Skip("the transport's receiver cannot stall")
		}
		outage(t, rc, "stops reading", func(t testing.TB) { rc.Stall(t, true) }, func(t testing.TB) { rc.Stall(t, false) })
	})
}

// withDelivery builds a delivery closed when the test ends (after the
// relay, which StartRelay stops first).
func withDelivery(t testing.TB, rc *Receiver) delivery.Delivery {
	t.Helper()
	d := rc.NewDelivery(t)
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("deliverytest: Close: %v", err)
		}
	})
	return d
}

// ByID returns the received messages by their herald-event-id header, the
// first of each (delivery is at least once).
func ByID(ms []Message) map[string]Message {
	out := make(map[string]Message, len(ms))
	for _, m := range ms {
		id := m.Headers[delivery.HeaderEventID]
		if _, ok := out[id]; !ok {
			out[id] = m
		}
	}
	return out
}

// WaitReceived waits until the receiver holds a message for every event
// and returns them by event id.
func WaitReceived(t testing.TB, rc *Receiver, es []*envelope.Event, within time.Duration) map[string]Message {
	t.Helper()
	var got map[string]Message
	testkit.Eventually(t, within, func() bool {
		got = ByID(rc.Received(t))
		for _, e := range es {
			if _, ok := got[e.ID.String()]; !ok {
				return false
			}
		}
		return true
	}, "a message for each of %d events at the receiver", len(es))
	return got
}

func closeReleases(t *testing.T, s Suite) {
	rc := s.NewReceiver(t)
	before := testkit.IgnoreRunning()
	d := rc.NewDelivery(t)
	e := &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: Topic, OrderingKey: "close:1", Payload: []byte(`{"close":1}`),
		Headers: map[string]string{"tenant": "acme"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	if b, ok := d.(delivery.BatchDelivery); ok {
		err = deliverycall.CallBatch(ctx, b, []*envelope.Event{e})[0]
	} else {
		err = deliverycall.Call(ctx, d, e)
	}
	if err != nil {
		_ = d.Close()
		t.Fatalf("deliver: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if rc.Conns != nil {
		testkit.Eventually(t, 10*time.Second, func() bool { return rc.Conns() == 0 }, "no connection open to the receiver after Close")
	}
	if err := testkit.LeakError(testkit.Leaks(before)); err != nil {
		t.Fatalf("goroutines left after Close: %v", err)
	}
	WaitReceived(t, rc, []*envelope.Event{e}, 20*time.Second)
}

func content(t *testing.T, s Suite) {
	env := NewEnv(t)
	rc := s.NewReceiver(t)
	d := withDelivery(t, rc)
	es := env.Write(t,
		envelope.Message{Topic: Topic, OrderingKey: "library.Loan:7", Tenant: "acme-Zoë",
			Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "Zoë"},
			Payload: map[string]any{"id": 7, "title": "Мастер и Маргарита", "price": "12.50", "tags": []string{"a", "b"},
				"nested": map[string]any{"x": nil, "quote": `she said "hi" 🙂`}}},
		envelope.Message{Topic: Topic},
		envelope.Message{Topic: Topic, OrderingKey: "library.Loan:8", Payload: "a string payload\twith a tab",
			// herald's own headers win over the event's, in any case.
			Headers: map[string]string{"author": "42", "Herald-Event-Id": "forged", "HERALD-TOPIC": "forged", "Herald-Tenant": "forged"}},
	)
	env.StartRelay(t, d, RelayConfig())
	got := WaitReceived(t, rc, es, 30*time.Second)
	for _, e := range es {
		m := got[e.ID.String()]
		stored := env.Row(t, e.ID.String()).Payload
		if string(m.Body) != stored {
			t.Errorf("event %s: body %q, want the payload as stored %q", e.ID, m.Body, stored)
		}
		want := map[string]string{}
		for k, v := range e.Headers {
			if !strings.EqualFold(k, delivery.HeaderEventID) && !strings.EqualFold(k, delivery.HeaderTopic) && !strings.EqualFold(k, delivery.HeaderTenant) {
				want[k] = v
			}
		}
		want[delivery.HeaderEventID] = e.ID.String()
		want[delivery.HeaderTopic] = e.Topic
		want[delivery.HeaderSequence] = strconv.FormatInt(e.Sequence, 10)
		if e.OrderingKey != "" {
			want[delivery.HeaderOrderingKey] = e.OrderingKey
		} else if k, ok := m.Headers[delivery.HeaderOrderingKey]; ok {
			t.Errorf("event %s is unordered, yet has header %s = %q", e.ID, delivery.HeaderOrderingKey, k)
		}
		if e.Tenant != "" {
			want[delivery.HeaderTenant] = e.Tenant
		} else {
			for k, v := range m.Headers {
				if strings.EqualFold(k, delivery.HeaderTenant) {
					t.Errorf("event %s has no tenant, yet has header %s = %q", e.ID, k, v)
				}
			}
		}
		for k, v := range want {
			if m.Headers[k] != v {
				t.Errorf("event %s: header %s = %q, want %q (headers %v)", e.ID, k, m.Headers[k], v, m.Headers)
			}
		}
		if s.Keyed && m.Key != e.OrderingKey {
			t.Errorf("event %s: key %q, want the ordering key %q", e.ID, m.Key, e.OrderingKey)
		}
	}
}

func keyOrder(t *testing.T, s Suite) {
	const events, keys = 1000, 100
	env := NewEnv(t)
	rc := s.NewReceiver(t)
	d := withDelivery(t, rc)
	env.StartRelay(t, d, RelayConfig())
	wantOrder := map[string][]string{} // key -> event ids in write order
	keyOf := map[string]string{}
	var all []*envelope.Event
	for w := range 10 {
		ms := make([]envelope.Message, events/10)
		for i := range ms {
			n := w*len(ms) + i
			ms[i] = envelope.Message{Topic: Topic, OrderingKey: fmt.Sprintf("key-%03d", n%keys), Payload: map[string]int{"n": n}}
		}
		for _, e := range env.Write(t, ms...) {
			wantOrder[e.OrderingKey] = append(wantOrder[e.OrderingKey], e.ID.String())
			keyOf[e.ID.String()] = e.OrderingKey
			all = append(all, e)
		}
	}
	WaitReceived(t, rc, all, 2*time.Minute)
	gotOrder := map[string][]string{}
	seen := map[string]bool{}
	for _, m := range rc.Received(t) {
		id := m.Headers[delivery.HeaderEventID]
		if seen[id] {
			continue // a duplicate: at least once
		}
		seen[id] = true
		gotOrder[keyOf[id]] = append(gotOrder[keyOf[id]], id)
	}
	for k, want := range wantOrder {
		if got := gotOrder[k]; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("key %s: received in order %v, written in order %v", k, got, want)
		}
	}
}

func downThenUp(t *testing.T, s Suite) {
	env := NewEnv(t)
	rc := s.NewReceiver(t)
	d := withDelivery(t, rc)
	// Deliver once while up, so the delivery's connections exist when the
	// receiver goes down.
	first := env.Write(t, envelope.Message{Topic: Topic, OrderingKey: "warm", Payload: 0})
	env.StartRelay(t, d, RelayConfig())
	WaitReceived(t, rc, first, 30*time.Second)
	env.WaitPublished(t, 30*time.Second)

	rc.Down(t)
	var es []*envelope.Event
	for i := range 5 {
		es = append(es, env.Write(t, envelope.Message{Topic: Topic, OrderingKey: fmt.Sprintf("down-%d", i%2), Payload: i})...)
	}
	// The first event of each key fails (the later ones wait behind it).
	failed := map[string]string{}
	testkit.Eventually(t, 60*time.Second, func() bool {
		for _, e := range es[:2] {
			r := env.Row(t, e.ID.String())
			if r.Published {
				t.Fatalf("event %s published while the receiver is down", e.ID)
			}
			if r.Attempts == 0 || r.LastError == "" {
				return false
			}
			failed[e.ID.String()] = r.LastError
		}
		return true
	}, "deliveries failing while the receiver is down")
	for id, err := range failed {
		t.Logf("event %s failed while down: %s", id, err)
	}

	rc.Up(t)
	env.WaitPublished(t, 60*time.Second)
	WaitReceived(t, rc, es, 30*time.Second)
}

// MinOutage is the shortest outage the Outage and Stalled tests make.
const MinOutage = 5 * time.Second

// outage writes events on 50 keys while a relay delivers them, takes the
// receiver down mid-run (down), writes on, holds it down for MinOutage and
// until an event has failed three times, brings it back (up), writes the rest, and waits
// for every event. It checks that none is lost and that
// the first delivery of each key's events is in sequence order, and logs
// one line of figures: committed, delivered, duplicates, the drain time
// from up to the last event received.
func outage(t *testing.T, rc *Receiver, what string, down, up func(testing.TB)) {
	const events, keys, perTx = 1500, 50, 10
	env := NewEnv(t)
	d := withDelivery(t, rc)
	env.StartRelay(t, d, RelayConfig())
	var all []*envelope.Event
	n := 0
	write := func(count int) []*envelope.Event {
		var out []*envelope.Event
		for range count / perTx {
			ms := make([]envelope.Message, perTx)
			for i := range ms {
				ms[i] = envelope.Message{Topic: Topic, OrderingKey: fmt.Sprintf("outage-%02d", n%keys), Payload: map[string]int{"n": n}}
				n++
			}
			out = append(out, env.Write(t, ms...)...)
		}
		all = append(all, out...)
		return out
	}
	first := write(events / 3)
	// Down mid-run: once some of the first third arrived.
	testkit.Eventually(t, time.Minute, func() bool { return len(ByID(rc.Received(t))) >= len(first)/4 }, "a quarter of the first events delivered")
	downAt := time.Now()
	down(t)
	during := write(events / 3)
	// Held down for MinOutage at least, and until the relay has failed on
	// it three times in a row.
	testkit.Eventually(t, 2*time.Minute, func() bool {
		if time.Since(downAt) < MinOutage {
			return false
		}
		var attempts int
		if err := env.DB.QueryRowContext(context.Background(),
			`SELECT coalesce(max(attempts), 0) FROM herald_outbox WHERE published_at IS NULL`).Scan(&attempts); err != nil {
			t.Fatal(err)
		}
		return attempts >= 3
	}, "an event failing three times while the receiver is %s", what)
	upAt := time.Now()
	outage := upAt.Sub(downAt)
	up(t)
	write(events - len(first) - len(during))
	WaitReceived(t, rc, all, 3*time.Minute)
	drain := time.Since(upAt)
	env.WaitPublished(t, time.Minute)

	ms := rc.Received(t)
	keyOf := map[string]string{}
	want := map[string][]string{}
	for _, e := range all {
		keyOf[e.ID.String()] = e.OrderingKey
		want[e.OrderingKey] = append(want[e.OrderingKey], e.ID.String())
	}
	got := map[string][]string{}
	seen := map[string]bool{}
	dups := 0
	for _, m := range ms {
		id := m.Headers[delivery.HeaderEventID]
		if seen[id] {
			dups++
			continue
		}
		seen[id] = true
		if k, ok := keyOf[id]; ok {
			got[k] = append(got[k], id)
		}
	}
	lost := 0
	for _, e := range all {
		if !seen[e.ID.String()] {
			lost++
		}
	}
	violations := 0
	for k, ids := range want {
		if strings.Join(got[k], ",") != strings.Join(ids, ",") {
			violations++
		}
	}
	t.Logf("OUTAGE %s (%s): outage %.1f s, committed %d, delivered %d, duplicates %d, lost %d, keys out of order %d, drain after the outage %.2f s",
		t.Name(), what, outage.Seconds(), len(all), len(seen), dups, lost, violations, drain.Seconds())
	if lost > 0 || violations > 0 {
		t.Fatalf("%d events lost, %d keys whose first deliveries are out of sequence order", lost, violations)
	}
}

// rowOrderAtDefaults writes what capture writes for rows of one model —
// topics that differ only by operation, the row's own ordering key — and
// checks that, at the transport's defaults, each row's events arrive in
// one destination, in sequence order, each with its sequence and ordering
// key in headers a plain client reads.
func rowOrderAtDefaults(t *testing.T, s Suite) {
	if s.AtDefaults == nil {
		t.Fatal("deliverytest: Suite.AtDefaults is nil; every transport must show its defaults keep a key in one destination")
	}
	const rows = 20
	prefix := testkit.Name("conf")
	topic := func(op envelope.Operation) string { return prefix + ".loan." + string(op) }
	topics := []string{topic(envelope.Inserted), topic(envelope.Updated), topic(envelope.Deleted)}
	env := NewEnv(t)
	rc := s.AtDefaults(t, topics)
	d := withDelivery(t, rc)
	env.StartRelay(t, d, RelayConfig())
	// One transaction per step, as a service writes: every row inserted,
	// updated twice, deleted. The relay runs meanwhile, so a key's events
	// go out in several batches.
	var all []*envelope.Event
	for _, op := range []envelope.Operation{envelope.Inserted, envelope.Updated, envelope.Updated, envelope.Deleted} {
		ms := make([]envelope.Message, rows)
		for n := range ms {
			ms[n] = envelope.Message{Topic: topic(op), OrderingKey: fmt.Sprintf("%s.Loan:%d", prefix, n),
				Payload: map[string]any{"model": prefix + ".Loan", "operation": op, "pk": n}}
		}
		all = append(all, env.Write(t, ms...)...)
	}
	WaitReceived(t, rc, all, time.Minute)
	byID := map[string]*envelope.Event{}
	for _, e := range all {
		byID[e.ID.String()] = e
	}
	type got struct {
		seq  []int64
		dest map[string]bool
	}
	perKey := map[string]*got{}
	seen := map[string]bool{}
	for _, m := range rc.Received(t) {
		id := m.Headers[delivery.HeaderEventID]
		e := byID[id]
		if e == nil || seen[id] {
			continue // a duplicate: at least once
		}
		seen[id] = true
		if m.Destination == "" {
			t.Fatalf("event %s: the receiver names no destination", id)
		}
		if h := m.Headers[delivery.HeaderSequence]; h != strconv.FormatInt(e.Sequence, 10) {
			t.Errorf("event %s: header %s = %q, want its sequence %d", id, delivery.HeaderSequence, h, e.Sequence)
		}
		if h := m.Headers[delivery.HeaderOrderingKey]; h != e.OrderingKey {
			t.Errorf("event %s: header %s = %q, want its ordering key %q", id, delivery.HeaderOrderingKey, h, e.OrderingKey)
		}
		g := perKey[e.OrderingKey]
		if g == nil {
			g = &got{dest: map[string]bool{}}
			perKey[e.OrderingKey] = g
		}
		g.seq = append(g.seq, e.Sequence)
		g.dest[m.Destination] = true
	}
	for k, g := range perKey {
		if len(g.dest) != 1 {
			t.Fatalf("key %s: its events arrived in %d destinations %v: a consumer has no order between a row's insert and its update", k, len(g.dest), slices.Sorted(maps.Keys(g.dest)))
		}
		if !slices.IsSorted(g.seq) {
			t.Fatalf("key %s: its destination holds sequences %v, not in sequence order", k, g.seq)
		}
	}
}
