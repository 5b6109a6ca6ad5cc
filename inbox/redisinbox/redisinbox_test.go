package redisinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/redisstream"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/inbox/redisinbox"
	"github.com/heraldgo/herald/internal/inboxcrash"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func client(t *testing.T) *redis.Client {
	opt, err := redis.ParseURL(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestConsumesOnceAcksAfterCommit: entries written by herald's delivery,
// one of them twice and one failing once, take effect once each, and
// every entry ends acknowledged.
func TestConsumesOnceAcksAfterCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := client(t)
	db, _ := testkit.Postgres(t)
	if err := inbox.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(ctx, db, inbox.Config{Consumer: "c", Dialect: envelope.Postgres, Cache: redisinbox.Cache{Client: rc, Prefix: fmt.Sprintf("t%d:", rand.Uint32())}})
	if err != nil {
		t.Fatal(err)
	}
	stream := fmt.Sprintf("herald-inbox-test-%d", rand.Uint32())
	t.Cleanup(func() { rc.Del(context.Background(), stream) })
	d, err := redisstream.New(redisstream.Config{Client: rc, Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	var events []*envelope.Event
	for i := range 5 {
		events = append(events, &envelope.Event{Sequence: int64(i + 1), ID: [16]byte{byte(i + 1)}, Topic: "t.x", Payload: []byte(`{}`)})
	}
	events = append(events, events[2]) // a repeat
	for _, e := range events {
		if err := d.Deliver(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var failed atomic.Bool
	c, err := redisinbox.New(in, redisinbox.Config{Client: rc, Stream: stream, Group: "g", Block: 50 * time.Millisecond,
		Handler: inbox.Handler[redisinbox.Message]{Tx: func(ctx context.Context, tx *sql.Tx, m redisinbox.Message) error {
			if m.Sequence == 4 && !failed.Swap(true) {
				return errors.New("fails once")
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES ($1)`, m.ID)
			return err
		}}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	testkit.Eventually(t, 30*time.Second, func() bool {
		var n int
		_ = db.QueryRow(`SELECT count(*) FROM effects`).Scan(&n)
		p, _ := rc.XPending(ctx, stream, "g").Result()
		return n == 5 && p != nil && p.Count == 0
	}, "5 effects and nothing pending")
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var n, distinct int
	_ = db.QueryRow(`SELECT count(*), count(DISTINCT id) FROM effects`).Scan(&n, &distinct)
	if n != 5 || distinct != 5 {
		t.Fatalf("%d effects of %d ids; want 5 of 5", n, distinct)
	}
	if _, err := redisinbox.New(in, redisinbox.Config{Client: rc, Stream: stream, Group: "g"}); !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("no handler: %v", err)
	}
}

// TestCrash: a consumer process SIGKILLed before, inside and after its
// commit, entries from a real relay through Redis Streams.
// At CI's size by default; the large variant is
// HERALD_CRASH_EVENTS=120 HERALD_CRASH_KILL_EVERY=30 (see inboxcrash).
func TestCrash(t *testing.T) {
	url := testkit.RedisURL(t)
	rc := client(t)
	inboxcrash.Run(t, inboxcrash.Parent{
		ChildTest: "TestCrashChild",
		Delivery: func(t *testing.T, target string) delivery.Delivery {
			t.Cleanup(func() { rc.Del(context.Background(), target) })
			d, err := redisstream.New(redisstream.Config{URL: url, Stream: target})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	})
}

// TestCrashChild is TestCrash's consumer process.
func TestCrashChild(t *testing.T) {
	c := inboxcrash.ChildFromEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := redisinbox.New(c.Inbox, redisinbox.Config{Client: client(t), Stream: c.Target, Group: "crash", Name: "child",
		Block: 100 * time.Millisecond,
		Handler: inbox.Handler[redisinbox.Message]{Func: func(ctx context.Context, _ *inbox.Inbox, id inbox.Message, _ redisinbox.Message) (inbox.Outcome, error) {
			return c.Process(ctx, id)
		}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { c.WaitDone(ctx); cancel() }()
	if err := cons.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
