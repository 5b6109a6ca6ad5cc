package redisstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/redisstream"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverytest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// read returns the entries of a stream as messages.
func read(t testing.TB, rdb *redis.Client, stream string) []deliverytest.Message {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	xs, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	out := make([]deliverytest.Message, 0, len(xs))
	for _, x := range xs {
		m := deliverytest.Message{Headers: map[string]string{}, Destination: stream}
		m.Body = []byte(x.Values[redisstream.FieldPayload].(string))
		m.Key = x.Values[redisstream.FieldOrderingKey].(string)
		if err := json.Unmarshal([]byte(x.Values[redisstream.FieldHeaders].(string)), &m.Headers); err != nil {
			t.Fatalf("entry %s: headers: %v", x.ID, err)
		}
		if m.Headers[delivery.HeaderEventID] != x.Values[redisstream.FieldID] || m.Headers[delivery.HeaderTopic] != x.Values[redisstream.FieldTopic] ||
			m.Headers[delivery.HeaderSequence] != x.Values[redisstream.FieldSequence] || m.Headers[delivery.HeaderOrderingKey] != m.Key {
			t.Fatalf("entry %s: id/topic/sequence/ordering_key fields %v disagree with the headers %v", x.ID, x.Values, m.Headers)
		}
		out = append(out, m)
	}
	return out
}

// connectedClients is the number of client connections to the server,
// less the reader's own.
func connectedClients(rdb *redis.Client) int {
	info, err := rdb.Info(context.Background(), "clients").Result()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n - 1
		}
	}
	return -1
}

func newReceiver(t testing.TB) *deliverytest.Receiver {
	srv := deliverytest.NewRedisServer(t)
	reader := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = reader.Close() })
	stream := testkit.Name("herald-conf-")
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := redisstream.New(redisstream.Config{URL: srv.URL(), Stream: stream})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: func(t testing.TB) []deliverytest.Message { return read(t, reader, stream) },
		Down:     srv.Stop,
		Up:       srv.Start,
		Outage:   "private redis-server SIGKILLed, then restarted",
		Conns:    func() int { return connectedClients(reader) },
	}
}

// atDefaults is a receiver of a delivery built from a URL alone: it reads
// every stream of its private server with XRANGE.
func atDefaults(t testing.TB, _ []string) *deliverytest.Receiver {
	srv := deliverytest.NewRedisServer(t)
	reader := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = reader.Close() })
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := redisstream.New(redisstream.Config{URL: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: func(t testing.TB) []deliverytest.Message {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			streams, _, err := reader.ScanType(ctx, 0, "*", 1000, "stream").Result()
			if err != nil {
				t.Fatalf("SCAN: %v", err)
			}
			var out []deliverytest.Message
			for _, s := range streams {
				out = append(out, read(t, reader, s)...)
			}
			return out
		},
		Down: srv.Stop,
		Up:   srv.Start,
	}
}

func TestConformance(t *testing.T) {
	deliverytest.Run(t, deliverytest.Suite{NewReceiver: newReceiver, Keyed: true, AtDefaults: atDefaults})
}

func event(topic, key string) *envelope.Event {
	return &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: topic, OrderingKey: key, Payload: []byte(`{"n":1}`)}
}

// sharedClient is a client of the machine's Redis.
func sharedClient(t testing.TB) *redis.Client {
	opt, err := redis.ParseURL(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestStreamPerTopicAndErrorsPerEntry(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := testkit.Name("herald-t-")
	ctx := context.Background()
	// A key of another type makes XADD to it fail: that entry only.
	wrongType := prefix + ".wrongtype"
	if err := rdb.Set(ctx, wrongType, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := redisstream.New(redisstream.Config{Client: rdb, StreamFunc: func(e *envelope.Event) string {
		if e.Topic == "none" {
			return ""
		}
		return prefix + "." + e.Topic
	}})
	if err != nil {
		t.Fatal(err)
	}
	es := []*envelope.Event{event("a", "k1"), event("wrongtype", "k2"), event("b", ""), event("none", "k3")}
	errs := d.DeliverBatch(ctx, es)
	if errs == nil || errs[0] != nil || errs[2] != nil || !strings.Contains(errs[1].Error(), "WRONGTYPE") ||
		!errors.Is(errs[3], delivery.ErrDelivery) || !errors.Is(errs[3], delivery.ErrPermanent) {
		t.Fatalf("errors %v", errs)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), wrongType, prefix+".a", prefix+".b") })
	for _, s := range []string{prefix + ".a", prefix + ".b"} {
		if n := rdb.XLen(ctx, s).Val(); n != 1 {
			t.Fatalf("%s holds %d entries", s, n)
		}
	}
	x := rdb.XRange(ctx, prefix+".a", "-", "+").Val()[0]
	if x.Values["id"] != es[0].ID.String() || x.Values["topic"] != "a" || x.Values["ordering_key"] != "k1" || x.Values["payload"] != `{"n":1}` {
		t.Fatalf("entry %v", x.Values)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the given client must stay open after Close: %v", err)
	}
}

