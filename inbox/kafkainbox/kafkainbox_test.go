package kafkainbox_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/kafka"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/inbox/kafkainbox"
	"github.com/heraldgo/herald/internal/inboxcrash"
	"github.com/heraldgo/herald/internal/kafkatest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const envBrokers = "HERALD_CRASH_CHILD_BROKERS"

// TestCrash: a consumer process SIGKILLed before, inside and after its
// commit, records from a real relay through Kafka (kfake in the test
// process, or HERALD_KAFKA_BROKERS).
// At CI's size by default; the large variant is
// HERALD_CRASH_EVENTS=120 HERALD_CRASH_KILL_EVERY=30 (see inboxcrash).
func TestCrash(t *testing.T) {
	brokers := kafkatest.Brokers(t, kfake.GroupMinSessionTimeout(100*time.Millisecond))
	inboxcrash.Run(t, inboxcrash.Parent{
		ChildTest: "TestCrashChild",
		Env:       []string{envBrokers + "=" + strings.Join(brokers, ",")},
		Delivery: func(t *testing.T, target string) delivery.Delivery {
			createTopic(t, brokers, target)
			d, err := kafka.New(kafka.Config{Brokers: brokers, Topic: target})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			return d
		},
	})
}

// createTopic creates a topic of three partitions: the consumer commits
// offsets per partition.
func createTopic(t *testing.T, brokers []string, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 3, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// TestCrashChild is TestCrash's consumer process.
func TestCrashChild(t *testing.T) {
	c := inboxcrash.ChildFromEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := kafkainbox.New(c.Inbox, kafkainbox.Config{
		Brokers: strings.Split(os.Getenv(envBrokers), ","), Topics: []string{c.Target}, Group: "crash",
		// Static membership: a restarted child takes its dead
		// predecessor's place at once, without a session timeout.
		Opts: []kgo.Opt{kgo.InstanceID("child"), kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(300 * time.Millisecond)},
		Handler: inbox.Handler[kafkainbox.Message]{Func: func(ctx context.Context, _ *inbox.Inbox, id inbox.Message, _ kafkainbox.Message) (inbox.Outcome, error) {
			return c.Process(ctx, id)
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { c.WaitDone(ctx); cancel() }()
	if err := cons.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
