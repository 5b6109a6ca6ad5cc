package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/internal/kafkatest"
	"github.com/heraldgo/herald/internal/testkit"
)

// The test binary doubles as the service: run with HERALD_SERVICE_MAIN=1
// it is main(), so the tests can start it as a process and SIGTERM it.
func TestMain(m *testing.M) {
	if os.Getenv("HERALD_SERVICE_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	testkit.Main(m)
}

// service is a running service process.
type service struct {
	url      string
	cmd      *exec.Cmd
	mu       sync.Mutex
	lines    []string
	exited   chan struct{}
	exitErr  error
	shutdown chan struct{} // closed when it logged "shutting down"
	brokers  string        // with -kafka-fake, the in-process Kafka's address
}

// start runs the service in mode with the given flags and waits until it
// serves (or, for -mode relay, until it started).
func start(t *testing.T, mode string, args ...string) *service {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-mode", mode, "-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "HERALD_SERVICE_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &service{cmd: cmd, exited: make(chan struct{}), shutdown: make(chan struct{})}
	addr := make(chan string, 1)
	relayUp := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		closed := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.lines = append(s.lines, line)
			s.mu.Unlock()
			var rec struct{ Msg, Addr, Brokers string }
			_ = json.Unmarshal([]byte(line), &rec)
			switch rec.Msg {
			case "listening":
				addr <- rec.Addr
			case "relay started":
				relayUp <- struct{}{}
			case "in-process Kafka (kfake) started; its records are lost when the service exits":
				s.mu.Lock()
				s.brokers = rec.Brokers
				s.mu.Unlock()
			case "shutting down":
				if !closed {
					close(s.shutdown)
					closed = true
				}
			}
		}
		s.exitErr = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			s.mu.Lock()
			t.Logf("%s process log:\n%s", mode, strings.Join(s.lines, "\n"))
			s.mu.Unlock()
		}
	})
	if mode != "api" {
		select {
		case <-relayUp:
		case <-s.exited:
			t.Fatalf("service exited: %v", s.exitErr)
		case <-time.After(60 * time.Second):
			t.Fatal(`the relay did not log "relay started" within 60 s`)
		}
	}
	if mode == "relay" {
		return s
	}
	select {
	case a := <-addr:
		s.url = "http://" + a
	case <-s.exited:
		t.Fatalf("service exited: %v", s.exitErr)
	case <-time.After(60 * time.Second):
		t.Fatal("service did not start listening within 60 s")
	}
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (s *service) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("service did not exit after SIGTERM")
	}
	if s.exitErr != nil {
		t.Fatalf("service exited with %v", s.exitErr)
	}
}

// receiver is the billing webhook: it checks each request's signature
// with its own HMAC code and records what it accepted. While blocked, a
// request waits (after arriving) until unblocked.
type receiver struct {
	*httptest.Server
	secret  string
	mu      sync.Mutex
	got     []hook
	bad     []string
	block   chan struct{} // nil = answer at once
	arrived chan string   // event ids of requests that arrived while blocked
}

type hook struct {
	EventID, Topic string
	Body           []byte
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{secret: secret, arrived: make(chan string, 16)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		mac := hmac.New(sha256.New, []byte(r.secret))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(req.Header.Get("herald-signature")), []byte(want)) {
			r.mu.Lock()
			r.bad = append(r.bad, req.Header.Get("herald-signature"))
			r.mu.Unlock()
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		r.mu.Lock()
		block := r.block
		r.mu.Unlock()
		if block != nil {
			r.arrived <- req.Header.Get("herald-event-id")
			<-block
		}
		r.mu.Lock()
		r.got = append(r.got, hook{EventID: req.Header.Get("herald-event-id"), Topic: req.Header.Get("herald-topic"), Body: body})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) hooks() []hook {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hook(nil), r.got...)
}

// post sends a JSON command and returns the status and the decoded answer.
func post(t *testing.T, url, body, key string) (int, Result) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res Result
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &res)
	return resp.StatusCode, res
}

// consumer reads the shop's Kafka topic from the start.
type consumer struct {
	cl      *kgo.Client
	mu      sync.Mutex
	records []*kgo.Record
}

