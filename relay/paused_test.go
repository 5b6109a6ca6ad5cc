package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// TestNewWantsThePausedTable: the lease reads the table of paused topics
// (schema version 5), so a table migrated only to version 4 is an
// ErrConfiguration at New that names it and says to migrate — not a lease
// that fails at every poll.
func TestNewWantsThePausedTable(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		if e.d == envelope.MySQL {
			t.Skip("MySQL's first version has the table of paused topics")
		}
		if err := envelope.MigrateTo(context.Background(), e.db, e.d, "", 4); err != nil {
			t.Fatal(err)
		}
		_, err := New(e.db, &recorder{}, Config{})
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "herald_outbox_paused") || !strings.Contains(err.Error(), "envelope.Migrate") {
			t.Fatalf("New on a version-4 table: %v; want ErrConfiguration naming the paused table and Migrate", err)
		}
		if err := envelope.Migrate(context.Background(), e.db, e.d, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := New(e.db, &recorder{}, Config{}); err != nil {
			t.Fatalf("New after Migrate: %v", err)
		}
	})
}

// TestBacklogByTopicListsPausedTopics: BacklogByTopic marks paused topics,
// lists a paused topic with nothing pending, and keeps to the relay's
// topics.
func TestBacklogByTopicListsPausedTopics(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.enqueue(t, msg("a.x", "", 1), msg("a.x", "", 2), msg("a.y", "", 3))
		for _, topic := range []string{"a.x", "b.idle"} {
			stmt, args := `INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES ($1, '', now())`, []any{topic}
			switch e.d {
			case envelope.SQLite:
				stmt, args = `INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES (?1, '', ?2)`, []any{topic, outbox.TimeArg(e.d, time.Now())}
			case envelope.MySQL:
				stmt = `INSERT INTO herald_outbox_paused (topic, reason, paused_at) VALUES (?, '', UTC_TIMESTAMP(6))`
			}
			if _, err := e.db.ExecContext(ctx, stmt, args...); err != nil {
				t.Fatal(err)
			}
		}
		got := func(cfg Config) string {
			t.Helper()
			r, err := New(e.db, &recorder{}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			bl, err := r.BacklogByTopic(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, b := range bl {
				s = append(s, fmt.Sprintf("%s:%d:%t", b.Topic, b.Pending, b.Paused))
			}
			return strings.Join(s, " ")
		}
		if s := got(Config{}); s != "a.x:2:true a.y:1:false b.idle:0:true" {
			t.Fatalf("BacklogByTopic: %s", s)
		}
		if s := got(Config{ExcludeTopics: []string{"b.*"}}); s != "a.x:2:true a.y:1:false" {
			t.Fatalf("BacklogByTopic without b.*: %s", s)
		}
	})
}
