package kafkasignal_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/internal/kafkatest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/internal/wakeuptest"
	"github.com/heraldgo/herald/wakeup/kafkasignal"
)

// TestFirstDeliveryAfterOutage: writer and relay both reach Kafka through
// a link that goes down and comes back; a commit made right after the link
// is back is delivered: by a poll (the consumer is down, so its relays
// poll every second) or by its signal once the clients reconnect, at the
// Wakeup's defaults. It logs the figure:
//
//	go test -count=1 -run TestFirstDeliveryAfterOutage -v ./wakeup/kafkasignal/
//
// Four runs on kfake, down about 3 s: 0.47–1.05 s. Issue 19 measured
// 3.2–4.5 s before the consumer noticed a broken link at once and the
// clients retried after at most 1 s (franz-go's default backoff is 250 ms
// to 5 s).
func TestFirstDeliveryAfterOutage(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	if len(brokers) != 1 {
		t.Skip("the proxy test needs a single broker")
	}
	proxy := testkit.NewProxy(t, brokers[0])
	var d net.Dialer
	cfg := kafkasignal.Config{
		Topic: testkit.Name("herald.t."),
		ClientOptions: []kgo.Opt{kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, proxy.Addr())
		})},
	}
	cfg.Brokers = brokers
	writer, err := kafkasignal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	logs := &wakeuptest.Logs{}
	relayCfg := cfg
	relayCfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	relaySide, err := kafkasignal.New(relayCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer relaySide.Close()
	env := wakeuptest.NewEnv(t, writer)
	n, probe := env.Relay(t, relaySide)
	wakeuptest.WakesIdleRelay(t, env, n, probe, relaySide.Up)

	proxy.SetDown(true)
	// Down for about 3 s: until the consumer failed five times in a row
	// (back-off 100 ms doubling), a produce retrying through it.
	if err := writer.Signal(context.Background(), []string{"during"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, func() bool { return strings.Contains(logs.String(), "failures_in_a_row=5") },
		"the consumer did not fail five times in a row; logs:\n%s", logs)
	proxy.SetDown(false)
	want := n.Load() + 1
	start := time.Now()
	if err := env.DB.Create(&wakeuptest.Loan{Book: "right after"}).Error; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return n.Load() >= want }, "the commit after the outage was not delivered")
	t.Logf("first delivery %s after the link came back", time.Since(start).Round(time.Millisecond))
	testkit.Eventually(t, 30*time.Second, relaySide.Up, "the consumer did not come back")
}
