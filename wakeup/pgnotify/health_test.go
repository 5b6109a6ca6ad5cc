package pgnotify_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/internal/wakeuptest"
	"github.com/heraldgo/herald/wakeup/pgnotify"
)

// proxied returns a writer-side Wakeup on the server and a relay-side one
// whose connections go through a proxy the test can cut or stall, on one
// channel.
func proxied(t *testing.T, cfg pgnotify.Config) (writer, relaySide *pgnotify.Wakeup, proxy *testkit.Proxy) {
	t.Helper()
	_, dsn := testkit.Postgres(t) // fails clearly when the server is down
	cfgDSN, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy = testkit.NewProxy(t, cfgDSN.Host+":"+itoa(cfgDSN.Port))
	ch := testkit.Name("herald_t_")
	writer, err = pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = writer.Close() })
	cfg.Channel = ch
	cfg.ConnString = strings.Replace(dsn, cfgDSN.Host+":"+itoa(cfgDSN.Port), proxy.Addr(), 1)
	relaySide, err = pgnotify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relaySide.Close() })
	return writer, relaySide, proxy
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// TestPollsWhileCut: with the listener's connections cut and refused,
// its relays poll: a commit made meanwhile is delivered within seconds.
func TestPollsWhileCut(t *testing.T) {
	t.Parallel()
	w, rw, proxy := proxied(t, pgnotify.Config{MinBackoff: 10 * time.Millisecond})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 5*time.Second, proxy.SetDown)
}

// TestHealthCheckFindsStall: a server that stops answering while TCP
// stays up (a proxy that stops forwarding) is found by the health check —
// the relays poll, a commit made meanwhile is delivered — and the listener
// comes back once the link forwards again.
func TestHealthCheckFindsStall(t *testing.T) {
	t.Parallel()
	w, rw, proxy := proxied(t, pgnotify.Config{MinBackoff: 10 * time.Millisecond, HealthCheck: 300 * time.Millisecond})
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 10*time.Second, proxy.Stall)
}

// TestProbeStaysOffSharedChannel: the NOTIFY a new listening connection
// sends to prove notifications reach it goes to a channel of its own: a
// listener on the shared channel hears topics only.
func TestProbeStaysOffSharedChannel(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.Postgres(t)
	ch := testkit.Name("herald_t_")
	ctx := context.Background()
	raw, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	if _, err := raw.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	listen(t, w)
	waitUp(t, w)
	// Notifications arrive in commit order: once the sentinel, sent
	// after the listener was up, is here, its probe would be too.
	if _, err := raw.Exec(ctx, "SELECT pg_notify($1, 'sentinel')", ch); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		n, err := raw.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("sentinel not heard: %v (heard %q)", err, got)
		}
		got = append(got, n.Payload)
		if n.Payload == "sentinel" {
			break
		}
	}
	if len(got) != 1 {
		t.Fatalf("the shared channel carried %q before the sentinel; want topics only (the probe belongs on a channel of its own)", got[:len(got)-1])
	}
}
