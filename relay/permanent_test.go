package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/internal/testkit"
)

// An event no route accepts is dead-lettered at its first attempt, its
// last_error naming the topic, rather than retried MaxAttempts times
// (16 s at the defaults) while it holds its key; a routed event of
// another key is delivered meanwhile.
func TestUnroutedDeadLetteredAtFirstAttempt(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		billing := &recorder{}
		d, err := delivery.Router(map[string]delivery.Delivery{"billing.*": billing}, nil)
		if err != nil {
			t.Fatal(err)
		}
		es := e.enqueue(t, msg("shop.order.inserted", "shop.Order:1", 1), msg("billing.invoice.inserted", "billing.Invoice:1", 2))
		r := e.newRelay(t, d, Config{MaxAttempts: 5})
		start(t, r)
		testkit.Eventually(t, 20*time.Second, func() bool { return e.row(t, es[0].ID).DeadLetteredAt != nil },
			"the unrouted event dead-lettered")
		got := e.row(t, es[0].ID)
		if got.Attempts != 1 {
			t.Errorf("unrouted event dead-lettered after %d attempts, want 1 (a permanent failure is not retried)", got.Attempts)
		}
		if !strings.Contains(got.LastError, `"shop.order.inserted"`) || !strings.Contains(got.LastError, "no route") {
			t.Errorf("last_error %q does not name the topic and the missing route", got.LastError)
		}
		testkit.Eventually(t, 20*time.Second, func() bool { return billing.count() == 1 }, "the routed event delivered")
	})
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	cause := errors.New("no stream")
	err := delivery.Permanent(cause)
	if !errors.Is(err, delivery.ErrPermanent) || !errors.Is(err, cause) || err.Error() != "no stream" {
		t.Fatalf("Permanent(%v) = %v: want both ErrPermanent and the cause, and the cause's text", cause, err)
	}
	if delivery.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
	if again := delivery.Permanent(err); again != err { //nolint:errorlint // the very same value, not wrapped again
		t.Fatal("Permanent of a permanent error wraps it again")
	}
}
