package envelope_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestWriteArraysExecModes: the bulk write (outbox.WriteArrays, what
// EnqueueMany takes through pgx) works in every pgx query exec mode,
// exec and simple_protocol (what a transaction pooler needs) among them,
// with one topic and with several, and returns each event with the
// sequence and the id the table holds.
func TestWriteArraysExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			_, dsn := testkit.Postgres(t) // a schema of the test's own, its search_path in dsn
			ctx := context.Background()
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("default_query_exec_mode", mode)
			u.RawQuery = q.Encode()
			pool, err := sql.Open("pgx", u.String())
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if err := envelope.Migrate(ctx, pool, envelope.Postgres, ""); err != nil {
				t.Fatal(err)
			}
			w, err := envelope.NewWriter(envelope.Postgres, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, topics := range [][]string{{"a", "a", "a"}, {"a", "b", "a"}} {
				ms := make([]envelope.Message, len(topics))
				for i, topic := range topics {
					ms[i] = envelope.Message{Topic: topic, Payload: json.RawMessage(`{"i": ` + string(rune('0'+i)) + `}`)}
				}
				ms[1].Headers = map[string]string{"h": "v"}
				res, err := outbox.WriteArrays(w)(ctx, pool, ms)
				if err != nil {
					t.Fatalf("topics %v: %v", topics, err)
				}
				if len(res.Events) != len(ms) {
					t.Fatalf("topics %v: %d events, want %d", topics, len(res.Events), len(ms))
				}
				for i, e := range res.Events {
					var id, topic, payload string
					if err := pool.QueryRowContext(ctx, `SELECT id::text, topic, payload::text FROM herald_outbox WHERE sequence = $1`, e.Sequence).Scan(&id, &topic, &payload); err != nil {
						t.Fatalf("topics %v: event %d (sequence %d): %v", topics, i, e.Sequence, err)
					}
					if id != e.ID.String() || topic != topics[i] || payload != string(e.Payload) {
						t.Errorf("topics %v: event %d: the table holds (%s, %s, %s) at sequence %d, the writer returned (%s, %s, %s)",
							topics, i, id, topic, payload, e.Sequence, e.ID, e.Topic, e.Payload)
					}
					if i > 0 && e.Sequence <= res.Events[i-1].Sequence {
						t.Errorf("topics %v: sequences not in message order: %d after %d", topics, e.Sequence, res.Events[i-1].Sequence)
					}
				}
			}
		})
	}
}
