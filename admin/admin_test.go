package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// TestListFiltersAndPages lists dead letters a real relay made, by each
// filter, and pages through them by keyset without a repeat or a gap.
func TestListFiltersAndPages(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		before := time.Now().Add(-time.Second)
		evs := e.enqueue(t,
			msg("shop.order", "o1", map[string]any{"fail": "timeout"}),
			msg("shop.order", "o2", map[string]any{"fail": "503"}),
			msg("shop.refund", "", map[string]any{"fail": "timeout"}),
			msg("mail.sent", "", map[string]any{"fail": "bounce"}),
			msg("mail.sent", "", map[string]any{"ok": true}),
		)
		e.waitDead(t, evs[:4]...)
		waitFor(t, "the healthy event delivered", func() bool { return e.recv.delivered(evs[4].ID) })

		ids := func(p admin.Page) []uuid.UUID {
			var out []uuid.UUID
			for _, ev := range p.Events {
				out = append(out, ev.ID)
			}
			return out
		}
		for _, c := range []struct {
			name string
			q    admin.Query
			want []*envelope.Event
		}{
			{"every dead letter", admin.Query{}, evs[:4]},
			{"topic prefix", admin.Query{Topics: []string{"shop.*"}}, evs[:3]},
			{"topic name", admin.Query{Topics: []string{"mail.sent"}}, evs[3:4]},
			{"ordering key", admin.Query{OrderingKey: "o2"}, evs[1:2]},
			{"error text", admin.Query{ErrorContains: "timeout"}, []*envelope.Event{evs[0], evs[2]}},
			{"time range", admin.Query{Since: before, Until: time.Now().Add(time.Minute)}, evs[:4]},
			{"time range before", admin.Query{Until: before}, nil},
			{"ids", admin.Query{IDs: []uuid.UUID{evs[3].ID, evs[4].ID}}, evs[3:4]},
			{"pending", admin.Query{State: admin.StatePending}, nil},
		} {
			p, err := e.adm.List(ctx, c.q)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			got := ids(p)
			if len(got) != len(c.want) {
				t.Fatalf("%s: got %d events %v, want %d", c.name, len(got), got, len(c.want))
			}
			for i := range got {
				if got[i] != c.want[i].ID {
					t.Fatalf("%s: event %d is %s, want %s", c.name, i, got[i], c.want[i].ID)
				}
			}
			if p.Next != 0 {
				t.Fatalf("%s: Next = %d on the only page", c.name, p.Next)
			}
		}
		p, _ := e.adm.List(ctx, admin.Query{Topics: []string{"mail.sent"}})
		if ev := p.Events[0]; ev.State != admin.StateDead || ev.Attempts != 1 || !strings.Contains(ev.LastError, "bounce") || ev.DeadLetteredAt == nil {
			t.Fatalf("dead letter listed as %+v", ev)
		}

		// Keyset pages of 3: every dead letter once, in sequence order.
		var seen []uuid.UUID
		q := admin.Query{Limit: 3}
		for pages := 0; ; pages++ {
			p, err := e.adm.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, ids(p)...)
			if p.Next == 0 {
				if pages != 1 {
					t.Fatalf("%d pages of 3 for 4 dead letters, want 2", pages+1)
				}
				break
			}
			q.After = p.Next
		}
		if len(seen) != 4 {
			t.Fatalf("paged through %v, want the 4 dead letters", seen)
		}
		for i := range seen {
			if seen[i] != evs[i].ID {
				t.Fatalf("page order: %v", seen)
			}
		}
	})
}

