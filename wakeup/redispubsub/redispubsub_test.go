package redispubsub_test

import (
	"bufio"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/internal/wakeuptest"
	"github.com/heraldgo/herald/wakeup/redispubsub"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// pair returns a writer-side and a relay-side Wakeup on one channel, each
// with a client of its own (as two processes would have); the relay
// side's client is named so a test can find and kill its connection.
func pair(t *testing.T) (writer, relaySide *redispubsub.Wakeup, name string) {
	t.Helper()
	url := testkit.RedisURL(t)
	ch := testkit.Name("herald:t:")
	writer, err := redispubsub.New(redispubsub.Config{URL: url, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = writer.Close() })
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	name = testkit.Name("herald-t-")
	opt.ClientName = name
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	relaySide, err = redispubsub.New(redispubsub.Config{Client: client, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relaySide.Close() })
	return writer, relaySide, name
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

// TestSurvivesClientKill: CLIENT KILL of the subscription's connection is
// survived; the next commit still wakes the idle relay.
func TestSurvivesClientKill(t *testing.T) {
	t.Parallel()
	w, rw, name := pair(t)
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	admin := redis.NewClient(mustParse(t, testkit.RedisURL(t)))
	defer admin.Close()
	kill := func() {
		ctx := context.Background()
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		killed := 0
		sc := bufio.NewScanner(strings.NewReader(list))
		for sc.Scan() {
			fields := map[string]string{}
			for _, kv := range strings.Fields(sc.Text()) {
				k, v, _ := strings.Cut(kv, "=")
				fields[k] = v
			}
			if fields["name"] == name && fields["sub"] != "0" {
				if err := admin.Do(ctx, "CLIENT", "KILL", "ID", fields["id"]).Err(); err != nil {
					t.Fatal(err)
				}
				killed++
			}
		}
		if killed == 0 {
			t.Fatalf("no subscribed connection named %s in CLIENT LIST:\n%s", name, list)
		}
	}
	wakeuptest.SurvivesKill(t, env, n, probe, rw.Up, true, kill)
}

func mustParse(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestServerDown: with Redis unreachable (a proxy refusing connections)
// the relay polls, the fifth failure in a row is an ERROR, and once
// reachable again commits wake the idle relay.
func TestServerDown(t *testing.T) {
	t.Parallel()
	url := testkit.RedisURL(t)
	opt := mustParse(t, url)
	proxy := testkit.NewProxy(t, opt.Addr)
	ch := testkit.Name("herald:t:")
	writer, err := redispubsub.New(redispubsub.Config{URL: url, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	opt.Addr = proxy.Addr()
	opt.MaxRetries = -1 // fail fast: the wakeup does its own retrying
	opt.DialTimeout = time.Second
	client := redis.NewClient(opt)
	defer client.Close()
	logs := &wakeuptest.Logs{}
	rw, err := redispubsub.New(redispubsub.Config{
		Client:  client,
		Channel: ch, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, PollWhileDown: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	env := wakeuptest.NewEnv(t, writer)
	n, probe := env.Relay(t, rw)
	wakeuptest.DownThenBack(t, env, n, probe, rw.Up, logs.String, proxy.SetDown)
}

// proxied returns a writer-side Wakeup on the server and a relay-side one
// whose client goes through a proxy the test can cut or stall.
func proxied(t *testing.T, cfg redispubsub.Config) (writer, relaySide *redispubsub.Wakeup, proxy *testkit.Proxy) {
	t.Helper()
	url := testkit.RedisURL(t)
	opt := mustParse(t, url)
	proxy = testkit.NewProxy(t, opt.Addr)
	cfg.Channel = testkit.Name("herald:t:")
	writer, err := redispubsub.New(redispubsub.Config{URL: url, Channel: cfg.Channel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = writer.Close() })
	opt.Addr = proxy.Addr()
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	cfg.Client = client
	relaySide, err = redispubsub.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relaySide.Close() })
	return writer, relaySide, proxy
}

// TestPollsWhileCut: with the subscription's connections cut and refused,
// its relays poll: a commit made meanwhile is delivered within seconds.
func TestPollsWhileCut(t *testing.T) {
	t.Parallel()
	w, rw, proxy := proxied(t, redispubsub.Config{MinBackoff: 10 * time.Millisecond})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 5*time.Second, proxy.SetDown)
}

// TestHealthCheckFindsStall: a server that stops answering while TCP
// stays up (a proxy that stops forwarding) is found by the PING after
// HealthCheck of silence; the relays poll meanwhile and the subscription
// comes back once the link forwards again.
func TestHealthCheckFindsStall(t *testing.T) {
	t.Parallel()
	w, rw, proxy := proxied(t, redispubsub.Config{MinBackoff: 10 * time.Millisecond, HealthCheck: 300 * time.Millisecond})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 10*time.Second, proxy.Stall)
}
