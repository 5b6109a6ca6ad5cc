package river_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
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