// TestGetShowsWhatTheKeyHoldsBack: a dead letter's Detail counts the later
// events of its key, which wait behind it, and shows the first of them.
func TestGetShowsWhatTheKeyHoldsBack(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		evs := e.enqueue(t, msg("shop.order", "k", map[string]any{"fail": 1}))
		e.waitDead(t, evs[0])
		var behind []envelope.Message
		for i := range 7 {
			behind = append(behind, msg("shop.order", "k", map[string]any{"n": i}))
		}
		later := e.enqueue(t, behind...)
		d, err := e.adm.Get(ctx, evs[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != admin.StateDead || d.HeldBack != 7 || len(d.HeldBackFirst) != admin.HeldBackShown {
			t.Fatalf("Get: state %s, held back %d, first %d; want dead, 7, %d", d.State, d.HeldBack, len(d.HeldBackFirst), admin.HeldBackShown)
		}
		for i, h := range d.HeldBackFirst {
			if h.ID != later[i].ID || h.State != admin.StatePending {
				t.Fatalf("held back %d: %s (%s), want %s pending", i, h.ID, h.State, later[i].ID)
			}
		}
		if _, err := e.adm.Get(ctx, uuid.New()); !errors.Is(err, admin.ErrNotFound) {
			t.Fatalf("Get of an unknown id: %v, want ErrNotFound", err)
		}
	})
}

// TestRetryByFilterDelivers retries the dead letters whose error holds a
// text (a filter RetryDeadLettered alone has not): the relay delivers
// them, the others stay dead.
func TestRetryByFilterDelivers(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		evs := e.enqueue(t,
			msg("shop.order", "a", map[string]any{"fail": "timeout"}),
			msg("shop.order", "b", map[string]any{"fail": "schema"}),
			msg("shop.order", "", map[string]any{"fail": "timeout"}),
		)
		e.waitDead(t, evs...)
		e.recv.heal()
		n, err := e.adm.Retry(ctx, admin.Query{ErrorContains: "timeout"})
		if err != nil || n != 2 {
			t.Fatalf("Retry: %d, %v; want 2", n, err)
		}
		waitFor(t, "the retried events delivered", func() bool {
			return e.recv.delivered(evs[0].ID) && e.recv.delivered(evs[2].ID)
		})
		if e.recv.delivered(evs[1].ID) || e.state(t, evs[1].ID).State != admin.StateDead {
			t.Fatal("the dead letter the filter left out was retried")
		}
		// By id, through RetryDeadLettered's own filter.
		if n, err := e.adm.Retry(ctx, admin.Query{IDs: []uuid.UUID{evs[1].ID}}); err != nil || n != 1 {
			t.Fatalf("Retry by id: %d, %v; want 1", n, err)
		}
		waitFor(t, "the event retried by id delivered", func() bool { return e.recv.delivered(evs[1].ID) })
		if r, ok := e.logs.find("herald/admin: retried dead letters"); !ok || attr(r, "retried").Int64() != 2 {
			t.Fatal("the retry was not logged with its count")
		}
	})
}

// TestDiscardReleasesTheKey discards a dead letter by filter: it is
// deleted, counted and logged, and the relay delivers the events of its
// key that waited behind it.
func TestDiscardReleasesTheKey(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		dead := e.enqueue(t,
			msg("shop.order", "k", map[string]any{"fail": "poison"}),
			msg("shop.order", "other", map[string]any{"fail": "poison"}),
		)
		e.waitDead(t, dead...)
		behind := e.enqueue(t, msg("shop.order", "k", map[string]any{"n": 1}), msg("shop.order", "k", map[string]any{"n": 2}))
		if d := e.state(t, dead[0].ID); d.HeldBack != 2 {
			t.Fatalf("held back %d, want 2", d.HeldBack)
		}
		n, err := e.adm.Discard(ctx, admin.Query{OrderingKey: "k"})
		if err != nil || n != 1 {
			t.Fatalf("Discard: %d, %v; want 1", n, err)
		}
		if _, err := e.adm.Get(ctx, dead[0].ID); !errors.Is(err, admin.ErrNotFound) {
			t.Fatalf("the discarded event is still there: %v", err)
		}
		waitFor(t, "the key's waiting events delivered", func() bool {
			return e.recv.delivered(behind[0].ID) && e.recv.delivered(behind[1].ID)
		})
		if e.recv.position(behind[0].ID) > e.recv.position(behind[1].ID) {
			t.Fatal("the released events were delivered out of order")
		}
		if e.state(t, dead[1].ID).State != admin.StateDead {
			t.Fatal("Discard took a dead letter its filter left out")
		}
		r, ok := e.logs.find("herald/admin: discarded dead letters")
		if !ok || attr(r, "discarded").Int64() != 1 || !strings.Contains(attr(r, "query").String(), `ordering_key="k"`) {
			t.Fatal("the discard was not logged with its count and query")
		}
	})
}

