// Package kafkatest gives tests a Kafka: the brokers named by
// HERALD_KAFKA_BROKERS, else an in-process kfake cluster.
//
// It is apart from internal/testkit, and a module of its own, so that the
// tests of herald's core packages, which import testkit, do not put
// franz-go and kfake into the go.sum of every program that imports those
// packages (go mod tidy keeps checksums for what the tests of a program's
// dependencies import), and the core's go.mod does not require them.
package kafkatest

import (
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldgo/herald/internal/testkit"
)

// Brokers returns broker addresses: HERALD_KAFKA_BROKERS when set, else an
// in-process kfake cluster closed when the test ends.
func Brokers(t testing.TB, opts ...kfake.Opt) []string {
	t.Helper()
	if v := os.Getenv(testkit.EnvKafka); v != "" {
		if testing.Short() {
			t.Skip("needs Kafka; skipped with -short")
		}
		return strings.Split(v, ",")
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}
