package relaybench_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/delivery/redisstream"
	"github.com/heraldgo/herald/integration/relaybench"
	"github.com/heraldgo/herald/internal/kafkatest"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestDrainWithTransports checks the machinery of cmd/transportbench on a
// small table: each drain through a transport marks every event published
// and the transport holds them all.
func TestDrainWithTransports(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	// relaybench.Fill's topic is library.loan.updated; the delivery's
	// default Kafka topic is its aggregate (delivery.ByAggregate).
	brokers := kafkatest.Brokers(t, kfake.SeedTopics(3, "library.loan"))
	kd, err := kafka.New(kafka.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer kd.Close()
	opt, err := redis.ParseURL(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	stream := testkit.Name("herald-bench-")
	defer rdb.Del(context.Background(), stream)
	rd, err := redisstream.New(redisstream.Config{Client: rdb, Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]delivery.Delivery{"noop": relaybench.NoopBatch{}, "kafka": kd, "redis": rd} {
		if err := relaybench.Reset(ctx, db, "herald_outbox"); err != nil {
			t.Fatal(err)
		}
		if err := relaybench.Fill(ctx, db, "herald_outbox", 300, 7); err != nil {
			t.Fatal(err)
		}
		if _, err := relaybench.DrainWith(ctx, db, "herald_outbox", 300, 100, 1, d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var left int
		if err := db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE published_at IS NULL`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Fatalf("%s: %d events left", name, left)
		}
	}
	if n := rdb.XLen(ctx, stream).Val(); n < 300 {
		t.Fatalf("the stream holds %d entries, want 300", n)
	}
}