func TestMaxLen(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	stream := testkit.Name("herald-t-")
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	d, err := redisstream.New(redisstream.Config{Client: rdb, Stream: stream, MaxLen: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 10 {
		es := make([]*envelope.Event, 100)
		for i := range es {
			es[i] = event("t", "")
		}
		if errs := d.DeliverBatch(ctx, es); errs != nil {
			t.Fatal(errs)
		}
	}
	// MAXLEN ~ trims whole nodes (100 entries by default): about 10, far
	// below the 1,000 written.
	if n := rdb.XLen(ctx, stream).Val(); n < 10 || n > 200 {
		t.Fatalf("stream holds %d entries after 1,000 with MaxLen 10", n)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for name, cfg := range map[string]redisstream.Config{
		"URL":        {},
		"Client":     {URL: "redis://x", Client: rdb},
		"StreamFunc": {URL: "redis://x", Stream: "s", StreamFunc: func(*envelope.Event) string { return "" }},
		"MaxLen":     {URL: "redis://x", MaxLen: -1},
	} {
		_, err := redisstream.New(cfg)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "redisstream.Config."+name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := redisstream.New(redisstream.Config{URL: "http://x"}); !errors.Is(err, envelope.ErrConfiguration) {
		t.Errorf("bad URL: %v", err)
	}
}

// refuser is a go-redis hook that refuses every pipeline without running
// it, as a circuit breaker or a rate limiter does.
type refuser struct{}

var errRefused = errors.New("circuit open")

func (refuser) DialHook(next redis.DialHook) redis.DialHook { return next }
func (refuser) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (refuser) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { return errRefused }
}

// A pipeline a hook refuses writes nothing: every event of the batch
// fails with the hook's error.
func TestRefusedPipelineFailsEveryEvent(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	rdb.AddHook(refuser{})
	stream := testkit.Name("herald-t-")
	d, err := redisstream.New(redisstream.Config{Client: rdb, Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	es := []*envelope.Event{event("a", "k1"), event("a", "k2")}
	errs := d.DeliverBatch(context.Background(), es)
	if len(errs) != len(es) {
		t.Fatalf("DeliverBatch: %v, want both events to fail (nothing was written)", errs)
	}
	for i, err := range errs {
		if !errors.Is(err, errRefused) {
			t.Errorf("event %d: %v, want the hook's error", i, err)
		}
	}
	if err := d.Deliver(context.Background(), event("a", "k3")); !errors.Is(err, errRefused) {
		t.Errorf("Deliver: %v, want the hook's error", err)
	}
}

// silentListener accepts connections and never answers: a Redis that
// stopped responding, or a link that black-holes its packets.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// A client built from Config.URL ends a batch with its context, not with
// go-redis's own read timeout and retries.
func TestURLClientHonoursContext(t *testing.T) {
	t.Parallel()
	d, err := redisstream.New(redisstream.Config{URL: "redis://" + silentListener(t) + "/0", Stream: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := make(chan []error, 1)
	go func() { res <- d.DeliverBatch(ctx, []*envelope.Event{event("a", "k")}) }()
	select {
	case errs := <-res:
		if len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Fatalf("errors %v, want the context's deadline", errs)
		}
		t.Logf("%v", errs[0])
	case <-time.After(3 * time.Second): // go-redis's ReadTimeout, which bounded it before
		t.Fatal("DeliverBatch still running 3 s into a batch whose context ended after 300 ms")
	}
}

// A Redis that cannot be reached fails the batch within seconds, naming
// the address and the cause, not at the end of the delivery's context.
func TestUnreachableFailsFast(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connection refused
	d, err := redisstream.New(redisstream.Config{URL: "redis://" + addr + "/0", Stream: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = d.Deliver(ctx, event("a", "k"))
	if ctx.Err() != nil || err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("%v (context: %v), want an error naming %s and the refusal before the context ends", err, ctx.Err(), addr)
	}
	t.Logf("%v", err)
}