func newConsumer(t *testing.T, brokers []string, topic string) *consumer {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{cl: cl}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			c.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { c.records = append(c.records, r) })
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return c
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// topics returns, for each herald topic seen, the event ids received.
func (c *consumer) byTopic() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]string{}
	for _, r := range c.records {
		out[header(r, "herald-topic")] = append(out[header(r, "herald-topic")], header(r, "herald-event-id"))
	}
	return out
}

func (c *consumer) find(eventID string) *kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.records {
		if header(r, "herald-event-id") == eventID {
			return r
		}
	}
	return nil
}

// kafkaTopic is the Kafka topic of an order's events at the service's
// defaults: their aggregate's.
const kafkaTopic = "shop.order"

func servers(t *testing.T) (dsn string, sqlDB *sql.DB, brokers []string) {
	t.Helper()
	sqlDB, dsn = testkit.Postgres(t)
	brokers = kafkatest.Brokers(t, kfake.SeedTopics(3, kafkaTopic))
	return dsn, sqlDB, brokers
}

// inOrder checks that the records of one order's key are in one partition
// of kafkaTopic, in herald-sequence order, and returns their herald topics.
func (c *consumer) inOrder(t *testing.T, key string) []string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var topics []string
	partition, last := int32(-1), int64(0)
	seen := map[string]bool{}
	for _, r := range c.records {
		if string(r.Key) != key || seen[header(r, "herald-event-id")] {
			continue
		}
		seen[header(r, "herald-event-id")] = true
		if partition >= 0 && r.Partition != partition {
			t.Fatalf("key %s: records in partitions %d and %d", key, partition, r.Partition)
		}
		partition = r.Partition
		seq, err := strconv.ParseInt(header(r, "herald-sequence"), 10, 64)
		if err != nil || seq <= last {
			t.Fatalf("key %s: herald-sequence %q after %d: not in sequence order", key, header(r, "herald-sequence"), last)
		}
		if got := header(r, "herald-ordering-key"); got != key {
			t.Fatalf("key %s: herald-ordering-key %q", key, got)
		}
		last = seq
		topics = append(topics, header(r, "herald-topic"))
	}
	return topics
}

