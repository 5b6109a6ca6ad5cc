package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/outboxsql"
	"github.com/heraldgo/herald/internal/tablemigrate"
)

// TestPlumbing: every function of outbox gives envelope's answer, on each
// dialect where it differs.
func TestPlumbing(t *testing.T) {
	if got := outbox.Placeholder(envelope.Postgres, 2); got != "$2" {
		t.Errorf("Placeholder(Postgres, 2) = %q", got)
	}
	if got := outbox.Placeholder(envelope.MySQL, 2); got != "?" {
		t.Errorf("Placeholder(MySQL, 2) = %q", got)
	}
	if got := outbox.MaxBindParams(envelope.SQLite); got != 32766 {
		t.Errorf("MaxBindParams(SQLite) = %d", got)
	}
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	if got := outbox.TimeArg(envelope.SQLite, at); got != "2026-06-01T11:00:00.000000Z" {
		t.Errorf("TimeArg(SQLite) = %v", got)
	}
	w, err := envelope.NewWriter(envelope.Postgres, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := outbox.KeyLockSQL(w, "$1::text", true); !strings.Contains(got, "pg_advisory_xact_lock_shared(") {
		t.Errorf("KeyLockSQL(rowKeyed) = %s", got)
	}
	if got := outbox.KeyLocksSQL(w, "SELECT 'k'", false); !strings.Contains(got, "pg_advisory_xact_lock(") {
		t.Errorf("KeyLocksSQL = %s", got)
	}
	if outbox.WriteArrays(w) == nil {
		t.Error("WriteArrays = nil")
	}
	if err := outbox.Unmigrated(w, errors.New("other")); err == nil || errors.Is(err, envelope.ErrConfiguration) {
		t.Errorf("Unmigrated(other) = %v", err)
	}
	tb, err := envelope.ParseTable(envelope.Postgres, "app.outbox")
	if err != nil {
		t.Fatal(err)
	}
	if got := outbox.PausedTable(tb); got != `"app".app_outbox_paused` {
		t.Errorf("PausedTable = %s", got)
	}
	p, err := envelope.ParseTopicPattern("Topics", "lib_a.*")
	if err != nil {
		t.Fatal(err)
	}
	if got := outbox.LikePattern(p); got != `lib\_a.%` {
		t.Errorf("LikePattern = %s", got)
	}
	if !outbox.MatchAny([]envelope.TopicPattern{p}, "lib_a.loan") || outbox.MatchAny([]envelope.TopicPattern{p}, "libxa.loan") {
		t.Error("MatchAny")
	}
	if !outbox.IsOwnColumn("tenant") || outbox.IsOwnColumn("shop_id") {
		t.Error("IsOwnColumn")
	}
	if err := outbox.Configurationf("X.Y", "bad %d", 1); !errors.Is(err, envelope.ErrConfiguration) || err.Error() != "herald: X.Y: bad 1" {
		t.Errorf("Configurationf = %v", err)
	}
	if err := outbox.Validationf("M", "bad"); !errors.Is(err, envelope.ErrValidation) {
		t.Errorf("Validationf = %v", err)
	}
}

// TestDialectNames: internal/outboxsql spells envelope's dialects, and
// internal/tablemigrate names the record table, as envelope does (they
// cannot import envelope to use its constants).
func TestDialectNames(t *testing.T) {
	if tablemigrate.RecordTable != envelope.MigrationTable {
		t.Errorf("tablemigrate.RecordTable %q, envelope.MigrationTable %q", tablemigrate.RecordTable, envelope.MigrationTable)
	}
	for d, s := range map[envelope.Dialect]string{envelope.Postgres: outboxsql.Postgres, envelope.SQLite: outboxsql.SQLite, envelope.MySQL: outboxsql.MySQL} {
		if string(d) != s {
			t.Errorf("envelope %q, outboxsql %q", d, s)
		}
	}
}
