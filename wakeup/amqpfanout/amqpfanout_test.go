package amqpfanout_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/internal/wakeuptest"
	"github.com/heraldgo/herald/wakeup/amqpfanout"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// pair returns a writer-side Wakeup and a relay-side one whose connection
// goes through a TCP proxy the test can cut, on one exchange of the
// test's own.
func pair(t *testing.T, mods ...func(*amqpfanout.Config)) (writer, relaySide *amqpfanout.Wakeup, proxy *testkit.Proxy) {
	t.Helper()
	raw := testkit.AMQPURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":5672"
	}
	proxy = testkit.NewProxy(t, host)
	u.Host = proxy.Addr()
	ex := testkit.Name("herald.t.")
	writer, err = amqpfanout.New(amqpfanout.Config{URL: raw, Exchange: ex})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = writer.Close() })
	cfg := amqpfanout.Config{Exchange: ex, MinBackoff: 10 * time.Millisecond}
	for _, m := range mods {
		m(&cfg)
	}
	cfg.URL = u.String()
	relaySide, err = amqpfanout.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relaySide.Close() })
	t.Cleanup(func() { deleteExchange(t, raw, ex) })
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

// TestSurvivesCutConnection: the listener's connection cut at a TCP proxy
// is survived; the next commit still wakes the idle relay.
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
	w, rw, proxy := pair(t, func(c *amqpfanout.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.MinBackoff, c.MaxBackoff, c.PollWhileDown = time.Millisecond, 20*time.Millisecond, 10*time.Millisecond
	})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.DownThenBack(t, env, n, probe, rw.Up, logs.String, proxy.SetDown)
}

// TestPollsWhileCut: with the listener's connections cut and refused, its
// relays poll: a commit made meanwhile is delivered within seconds.
func TestPollsWhileCut(t *testing.T) {
	t.Parallel()
	w, rw, proxy := pair(t)
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 5*time.Second, proxy.SetDown)
}

// TestHeartbeatFindsStall: a broker that stops answering while TCP stays
// up (a proxy that stops forwarding) is found by the AMQP heartbeat; the
// relays poll meanwhile and the listener comes back once the link
// forwards again.
func TestHeartbeatFindsStall(t *testing.T) {
	t.Parallel()
	w, rw, proxy := pair(t, func(c *amqpfanout.Config) { c.Heartbeat, c.DialTimeout = time.Second, 2*time.Second })
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 15*time.Second, proxy.Stall)
}

// TestCloseWithStalledBroker: Close returns while the broker has stopped
// reading (RabbitMQ's memory or disk alarm) in the middle of a publish.
func TestCloseWithStalledBroker(t *testing.T) {
	t.Parallel()
	_, rw, proxy := pair(t, func(c *amqpfanout.Config) { c.SignalTimeout, c.Logger = time.Second, slog.New(slog.DiscardHandler) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rw.Listen(ctx, func([]string) {}) }()
	testkit.Eventually(t, 30*time.Second, rw.Up, "not subscribed")
	if err := rw.Signal(context.Background(), []string{"warm"}); err != nil {
		t.Fatal(err)
	}
	proxy.StopReading(true)
	defer proxy.StopReading(false)
	// More than the socket buffers hold, so that the publish blocks.
	topics := make([]string, 20000)
	for i := range topics {
		topics[i] = fmt.Sprintf("%04d.%s", i, strings.Repeat("t", 1000))
	}
	if err := rw.Signal(context.Background(), topics); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		start := time.Now()
		cancel()
		err := <-done
		t.Logf("Listen returned after %s: %v", time.Since(start), err)
		closed <- rw.Close()
		t.Logf("Close returned after %s", time.Since(start))
	}()
	select {
	case err := <-closed:
		t.Logf("Close: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Listen and Close still blocked 20 s into a broker that stopped reading")
	}
}