// TestService drives the service end to end: orders through its API,
// idempotent retries and conflicts, shop.* events to Kafka, billing.*
// events to a webhook that checks their signatures, and a SIGTERM during
// a delivery that lets the relay finish its batch.
func TestService(t *testing.T) {
	t.Parallel()
	dsn, sqlDB, brokers := servers(t)
	const secret = "s3cret"
	hooks := newReceiver(t, secret)
	svc := start(t, "all", "-dsn", dsn, "-kafka", strings.Join(brokers, ","),
		"-webhook-url", hooks.URL, "-webhook-secret", secret, "-webhook-allow-private")
	shop := newConsumer(t, brokers, kafkaTopic)

	// Idempotency-Key: a retry answers the same event; another body with
	// the same key is a conflict.
	const order = `{"customer":"ada","item":"book","qty":2}`
	status, first := post(t, svc.url+"/orders", order, "order-ada-1")
	if status != http.StatusCreated || first.EventID == "" || first.OrderID == 0 {
		t.Fatalf("POST /orders = %d %+v", status, first)
	}
	status, again := post(t, svc.url+"/orders", order, "order-ada-1")
	if status != http.StatusCreated || again != first {
		t.Fatalf("retried POST /orders = %d %+v, want %+v", status, again, first)
	}
	status, _ = post(t, svc.url+"/orders", `{"customer":"ada","item":"book","qty":3}`, "order-ada-1")
	if status != http.StatusConflict {
		t.Fatalf("same key, other body: %d, want 409", status)
	}
	status, other := post(t, svc.url+"/orders", order, "") // no key: a new order
	if status != http.StatusCreated || other.EventID == first.EventID || other.OrderID == first.OrderID {
		t.Fatalf("POST without a key = %d %+v", status, other)
	}

	// shop.* reach Kafka: the placed event once (the retry added none) and
	// the captured inserts, keyed by order.
	testkit.Eventually(t, 60*time.Second, func() bool {
		by := shop.byTopic()
		return len(by["shop.order.placed"]) == 2 && len(by["shop.order.inserted"]) == 2
	}, "shop events not in Kafka: %v", shop.byTopic())
	rec := shop.find(first.EventID)
	if rec == nil || string(rec.Key) != fmt.Sprintf("order:%d", first.OrderID) ||
		!bytes.Contains(rec.Value, []byte(`"customer": "ada"`)) && !bytes.Contains(rec.Value, []byte(`"customer":"ada"`)) {
		t.Fatalf("placed record %+v", rec)
	}

	// billing.* reach the webhook, signed.
	cancelURL := fmt.Sprintf("%s/orders/%d/cancel", svc.url, first.OrderID)
	status, cancelled := post(t, cancelURL, `{"reason":"changed my mind"}`, "cancel-ada-1")
	if status != http.StatusOK {
		t.Fatalf("cancel = %d", status)
	}
	status, again = post(t, cancelURL, `{"reason":"changed my mind"}`, "cancel-ada-1")
	if status != http.StatusOK || again != cancelled {
		t.Fatalf("retried cancel = %d %+v, want %+v", status, again, cancelled)
	}
	testkit.Eventually(t, 60*time.Second, func() bool {
		for _, h := range hooks.hooks() {
			if h.EventID == cancelled.EventID && h.Topic == "billing.refund.requested" {
				return true
			}
		}
		return false
	}, "refund not delivered to the webhook")
	testkit.Eventually(t, 60*time.Second, func() bool { return len(shop.byTopic()["shop.order.updated"]) == 1 },
		"the captured cancel not in Kafka: %v", shop.byTopic())
	// One order's events, captured and enqueued, share its key: one topic,
	// one partition, in sequence order (insert and placed in one
	// transaction, then the update).
	if got := shop.inOrder(t, fmt.Sprintf("order:%d", first.OrderID)); len(got) != 3 || got[2] != "shop.order.updated" {
		t.Fatalf("order %d: records %v, want its insert and placed events, then its update", first.OrderID, got)
	}
	hooks.mu.Lock()
	bad := hooks.bad
	hooks.mu.Unlock()
	if len(bad) != 0 {
		t.Fatalf("requests with bad signatures: %v", bad)
	}

	// SIGTERM while a delivery is in flight: the relay finishes its batch.
	release := make(chan struct{})
	hooks.mu.Lock()
	hooks.block = release
	hooks.mu.Unlock()
	status, late := post(t, fmt.Sprintf("%s/orders/%d/cancel", svc.url, other.OrderID), `{}`, "")
	if status != http.StatusOK {
		t.Fatalf("cancel = %d", status)
	}
	if id := <-hooks.arrived; id != late.EventID {
		t.Fatalf("blocked delivery of %s, want %s", id, late.EventID)
	}
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-svc.shutdown
	close(release)
	select {
	case <-svc.exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("service did not exit after SIGTERM")
	}
	if svc.exitErr != nil {
		t.Fatalf("service exited with %v", svc.exitErr)
	}
	var published sql.NullTime
	if err := sqlDB.QueryRow(`SELECT published_at FROM herald_outbox WHERE id = $1`, late.EventID).Scan(&published); err != nil {
		t.Fatal(err)
	}
	if !published.Valid {
		t.Fatal("the event delivered during shutdown was not marked: the relay did not finish its batch")
	}
}

// TestRelayProcess: the API and the relay in processes of their own; the
// API's commit wakes the relay process through NOTIFY.
func TestRelayProcess(t *testing.T) {
	t.Parallel()
	dsn, _, brokers := servers(t)
	hooks := newReceiver(t, "x")
	common := []string{"-dsn", dsn, "-kafka", strings.Join(brokers, ","),
		"-webhook-url", hooks.URL, "-webhook-secret", "x", "-webhook-allow-private"}
	api := start(t, "api", common...)
	rel := start(t, "relay", common...)
	shop := newConsumer(t, brokers, kafkaTopic)
	status, res := post(t, api.url+"/orders", `{"customer":"bob","item":"pen","qty":1}`, "k")
	if status != http.StatusCreated {
		t.Fatalf("POST /orders = %d", status)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return shop.find(res.EventID) != nil }, "the relay process did not deliver")
	api.stop(t)
	rel.stop(t)
}