// TestPauseHoldsTopicInOrder pauses a topic: the relay leases none of its
// events (they stay pending, never attempted, never dead), the events of
// their keys in other topics wait behind them, other topics flow; resumed,
// everything is delivered in key order.
func TestPauseHoldsTopicInOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.adm.Pause(ctx, "shop.order", "receiver down"); err != nil {
			t.Fatal(err)
		}
		// A second relay of the table, which the Admin knows nothing of:
		// the pause is in the database, so it obeys too.
		second := &receiver{}
		r2, err := relay.New(e.db, second, relay.Config{MinPollInterval: time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r2.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r2.Stop(ctx) }()
		evs := e.enqueue(t,
			msg("shop.order", "", map[string]any{"n": 1}),   // paused
			msg("shop.order", "k", map[string]any{"n": 2}),  // paused, holds key k
			msg("shop.refund", "k", map[string]any{"n": 3}), // behind it in key k
			msg("shop.refund", "", map[string]any{"n": 4}),  // free
		)
		// The free event is leased in the first poll that sees the batch;
		// the paused ones, earlier in sequence order, would have been leased
		// with it or before it.
		waitFor(t, "the free event delivered", func() bool { return e.recv.delivered(evs[3].ID) || second.delivered(evs[3].ID) })
		// Free events, one at a time, until each relay has delivered one:
		// each has then leased past the paused events, which come earlier
		// in sequence order.
		for i := 0; e.recv.count() == 0 || second.count() == 0; i++ {
			if i == 500 {
				t.Fatalf("one relay delivered nothing: %d and %d", e.recv.count(), second.count())
			}
			ev := e.enqueue(t, msg("shop.refund", "", map[string]any{"n": 5 + i}))[0]
			waitFor(t, "a free event delivered", func() bool { return e.recv.delivered(ev.ID) || second.delivered(ev.ID) })
		}
		for _, ev := range evs[:3] {
			d := e.state(t, ev.ID)
			if second.delivered(ev.ID) {
				t.Fatalf("the second relay delivered event %d of a paused topic or key", ev.Sequence)
			}
			if e.recv.delivered(ev.ID) || d.State != admin.StatePending || d.Attempts != 0 || d.LeasedBy != "" {
				t.Fatalf("event %d of a paused topic or key: delivered %v, %s, %d attempts, leased by %q",
					ev.Sequence, e.recv.delivered(ev.ID), d.State, d.Attempts, d.LeasedBy)
			}
		}
		// shop.refund: only event 3, held behind key k, once the last free
		// event's mark has committed (a relay marks it just after the
		// receiver has it).
		var b []admin.TopicBacklog
		backlogIs := func() bool {
			var err error
			if b, err = e.adm.Backlog(ctx); err != nil {
				t.Fatal(err)
			}
			return len(b) == 2 && b[0].Topic == "shop.order" && b[0].Paused && b[0].Pending == 2 && b[1].Topic == "shop.refund" && !b[1].Paused && b[1].Pending == 1
		}
		if !testkit.WaitFor(30*time.Second, backlogIs) {
			t.Fatalf("backlog %+v", b)
		}
		if ps, err := e.adm.Paused(ctx); err != nil || len(ps) != 1 || ps[0].Reason != "receiver down" || ps[0].PausedAt.IsZero() {
			t.Fatalf("Paused: %+v, %v", ps, err)
		}
		if was, err := e.adm.Resume(ctx, "shop.order"); err != nil || !was {
			t.Fatalf("Resume: %v, %v", was, err)
		}
		published := func(id uuid.UUID) bool { return e.state(t, id).State == admin.StatePublished }
		waitFor(t, "the paused events delivered and published", func() bool {
			return published(evs[0].ID) && published(evs[1].ID) && published(evs[2].ID)
		})
		// Key k in order: event 3 was leased only after event 2 was
		// published (whichever relay took each).
		d1, d2 := e.state(t, evs[1].ID), e.state(t, evs[2].ID)
		if d1.PublishedAt == nil || d2.PublishedAt == nil || d2.PublishedAt.Before(*d1.PublishedAt) {
			t.Fatalf("key k published out of order after the resume: %v then %v", d1.PublishedAt, d2.PublishedAt)
		}
	})
}

