package river_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func mustV7(t testing.TB) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// deliverytestDB is a migrated outbox in a schema of the test's own.
func deliverytestDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	db, dsn := testkit.Postgres(t)
	if err := envelope.Migrate(context.Background(), db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	return db, dsn
}
