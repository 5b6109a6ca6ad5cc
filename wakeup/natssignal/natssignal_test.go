package natssignal_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/internal/wakeuptest"
	"github.com/heraldgo/herald/wakeup/natssignal"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func hostOf(t testing.TB, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		return u.Host + ":4222"
	}
	return u.Host
}

// pair returns a writer-side Wakeup on the machine's server and a
// relay-side one on one subject whose connections go through a proxy the
// test cuts, refuses or stalls (as two processes would have).
func pair(t *testing.T, cfg natssignal.Config) (writer, relaySide *natssignal.Wakeup, proxy *testkit.Proxy) {
	t.Helper()
	raw := testkit.NATSURL(t)
	proxy = testkit.NewProxy(t, hostOf(t, raw))
	cfg.Subject = testkit.Name("herald.t.")
	writer, err := natssignal.New(natssignal.Config{URL: raw, Subject: cfg.Subject})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = writer.Close() })
	u, _ := url.Parse(raw)
	u.Host = proxy.Addr()
	cfg.URL = u.String()
	relaySide, err = natssignal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relaySide.Close() })
	return writer, relaySide, proxy
}

func TestCommitWakesIdleRelay(t *testing.T) {
	t.Parallel()
	w, rw, _ := pair(t, natssignal.Config{})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.WakesIdleRelay(t, env, n, probe, rw.Up)
}

func TestRollbackSendsNothing(t *testing.T) {
	t.Parallel()
	w, rw, _ := pair(t, natssignal.Config{})
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

// TestSurvivesCut: the listening connection cut (the proxy closes it) is
// noticed and reopened; commits after it still wake the idle relay.
func TestSurvivesCut(t *testing.T) {
	t.Parallel()
	w, rw, proxy := pair(t, natssignal.Config{MinBackoff: 10 * time.Millisecond})
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
	w, rw, proxy := pair(t, natssignal.Config{
		Logger:     slog.New(slog.NewTextHandler(logs, nil)),
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, PollWhileDown: 10 * time.Millisecond,
		DialTimeout: time.Second,
	})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.DownThenBack(t, env, n, probe, rw.Up, logs.String, proxy.SetDown)
}

// TestPollsWhileCut: with the subscription's connections cut and refused,
// its relays poll: a commit made meanwhile is delivered within seconds.
func TestPollsWhileCut(t *testing.T) {
	t.Parallel()
	w, rw, proxy := pair(t, natssignal.Config{MinBackoff: 10 * time.Millisecond})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 5*time.Second, proxy.SetDown)
}

// TestHealthCheckFindsStall: a link that stays open but passes nothing
// (a proxy that stops forwarding) is given up after two unanswered
// pings; the relays poll meanwhile and the subscription comes back once
// the link forwards again.
func TestHealthCheckFindsStall(t *testing.T) {
	t.Parallel()
	w, rw, proxy := pair(t, natssignal.Config{MinBackoff: 10 * time.Millisecond, HealthCheck: 300 * time.Millisecond, DialTimeout: time.Second})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 10*time.Second, proxy.Stall)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]natssignal.Config{
		"URL":        {},
		"MaxBackoff": {URL: "nats://127.0.0.1:1", MinBackoff: time.Second, MaxBackoff: time.Millisecond},
	} {
		_, err := natssignal.New(cfg)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "natssignal.Config."+name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
