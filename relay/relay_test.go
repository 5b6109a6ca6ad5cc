package relay

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestDeliversEverythingInSequenceOrder(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, e *env) {
		var ms []envelope.Message
		for i := range 25 {
			ms = append(ms, msg("library.loan.updated", "", map[string]any{"n": i}))
		}
		evs := e.enqueue(t, ms...)
		rec := &recorder{}
		r := e.newRelay(t, rec, Config{BatchSize: 10, Concurrency: 1})
		if r.Dialect() != e.d {
			t.Fatalf("detected dialect %q, want %q", r.Dialect(), e.d)
		}
		start(t, r)
		testkit.Eventually(t, 30*time.Second, func() bool { return rec.count() == len(evs) }, "all %d events delivered", len(evs))
		got := rec.events()
		for i, ev := range got {
			if ev.ID != evs[i].ID {
				t.Fatalf("delivery %d is event %d, want %d (one batch at a time, Concurrency 1)", i, ev.Sequence, evs[i].Sequence)
			}
			if !jsonEqual(ev.Payload, evs[i].Payload) || ev.Topic != evs[i].Topic || !ev.CreatedAt.Equal(evs[i].CreatedAt) {
				t.Fatalf("event %d delivered as %+v, written as %+v", i, ev, evs[i])
			}
		}
		testkit.Eventually(t, 30*time.Second, func() bool {
			return e.count(t, "published_at IS NOT NULL") == len(evs)
		}, "all events marked published")
		row := e.row(t, evs[0].ID)
		if row.LeasedBy != r.Name() || row.Attempts != 0 || row.PublishedAt == nil || row.DeadLetteredAt != nil {
			t.Fatalf("published row: %+v", row)
		}
	})
}

func TestNewRejectsMissingOrMisshapenTable(t *testing.T) {
	t.Parallel()
	db, _ := openSQLite(t)
	d := delivery.Func(func(context.Context, *envelope.Event) error { return nil })
	_, err := New(db, d, Config{})
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "envelope.Migrate") {
		t.Fatalf("missing table: %v; want ErrConfiguration saying how to create it", err)
	}
	if _, err := db.Exec(`CREATE TABLE herald_outbox (sequence INTEGER PRIMARY KEY, id TEXT, topic TEXT)`); err != nil {
		t.Fatal(err)
	}
	_, err = New(db, d, Config{})
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "herald_outbox") {
		t.Fatalf("mis-shaped table: %v", err)
	}
	if _, err := db.Exec(`DROP TABLE herald_outbox`); err != nil {
		t.Fatal(err)
	}
	if err := envelope.Migrate(context.Background(), db, envelope.SQLite, ""); err != nil {
		t.Fatal(err)
	}
	_, err = New(db, d, Config{ExtraColumns: []string{"tenant"}})
	if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("missing extra column: %v", err)
	}
	if _, err := New(db, d, Config{}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	db, _ := openSQLite(t)
	if err := envelope.Migrate(context.Background(), db, envelope.SQLite, ""); err != nil {
		t.Fatal(err)
	}
	d := delivery.Func(func(context.Context, *envelope.Event) error { return nil })
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{BatchSize: -1}, "BatchSize"},
		{Config{BatchSize: MaxBatchSize + 1}, "BatchSize"},
		{Config{MaxAttempts: -1}, "MaxAttempts"},
		{Config{RetryBase: time.Minute, RetryMax: time.Second}, "RetryMax"},
		{Config{Lease: time.Second, DeliveryTimeout: time.Second}, "DeliveryTimeout"},
		{Config{DeliveryTimeout: 2 * time.Minute}, "DeliveryTimeout"},
		{Config{Concurrency: -3}, "Concurrency"},
		{Config{MinPollInterval: time.Second, MaxPollInterval: time.Millisecond}, "MaxPollInterval"},
		{Config{PollMultiplier: 0.5}, "PollMultiplier"},
		{Config{Topics: []string{"lib*rary.x"}}, "Topics[0]"},
		{Config{Topics: []string{"a.b", "lib?"}}, "Topics[1]"},
		{Config{Topics: []string{}}, "Topics"},
		{Config{ExcludeTopics: []string{"*.x"}}, "ExcludeTopics[0]"},
		{Config{Topics: []string{"billing.*"}, ExcludeTopics: []string{"billing.*"}}, "ExcludeTopics"},
		{Config{Topics: []string{"billing.paid"}, ExcludeTopics: []string{"billing.*"}}, "ExcludeTopics"},
		{Config{ExtraColumns: []string{"topic"}}, "ExtraColumns[0]"},
		{Config{ExtraColumns: []string{"bad name"}}, "ExtraColumns[0]"},
		{Config{Table: "no such; table"}, "Table"},
		{Config{Dialect: "oracle"}, "Dialect"},
		{Config{CleanupBatchSize: -1}, "CleanupBatchSize"},
	} {
		_, err := New(db, d, tc.cfg)
		if err == nil {
			t.Errorf("%+v: no error", tc.cfg)
			continue
		}
		if !errors.Is(err, envelope.ErrConfiguration) && !errors.Is(err, envelope.ErrUnsupported) {
			t.Errorf("%+v: %v is not ErrConfiguration", tc.cfg, err)
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %q does not name %s", tc.cfg, err, tc.field)
		}
	}
	// A narrower exclusion inside an inclusion is fine.
	if _, err := New(db, d, Config{Topics: []string{"billing.*"}, ExcludeTopics: []string{"billing.audit"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(nil, d, Config{}); !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("nil db: %v", err)
	}
	if _, err := New(db, nil, Config{}); !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("nil delivery: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	if c.BatchSize != 100 || c.MaxAttempts != 5 || c.RetryBase != time.Second || c.RetryMax != 5*time.Minute ||
		c.Lease != time.Minute || c.DeliveryTimeout != 30*time.Second || c.Concurrency != 10 ||
		c.MinPollInterval != 250*time.Millisecond || c.MaxPollInterval != 5*time.Second || c.PollMultiplier != 1.5 ||
		c.Name == "" || c.Logger == nil || c.CleanupBatchSize != 1000 {
		t.Fatalf("defaults: %+v", c)
	}
	if _, err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c := (Config{Lease: 10 * time.Second}).withDefaults(); c.DeliveryTimeout != 5*time.Second {
		t.Fatalf("DeliveryTimeout with a 10s lease: %s, want Lease/2", c.DeliveryTimeout)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
