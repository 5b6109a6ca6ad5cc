package kafkasignal_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/internal/kafkatest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/internal/wakeuptest"
	"github.com/heraldgo/herald/wakeup/kafkasignal"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// pair returns a writer-side Wakeup and a relay-side one whose every
// broker connection goes through a TCP proxy the test can cut.
func pair(t *testing.T, mods ...func(*kafkasignal.Config)) (writer, relaySide *kafkasignal.Wakeup, proxy *testkit.Proxy) {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	if len(brokers) != 1 {
		t.Skip("the proxy test needs a single broker")
	}
	proxy = testkit.NewProxy(t, brokers[0])
	topic := testkit.Name("herald.t.")
	writer, err := kafkasignal.New(kafkasignal.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = writer.Close() })
	var d net.Dialer
	cfg := kafkasignal.Config{
		Topic: topic, MinBackoff: 10 * time.Millisecond,
		ClientOptions: []kgo.Opt{kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, proxy.Addr())
		})},
	}
	for _, m := range mods {
		m(&cfg)
	}
	cfg.Brokers = brokers
	relaySide, err = kafkasignal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relaySide.Close() })
	return writer, relaySide, proxy
}

func TestCommitWakesIdleRelay(t *testing.T) {
	t.Parallel()
	w, rw, _ := pair(t)
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.WakesIdleRelay(t, env, n, probe, rw.Up)
}

func TestRollbackSendsNothing(t *testing.T) {
	t.Parallel()
	w, rw, _ := pair(t)
	env := wakeuptest.NewEnv(t, w)
	rec := &wakeuptest.Recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rw.Listen(ctx, rec.Fn) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testkit.Eventually(t, 30*time.Second, rw.Up, "not subscribed")
	wakeuptest.RollbackSendsNothing(t, env, rec)
}

// TestSurvivesCutConnection: the consumer's connections cut at a TCP
// proxy are noticed at once (the relays are told to poll) and survived;
// the next commit still wakes the idle relay.
func TestSurvivesCutConnection(t *testing.T) {
	t.Parallel()
	w, rw, proxy := pair(t)
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.SurvivesKill(t, env, n, probe, rw.Up, true, proxy.Cut)
}

// TestServerDown: with the server unreachable (a proxy refusing
// connections) the relay polls, the fifth failure in a row is an ERROR,
// and once reachable again commits wake the idle relay.
func TestServerDown(t *testing.T) {
	t.Parallel()
	logs := &wakeuptest.Logs{}
	w, rw, proxy := pair(t, func(c *kafkasignal.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.MinBackoff, c.MaxBackoff, c.PollWhileDown = time.Millisecond, 20*time.Millisecond, 10*time.Millisecond
		c.HealthCheck = 100 * time.Millisecond
	})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.DownThenBack(t, env, n, probe, rw.Up, logs.String, proxy.SetDown)
}

// TestCreatesSignalTopic: the first signal creates the signal topic with
// one partition and a one-minute retention.
func TestCreatesSignalTopic(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := testkit.Name("herald.t.")
	w, err := kafkasignal.New(kafkasignal.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Signal(context.Background(), []string{"x"}); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var retention string
	testkit.Eventually(t, 30*time.Second, func() bool {
		req := kmsg.NewPtrDescribeConfigsRequest()
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType = kmsg.ConfigResourceTypeTopic
		r.ResourceName = topic
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
			return false
		}
		for _, c := range resp.Resources[0].Configs {
			if c.Name == "retention.ms" && c.Value != nil {
				retention = *c.Value
			}
		}
		return retention != ""
	}, "signal topic %s not created", topic)
	if retention != "60000" {
		t.Fatalf("retention.ms = %s, want 60000", retention)
	}
}
