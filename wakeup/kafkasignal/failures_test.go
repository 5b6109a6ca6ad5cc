package kafkasignal_test

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/internal/wakeuptest"
	"github.com/heraldgo/herald/wakeup/kafkasignal"
)

// TestPollsWhileCut: with the consumer's connections cut and refused, its
// relays are told to poll at once — not at the next health check — so a
// commit made meanwhile is delivered within seconds.
func TestPollsWhileCut(t *testing.T) {
	t.Parallel()
	w, rw, proxy := pair(t)
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 5*time.Second, proxy.SetDown)
}

// TestHealthCheckFindsStall: brokers that stop answering while TCP stays
// up (a proxy that stops forwarding) are found after HealthCheck without a
// response; the relays poll meanwhile and the consumer comes back once
// the link forwards again.
func TestHealthCheckFindsStall(t *testing.T) {
	t.Parallel()
	w, rw, proxy := pair(t, func(c *kafkasignal.Config) { c.HealthCheck = 500 * time.Millisecond })
	env := wakeuptest.NewEnv(t, w)
	n, probe := env.Relay(t, rw)
	wakeuptest.PollsWhileCut(t, env, n, probe, rw.Up, 10*time.Second, proxy.Stall)
}

// TestFetchErrorsReported: a fetch the cluster refuses (an ACL denying
// Read: TOPIC_AUTHORIZATION_FAILED) or a signal topic deleted and created
// again (UNKNOWN_TOPIC_OR_PARTITION in between, then UNKNOWN_TOPIC_ID or
// INCONSISTENT_TOPIC_ID: the consumer holds the old topic's id, which
// franz-go never replaces) ends the
// consumer: a WARN names the error, the fifth failure in a row is an
// ERROR (the refusal lasts; the recreated topic is adopted by the next
// consumer), the relays are told to poll, the requests sent meanwhile are
// bounded by the back-off (no spinning), and the consumer rebuilt
// afterwards hears signals again.
func TestFetchErrorsReported(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, want string
		lasting    bool // the cause outlives five sessions
		break_     func(t *testing.T, c *kfake.Cluster, topic string, refuse *atomic.Bool)
		heal       func(t *testing.T, c *kfake.Cluster, topic string, refuse *atomic.Bool)
	}{
		{
			name: "fetch refused", want: "TOPIC_AUTHORIZATION_FAILED", lasting: true,
			break_: func(_ *testing.T, _ *kfake.Cluster, _ string, refuse *atomic.Bool) { refuse.Store(true) },
			heal:   func(_ *testing.T, _ *kfake.Cluster, _ string, refuse *atomic.Bool) { refuse.Store(false) },
		},
		{
			name: "topic recreated", want: "UNKNOWN_TOPIC_ID|INCONSISTENT_TOPIC_ID|UNKNOWN_TOPIC_OR_PARTITION", // as the fetch session goes
			break_: func(t *testing.T, c *kfake.Cluster, topic string, _ *atomic.Bool) {
				if err := c.DeleteTopic(topic); err != nil {
					t.Fatal(err)
				}
				if err := c.CreateTopic(topic, 1, nil); err != nil {
					t.Fatal(err)
				}
			},
			heal: func(*testing.T, *kfake.Cluster, string, *atomic.Bool) {},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			var refuse atomic.Bool
			var metadata, fetches atomic.Int64
			cluster.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
				cluster.KeepControl()
				metadata.Add(1)
				return nil, nil, false
			})
			cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
				cluster.KeepControl()
				fetches.Add(1)
				if !refuse.Load() {
					return nil, nil, false
				}
				r := req.(*kmsg.FetchRequest)
				resp := r.ResponseKind().(*kmsg.FetchResponse)
				for _, rt := range r.Topics {
					st := kmsg.NewFetchResponseTopic()
					st.Topic, st.TopicID = rt.Topic, rt.TopicID
					for _, p := range rt.Partitions {
						sp := kmsg.NewFetchResponseTopicPartition()
						sp.Partition = p.Partition
						sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			topic := testkit.Name("herald.t.")
			logs := &wakeuptest.Logs{}
			w, err := kafkasignal.New(kafkasignal.Config{
				Brokers: cluster.ListenAddrs(),
				Topic:   topic, Logger: slog.New(slog.NewTextHandler(logs, nil)),
				MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			rec := &wakeuptest.Recorder{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = w.Listen(ctx, rec.Fn) }()
			testkit.Eventually(t, 30*time.Second, w.Up, "not subscribed")
			nils := rec.Nils()
			m0, f0 := metadata.Load(), fetches.Load()
			c.break_(t, cluster, topic, &refuse)
			if !testkit.WaitFor(30*time.Second, func() bool {
				out := logs.String()
				if c.lasting {
					return strings.Contains(out, "failures_in_a_row=5") && strings.Contains(out, "level=ERROR")
				}
				return strings.Contains(out, "level=WARN")
			}) {
				t.Fatalf("no WARN (or, for a lasting cause, no ERROR after five failures in a row) within 30s "+
					"(metadata requests %d, fetches %d since); logs:\n%s", metadata.Load()-m0, fetches.Load()-f0, logs)
			}
			if !regexp.MustCompile(c.want).MatchString(logs.String()) {
				t.Fatalf("the logs do not name %s:\n%s", c.want, logs)
			}
			if rec.Nils() <= nils {
				t.Fatal("the relays were not told to poll")
			}
			// A few sessions of a few requests each, not thousands.
			m, f := metadata.Load()-m0, fetches.Load()-f0
			t.Logf("%d metadata requests, %d fetches from the break to the last failure logged", m, f)
			if m > 200 || f > 200 {
				t.Fatalf("%d metadata requests and %d fetches for five failed sessions: the consumer spins", m, f)
			}
			c.heal(t, cluster, topic, &refuse)
			testkit.Eventually(t, 30*time.Second, func() bool {
				_ = w.Signal(ctx, []string{"after"})
				return rec.Count("after") > 0
			}, "the rebuilt consumer hears no signal; logs:\n%s", logs)
		})
	}
}
