package envelope_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/jsonform"
	"github.com/heraldgo/herald/relay"
)

// The relay delivers exactly the bytes the writer produced, on both
// dialects: key order, number forms and escapes as jsonform wrote them
// (a jsonb column would sort the keys and add spaces).
func TestDeliveredBytesAreWrittenBytes(t *testing.T) {
	t.Parallel()
	payloads := []any{
		map[string]any{"zeta": 1, "alpha": []any{1.5, "x"}, "mid": map[string]any{"b": nil, "a": true}},
		json.RawMessage(`{"z":1,"a":{"y":2,"b":[3,1]},"a2":"\u2028<&>"}`),
		json.RawMessage(`{"dup":1,"dup":2,"n":1.10,"big":12345678901234567890}`),
		"a string with \"quotes\" and é",
		[]any{3, 2, 1},
	}
	want := make([]string, len(payloads))
	for i, p := range payloads {
		b, err := jsonform.Marshal(p, jsonform.Strict)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = string(b)
	}
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, _ func() *sql.DB) {
		ctx := context.Background()
		if err := envelope.Migrate(ctx, db, d, ""); err != nil {
			t.Fatal(err)
		}
		w, err := envelope.NewWriter(d, "")
		if err != nil {
			t.Fatal(err)
		}
		ms := make([]envelope.Message, len(payloads))
		for i, p := range payloads {
			ms[i] = envelope.Message{Topic: "bytes", OrderingKey: "k", Payload: p}
		}
		if _, err := w.Write(ctx, db, ms); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []string
		r, err := relay.New(db, delivery.Func(func(_ context.Context, e *envelope.Event) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(e.Payload))
			return nil
		}), relay.Config{MinPollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= len(want)
		}, "%d events delivered", len(want))
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("event %d delivered\n%s\nthe writer produced\n%s", i, got[i], want[i])
			}
		}
	})
}
