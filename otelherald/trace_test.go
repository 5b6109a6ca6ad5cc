package otelherald_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/amqp"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/delivery/redisstream"
	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	_ "github.com/heraldgo/herald/internal/capturecases/entcc/ent/runtime"
	"github.com/heraldgo/herald/internal/kafkatest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/otelherald"
	"github.com/heraldgo/herald/relay"
)

// TraceOrder is a captured model of the trace test.
type TraceOrder struct {
	ID     int64
	Status string
}

func (TraceOrder) ChangeCapture() envelope.Options {
	return envelope.Options{Namespace: "trace"}
}

func openGorm(t *testing.T, d envelope.Dialect, db *sql.DB) *gorm.DB {
	t.Helper()
	dial := sqlite.New(sqlite.Config{Conn: db})
	if d == envelope.Postgres {
		dial = postgres.New(postgres.Config{Conn: db})
	}
	g, err := gorm.Open(dial, &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// One trace from a request span through a GORM insert and update of a
// captured model, an ent Create and update (entcapture) and Enqueues, the relay with otelherald.Delivery around
// Kafka (kfake), a webhook, RabbitMQ and Redis Streams, to the consumers' spans, which continue the
// trace from the traceparent they receive. On PostgreSQL GORM's insert
// and update and ent's Create are the fused statements that build their
// events in SQL; on SQLite GORM's update is.
func TestTraceFromRequestToConsumer(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	t.Cleanup(otelherald.RecordTraceContext(prop))
	for _, d := range []envelope.Dialect{envelope.SQLite, envelope.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			if err := envelope.Migrate(ctx, db, d, ""); err != nil {
				t.Fatal(err)
			}
			g := openGorm(t, d, db)
			if err := g.AutoMigrate(&TraceOrder{}); err != nil {
				t.Fatal(err)
			}
			if err := g.Use(gormcapture.New(gormcapture.Config{Models: []any{&TraceOrder{}}})); err != nil {
				t.Fatal(err)
			}

			ec := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(map[envelope.Dialect]string{envelope.SQLite: dialect.SQLite, envelope.Postgres: dialect.Postgres}[d], db), entcapture.Config{})))
			if err := ec.Schema.Create(ctx); err != nil {
				t.Fatal(err)
			}

			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(ctx) })
			tracer := tp.Tracer("test")

			// The request: its writes carry its span's context.
			rctx, req := tracer.Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
			rctx = trace.ContextWithSpan(rctx, req)
			o := TraceOrder{Status: "new"}
			if err := g.WithContext(rctx).Create(&o).Error; err != nil {
				t.Fatal(err)
			}
			if err := g.WithContext(rctx).Model(&TraceOrder{}).Where("status = ?", "new").Update("status", "paid").Error; err != nil {
				t.Fatal(err)
			}
			// ent, on entcapture.Driver: a Create (fused on PostgreSQL) and an update.
			l, err := ec.Loan.Create().SetStatus("lent").SetDays(3).SetReturned(false).Save(rctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ec.Loan.UpdateOneID(l.ID).SetStatus("back").Save(rctx); err != nil {
				t.Fatal(err)
			}
			for _, topic := range []string{"trace.mail", "trace.amqp", "trace.redis"} {
				if _, err := gormcapture.Enqueue(g.WithContext(rctx), envelope.Message{Topic: topic, Payload: map[string]any{"to": "ann"}}); err != nil {
					t.Fatal(err)
				}
			}
			req.End()
			reqSC := req.SpanContext()

			// Every event holds the request's traceparent.
			rows, err := db.QueryContext(ctx, `SELECT topic, headers FROM herald_outbox ORDER BY sequence`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var topics []string // every event's, in sequence order
			want := map[string]bool{"trace.trace_order.inserted": true, "trace.trace_order.updated": true, "trace.mail": true, "trace.amqp": true, "trace.redis": true}
			for rows.Next() {
				var topic, hs string
				if err := rows.Scan(&topic, &hs); err != nil {
					t.Fatal(err)
				}
				var h map[string]string
				if err := json.Unmarshal([]byte(hs), &h); err != nil {
					t.Fatal(err)
				}
				sc := trace.SpanContextFromContext(prop.Extract(ctx, propagation.MapCarrier(h)))
				if sc.TraceID() != reqSC.TraceID() || sc.SpanID() != reqSC.SpanID() {
					t.Errorf("event %s: headers %v, not the request's context %s/%s", topic, h, reqSC.TraceID(), reqSC.SpanID())
				}
				delete(want, topic)
				topics = append(topics, topic)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(want) > 0 || len(topics) != 7 {
				t.Fatalf("no event of %v; events %v, want 5 and ent's 2", want, topics)
			}

			// The consumers: each starts its span from what it received.
			var (
				mu        sync.Mutex
				consumers = map[string]trace.SpanContext{} // topic -> the consumer span
			)
			consume := func(topic string, carrier propagation.TextMapCarrier) {
				cctx := prop.Extract(ctx, carrier)
				_, span := tracer.Start(cctx, topic+" process", trace.WithSpanKind(trace.SpanKindConsumer))
				span.End()
				mu.Lock()
				consumers[topic] = span.SpanContext()
				mu.Unlock()
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				consume(r.Header.Get(delivery.HeaderTopic), propagation.HeaderCarrier(r.Header))
			}))
			t.Cleanup(srv.Close)
			hook, err := webhook.New(webhook.Config{URL: srv.URL, AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = hook.Close() })
			ktopic := testkit.Name("trace")
			brokers := kafkatest.Brokers(t, kfake.SeedTopics(1, ktopic))
			kd, err := kafka.New(kafka.Config{Brokers: brokers, Topic: ktopic})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = kd.Close() })
			// RabbitMQ: a queue bound to the exchange, consumed as it comes.
			exchange := testkit.Name("herald-trace-")
			conn, err := amqp091.Dial(testkit.AMQPURL(t))
			if err != nil {
				t.Fatalf("RabbitMQ: %v", err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil); err != nil {
				t.Fatal(err)
			}
			q, err := ch.QueueDeclare("", false, true, true, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
				t.Fatal(err)
			}
			msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for m := range msgs {
					h := propagation.MapCarrier{}
					for k, v := range m.Headers {
						h[k] = fmt.Sprint(v)
					}
					consume(h[delivery.HeaderTopic], h)
				}
			}()
			ad, err := amqp.New(amqp.Config{URL: testkit.AMQPURL(t), Exchange: exchange})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ad.Close() })
			stream := testkit.Name("herald-trace-")
			rd, err := redisstream.New(redisstream.Config{URL: testkit.RedisURL(t), Stream: stream})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rd.Close() })

			cfg := otelherald.TraceConfig{TracerProvider: tp, Propagator: prop}
			with := func(d delivery.Delivery, system string) delivery.Delivery {
				c := cfg
				c.System = system
				return otelherald.Delivery(d, c)
			}
			traced := with(kd, "kafka")
			if _, ok := traced.(delivery.BatchDelivery); !ok {
				t.Fatal("otelherald.Delivery of a BatchDelivery is not one")
			}
			router, err := delivery.Router(map[string]delivery.Delivery{"trace.mail": with(hook, "webhook"),
				"trace.amqp": with(ad, "rabbitmq"), "trace.redis": with(rd, "redis")}, traced)
			if err != nil {
				t.Fatal(err)
			}
			r, err := relay.New(db, router, relay.Config{Name: "traces", MinPollInterval: time.Millisecond, MaxPollInterval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(ktopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			deadline := time.Now().Add(30 * time.Second)
			for got := 0; got < len(topics)-3; {
				pctx, cancel := context.WithDeadline(ctx, deadline)
				fs := cl.PollFetches(pctx)
				cancel()
				if time.Now().After(deadline) {
					t.Fatalf("%d Kafka records in 30 s, want %d", got, len(topics)-3)
				}
				fs.EachRecord(func(rec *kgo.Record) {
					h := propagation.MapCarrier{}
					topic := ""
					for _, kh := range rec.Headers {
						h[kh.Key] = string(kh.Value)
						if kh.Key == delivery.HeaderTopic {
							topic = string(kh.Value)
						}
					}
					consume(topic, h)
					got++
				})
			}
			// Redis: the stream read once the relay has delivered it.
			opt, err := redis.ParseURL(testkit.RedisURL(t))
			if err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(opt)
			t.Cleanup(func() { _ = rdb.Del(ctx, stream).Err(); _ = rdb.Close() })
			for {
				xs, err := rdb.XRange(ctx, stream, "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				if len(xs) == 1 {
					var h map[string]string
					if err := json.Unmarshal([]byte(fmt.Sprint(xs[0].Values[redisstream.FieldHeaders])), &h); err != nil {
						t.Fatal(err)
					}
					consume(h[delivery.HeaderTopic], propagation.MapCarrier(h))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d Redis stream entries in 30 s, want 1", len(xs))
				}
				time.Sleep(5 * time.Millisecond)
			}
			for {
				mu.Lock()
				n := len(consumers)
				mu.Unlock()
				if n == len(topics) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d consumer spans in 30 s, want %d", n, len(topics))
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := r.Stop(ctx); err != nil {
				t.Fatal(err)
			}

			// consumer -> producer "<topic> send" -> request, one trace.
			byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			for _, s := range rec.Ended() {
				byID[s.SpanContext().SpanID()] = s
			}
			for topic, c := range consumers {
				cs := byID[c.SpanID()]
				if cs == nil {
					t.Fatalf("%s: consumer span not recorded", topic)
				}
				p := byID[cs.Parent().SpanID()]
				if p == nil {
					t.Fatalf("%s: the consumer's parent %s is not a recorded span", topic, cs.Parent().SpanID())
				}
				if p.SpanKind() != trace.SpanKindProducer || p.Name() != topic+" send" || p.Status().Code == codes.Error {
					t.Errorf("%s: parent span %q kind %s status %v", topic, p.Name(), p.SpanKind(), p.Status())
				}
				if p.Parent().SpanID() != reqSC.SpanID() || p.SpanContext().TraceID() != reqSC.TraceID() || c.TraceID() != reqSC.TraceID() {
					t.Errorf("%s: producer's parent %s, trace %s; consumer trace %s; request %s/%s", topic,
						p.Parent().SpanID(), p.SpanContext().TraceID(), c.TraceID(), reqSC.TraceID(), reqSC.SpanID())
				}
				attrs := map[attribute.Key]string{}
				for _, kv := range p.Attributes() {
					attrs[kv.Key] = kv.Value.String()
				}
				system := map[string]string{"trace.mail": "webhook", "trace.amqp": "rabbitmq", "trace.redis": "redis"}[topic]
				if system == "" {
					system = "kafka"
				}
				if attrs["messaging.system"] != system || attrs["messaging.destination.name"] != topic || len(attrs["messaging.message.id"]) != 36 {
					t.Errorf("%s: producer span attributes %v", topic, attrs)
				}
			}
		})
	}
}
