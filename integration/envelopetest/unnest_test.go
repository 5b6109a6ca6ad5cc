package envelope_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq" // registers "postgres"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/jsonform"
)

// TestWriteManyEveryDriver: a Write of several events on PostgreSQL (one
// unnest INSERT binding each column as an array literal) stores exactly
// what a Write of each event alone stores, through pgx and through
// lib/pq: the payload and header bytes (quotes, backslashes, escapes,
// non-ASCII), DeliverAt at microseconds, keys, idempotency keys — one
// already stored, one repeated in the call — and sequences in message
// order.
func TestWriteManyEveryDriver(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.Postgres(t)
	ctx := context.Background()
	deliver := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	payloads := []any{
		map[string]any{"zeta": 1, "alpha": []any{1.5, `x"y\z`}, "mid": map[string]any{"b": nil, "a": true}},
		json.RawMessage(`{"z":1,"a":"\u2028<&>\\\"","n":1.10}`),
		`a string with "quotes", {braces}, a \backslash, NULL and é`,
		"NULL",
		[]any{3, 2, 1},
	}
	for _, driver := range []string{"pgx", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			many, one := driver+"_many", driver+"_one"
			for _, table := range []string{many, one} {
				if err := envelope.Migrate(ctx, db, envelope.Postgres, table); err != nil {
					t.Fatal(err)
				}
			}
			wm, _ := envelope.NewWriter(envelope.Postgres, many)
			wo, _ := envelope.NewWriter(envelope.Postgres, one)
			// bare leaves every optional column at its default: the
			// unnest INSERT writes those columns as constants.
			var plain, idem, bare []envelope.Message
			for i, p := range payloads {
				bare = append(bare, envelope.Message{Topic: "bare", Payload: p})
				m := envelope.Message{Topic: "t\"{,}" + strings.Repeat("x", i), Payload: p,
					Headers: map[string]string{"h": `v"\` + strings.Repeat("é", i)}}
				switch i % 3 {
				case 0:
					m.OrderingKey = `key "a"`
				case 1:
					m.OrderingKey = `key\b`
					m.DeliverAt = deliver
				}
				plain = append(plain, m)
				m.IdempotencyKey = []string{"i0", "stored", `i"2`, "i0", "i4"}[i]
				idem = append(idem, m)
			}
			// "stored" is there before the call.
			for _, w := range []*envelope.Writer{wm, wo} {
				if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "before", Payload: 0, IdempotencyKey: "stored"}}); err != nil {
					t.Fatal(err)
				}
			}
			for _, ms := range [][]envelope.Message{plain, idem, bare} {
				res, err := wm.Write(ctx, db, ms)
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i < len(res.Events); i++ {
					if ms[i].IdempotencyKey == "" && res.Events[i].Sequence <= res.Events[i-1].Sequence {
						t.Fatalf("sequences not in message order: %d then %d", res.Events[i-1].Sequence, res.Events[i].Sequence)
					}
				}
				if ms[0].IdempotencyKey != "" {
					if res.Events[1].Topic != "before" || res.Events[3] != res.Events[0] {
						t.Fatalf("idempotency: event 1 %+v, event 3 %p of event 0 %p", res.Events[1], res.Events[3], res.Events[0])
					}
				}
				for _, m := range ms {
					if _, err := wo.Write(ctx, db, []envelope.Message{m}); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, want := dump(t, db, many), dump(t, db, one)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("one Write of many stored\n%s\nWrites of one stored\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			b, _ := jsonform.Marshal(payloads[0], jsonform.Strict)
			if !strings.Contains(got[1], string(b)) {
				t.Fatalf("payload stored as %s, want the writer's bytes %s", got[1], b)
			}
			if !strings.Contains(got[2], "2030-01-02 02:04:05.123456+00") {
				t.Fatalf("DeliverAt stored as %s", got[2])
			}
		})
	}
}

// dump returns the table's events as text, in sequence order, without
// the columns that differ between tables (sequence, id, created_at).
func dump(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT concat_ws(' | ', topic, payload::text, headers::text, coalesce(ordering_key, '<null>'),
		coalesce(idempotency_key, '<null>'), coalesce(to_char(next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00', '<null>'))
		FROM ` + table + ` ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
