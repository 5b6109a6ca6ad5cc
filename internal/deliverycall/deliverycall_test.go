package deliverycall_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverycall"
)

// TestCalls: the functions reach package delivery's (its init sets them):
// a panic is a *delivery.PanicError, a delivery past its timeout a
// *delivery.TimeoutError, one error per event in order.
func TestCalls(t *testing.T) {
	ctx := context.Background()
	es := []*envelope.Event{{Sequence: 1, Topic: "a"}, {Sequence: 2, Topic: "panic"}, {Sequence: 3, Topic: "slow"}}
	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		switch e.Topic {
		case "panic":
			panic("boom")
		case "slow":
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if err := deliverycall.Call(ctx, d, es[0]); err != nil {
		t.Fatalf("Call = %v", err)
	}
	var pe *delivery.PanicError
	if err := deliverycall.Call(ctx, d, es[1]); !errors.As(err, &pe) {
		t.Fatalf("Call of a panic = %v, want a *delivery.PanicError", err)
	}
	errs := deliverycall.Each(ctx, d, es, deliverycall.DefaultConcurrency, 20*time.Millisecond)
	var te *delivery.TimeoutError
	if len(errs) != 3 || errs[0] != nil || !errors.As(errs[1], &pe) || !errors.As(errs[2], &te) {
		t.Fatalf("Each = %v", errs)
	}
	r, err := delivery.Router(map[string]delivery.Delivery{"a": d}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := deliverycall.CallBatch(ctx, r, es[:1])
	if len(got) != 1 || got[0] != nil {
		t.Fatalf("CallBatch = %v", got)
	}
}
