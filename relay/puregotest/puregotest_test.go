package puregotest

import (
	"context"
	"database/sql"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // registers "sqlite", pure Go

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestNoCgoSQLiteDriverInTheBinary(t *testing.T) {
	t.Parallel()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build info")
	}
	for _, dep := range bi.Deps {
		if dep.Path == "github.com/mattn/go-sqlite3" {
			t.Fatal("this test binary links github.com/mattn/go-sqlite3; puregotest must stay free of cgo drivers")
		}
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" {
			t.Logf("built with CGO_ENABLED=%s", s.Value)
		}
	}
}

func TestRelayOnPureGoSQLite(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", testkit.ModerncDSN(testkit.SQLitePath(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.SQLite, ""); err != nil {
		t.Fatal(err)
	}
	w, err := envelope.NewWriter(envelope.SQLite, "")
	if err != nil {
		t.Fatal(err)
	}
	var ms []envelope.Message
	for i := range 50 {
		ms = append(ms, envelope.Message{Topic: "pure.go", OrderingKey: []string{"a", "b", ""}[i%3], Payload: i})
	}
	res, err := w.Write(ctx, db, ms)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var got []*envelope.Event
	failedOnce := map[int64]bool{}
	d := delivery.Func(func(_ context.Context, e *envelope.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if e.Sequence%7 == 0 && !failedOnce[e.Sequence] {
			failedOnce[e.Sequence] = true
			return delivery.ErrDelivery
		}
		got = append(got, e)
		return nil
	})
	r, err := relay.New(db, d, relay.Config{BatchSize: 10, MinPollInterval: time.Millisecond,
		MaxPollInterval: 10 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Dialect() != envelope.SQLite {
		t.Fatalf("modernc detected as %q", r.Dialect())
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(res.Events)
	}, "every event delivered")
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	perKey := map[string][]int64{}
	for _, e := range got {
		if e.OrderingKey != "" {
			perKey[e.OrderingKey] = append(perKey[e.OrderingKey], e.Sequence)
		}
	}
	for k, seqs := range perKey {
		if !slices.IsSorted(seqs) {
			t.Fatalf("key %s delivered out of order: %v", k, seqs)
		}
	}
	b, err := r.Backlog(ctx)
	if err != nil || b.Pending != 0 || b.DeadLettered != 0 {
		t.Fatalf("backlog: %+v %v", b, err)
	}
	if n, err := r.CleanupPublished(ctx, 0); err != nil || n != int64(len(res.Events)) {
		t.Fatalf("cleanup: %d %v", n, err)
	}
}