// TestBacklogPerTopic counts pending and dead events per topic in one
// statement.
func TestBacklogPerTopic(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.adm.Pause(ctx, "b.held", ""); err != nil {
			t.Fatal(err)
		}
		dead := e.enqueue(t, msg("a.dead", "", map[string]any{"fail": 1}), msg("a.dead", "", map[string]any{"fail": 2}))
		e.waitDead(t, dead...)
		e.enqueue(t, msg("b.held", "", 1), msg("b.held", "", 2), msg("b.held", "", 3))
		if err := e.adm.Pause(ctx, "c.idle", ""); err != nil {
			t.Fatal(err)
		}
		b, err := e.adm.Backlog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []admin.TopicBacklog{
			{Topic: "a.dead", DeadLettered: 2},
			{Topic: "b.held", Pending: 3, Paused: true},
			{Topic: "c.idle", Paused: true},
		}
		if len(b) != len(want) {
			t.Fatalf("backlog %+v, want %+v", b, want)
		}
		for i, w := range want {
			g := b[i]
			if g.Topic != w.Topic || g.Pending != w.Pending || g.DeadLettered != w.DeadLettered || g.Paused != w.Paused {
				t.Fatalf("backlog[%d] = %+v, want %+v", i, g, w)
			}
			if (g.Pending > 0) != (g.OldestPendingAge > 0) {
				t.Fatalf("backlog[%d]: oldest pending age %s with %d pending", i, g.OldestPendingAge, g.Pending)
			}
		}
	})
}

// TestBadInputNamesTheField: every bad argument is an ErrValidation error
// naming the field, and nothing runs.
func TestBadInputNamesTheField(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		now := time.Now()
		for _, c := range []struct {
			field string
			run   func() error
		}{
			{"admin.Query.State", func() error { _, err := e.adm.List(ctx, admin.Query{State: "zombie"}); return err }},
			{"admin.Query.Topics[1]", func() error {
				_, err := e.adm.List(ctx, admin.Query{Topics: []string{"ok", "a*b"}})
				return err
			}},
			{"admin.Query.Limit", func() error { _, err := e.adm.List(ctx, admin.Query{Limit: admin.MaxLimit + 1}); return err }},
			{"admin.Query.Until", func() error { _, err := e.adm.List(ctx, admin.Query{Since: now, Until: now}); return err }},
			{"admin.Query.State", func() error { _, err := e.adm.Retry(ctx, admin.Query{State: admin.StatePending}); return err }},
			{"admin.Query.State", func() error { _, err := e.adm.Discard(ctx, admin.Query{State: admin.StateFailed}); return err }},
			{"admin.Query.Topics[0]", func() error { _, err := e.adm.Discard(ctx, admin.Query{Topics: []string{"*x"}}); return err }},
			{"admin.Pause.topic", func() error { return e.adm.Pause(ctx, "", "") }},
		} {
			err := c.run()
			if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("%s: %v; want ErrValidation naming it", c.field, err)
			}
		}
		if _, err := admin.New(admin.Config{}); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "admin.Config.DB") {
			t.Fatalf("New without DB: %v", err)
		}
	})
}

// TestOwnRelayRetries: an Admin without a Relay makes its own (never
// started) and retries through it; the table's running relay delivers.
func TestOwnRelayRetries(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		adm, err := admin.New(admin.Config{DB: e.db, Dialect: e.d})
		if err != nil {
			t.Fatal(err)
		}
		evs := e.enqueue(t, msg("x", "", map[string]any{"fail": 1}))
		e.waitDead(t, evs...)
		e.recv.heal()
		if n, err := adm.Retry(ctx, admin.Query{Topics: []string{"x"}}); err != nil || n != 1 {
			t.Fatalf("Retry: %d, %v", n, err)
		}
		waitFor(t, "the event retried delivered", func() bool { return e.recv.delivered(evs[0].ID) })
	})
}
