package relay

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/heraldgo/herald/envelope"
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