// TestKafkaFake: with -kafka-fake the service needs no Kafka; its
// in-process one, at the address it logs, holds the shop's events.
func TestKafkaFake(t *testing.T) {
	t.Parallel()
	dsn, sqlDB, _ := servers(t)
	hooks := newReceiver(t, "x")
	svc := start(t, "all", "-dsn", dsn, "-kafka", "127.0.0.1:1", "-kafka-fake",
		"-webhook-url", hooks.URL, "-webhook-secret", "x", "-webhook-allow-private")
	svc.mu.Lock()
	brokers := svc.brokers
	svc.mu.Unlock()
	if brokers == "" {
		t.Fatal("no in-process Kafka address logged before the relay started")
	}
	shop := newConsumer(t, strings.Split(brokers, ","), kafkaTopic)
	status, res := post(t, svc.url+"/orders", `{"customer":"cy","item":"ink","qty":1}`, "")
	if status != http.StatusCreated {
		t.Fatalf("POST /orders = %d", status)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return shop.find(res.EventID) != nil }, "the placed event not in the in-process Kafka")
	// The relay marks a batch after the broker acknowledged it: the mark
	// follows the record's arrival, so wait for it rather than read once.
	var lastErr error
	if !testkit.WaitFor(30*time.Second, func() bool {
		var published sql.NullTime
		lastErr = sqlDB.QueryRow(`SELECT published_at FROM herald_outbox WHERE id = $1`, res.EventID).Scan(&published)
		return lastErr == nil && published.Valid
	}) {
		t.Fatalf("placed event not marked published within 30s (last error: %v)", lastErr)
	}
	svc.stop(t)
}

// TestReadModelOnce: with -read-model the service counts its own
// shop.order.placed events into customer_totals; a placed event Kafka
// delivers again (produced a second time here) counts once.
func TestReadModelOnce(t *testing.T) {
	t.Parallel()
	dsn, sqlDB, brokers := servers(t)
	hooks := newReceiver(t, "x")
	svc := start(t, "all", "-dsn", dsn, "-kafka", strings.Join(brokers, ","), "-read-model",
		"-webhook-url", hooks.URL, "-webhook-secret", "x", "-webhook-allow-private")
	shop := newConsumer(t, brokers, kafkaTopic)
	var first Result
	for i, body := range []string{`{"customer":"ann","item":"ink","qty":2}`, `{"customer":"ann","item":"pen","qty":1}`, `{"customer":"bob","item":"ink","qty":5}`} {
		status, res := post(t, svc.url+"/orders", body, "")
		if status != http.StatusCreated {
			t.Fatalf("POST /orders = %d", status)
		}
		if i == 0 {
			first = res
		}
	}
	total := func(customer string) (orders, items int) {
		_ = sqlDB.QueryRow(`SELECT orders, items FROM customer_totals WHERE customer = $1`, customer).Scan(&orders, &items)
		return orders, items
	}
	testkit.Eventually(t, 60*time.Second, func() bool {
		ao, ai := total("ann")
		bo, bi := total("bob")
		return ao == 2 && ai == 3 && bo == 1 && bi == 5
	}, "customer_totals: ann 2 orders 3 items, bob 1 order 5 items")

	// Kafka delivers ann's first order again, then a new event on the same
	// partition (the same record key): once that one is counted, the
	// repeat before it was handled.
	var again *kgo.Record
	testkit.Eventually(t, 30*time.Second, func() bool { again = shop.find(first.EventID); return again != nil }, "the first placed event in Kafka")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dup := &kgo.Record{Topic: kafkaTopic, Key: again.Key, Value: again.Value, Headers: again.Headers}
	var hs []kgo.RecordHeader
	for _, h := range again.Headers {
		if h.Key == "herald-event-id" {
			h.Value = []byte("sentinel-" + first.EventID)
		}
		hs = append(hs, h)
	}
	sentinel := &kgo.Record{Topic: kafkaTopic, Key: again.Key, Value: []byte(`{"order_id":0,"customer":"zed","item":"ink","qty":1}`), Headers: hs}
	if err := cl.ProduceSync(context.Background(), dup, sentinel).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, func() bool { o, _ := total("zed"); return o == 1 }, "the sentinel counted")
	if o, i := total("ann"); o != 2 || i != 3 {
		t.Fatalf("ann: %d orders, %d items after a repeat; want 2 and 3", o, i)
	}
	svc.stop(t)
}
