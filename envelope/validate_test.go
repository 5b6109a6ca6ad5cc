package envelope_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// hostileCases are messages PostgreSQL would refuse (and SQLite would
// store): each must be ErrValidation naming the field, before any
// statement, on both dialects.
var hostileCases = []struct {
	name  string
	m     envelope.Message
	where string
}{
	{"topic invalid UTF-8", envelope.Message{Topic: "a\xffb", Payload: 1}, "Message[1].Topic"},
	{"topic NUL", envelope.Message{Topic: "a\x00b", Payload: 1}, "Message[1].Topic"},
	{"ordering key invalid UTF-8", envelope.Message{Topic: "t", Payload: 1, OrderingKey: "\xc3"}, "Message[1].OrderingKey"},
	{"ordering key NUL", envelope.Message{Topic: "t", Payload: 1, OrderingKey: "k\x00"}, "Message[1].OrderingKey"},
	{"idempotency key invalid UTF-8", envelope.Message{Topic: "t", Payload: 1, IdempotencyKey: "\xed\xa0\x80"}, "Message[1].IdempotencyKey"},
	{"idempotency key NUL", envelope.Message{Topic: "t", Payload: 1, IdempotencyKey: "\x00"}, "Message[1].IdempotencyKey"},
	{"payload string NUL", envelope.Message{Topic: "t", Payload: map[string]any{"s": "a\x00b"}}, "Message[1].Payload"},
	{"payload key NUL", envelope.Message{Topic: "t", Payload: map[string]any{"a\x00": 1}}, "Message[1].Payload"},
	{"RawMessage lone high surrogate", envelope.Message{Topic: "t", Payload: json.RawMessage(`{"s":"\ud800"}`)}, "Message[1].Payload"},
	{"RawMessage lone low surrogate", envelope.Message{Topic: "t", Payload: json.RawMessage(`["\udc00x"]`)}, "Message[1].Payload"},
	{"RawMessage high surrogate then another high", envelope.Message{Topic: "t", Payload: json.RawMessage(`"\uD800\uD800"`)}, "Message[1].Payload"},
	{"RawMessage NUL escape", envelope.Message{Topic: "t", Payload: json.RawMessage(`{"s":"\u0000"}`)}, "Message[1].Payload"},
	{"header value NUL", envelope.Message{Topic: "t", Payload: 1, Headers: map[string]string{"h": "\x00"}}, "Message[1].Headers"},
	{"header name invalid UTF-8", envelope.Message{Topic: "t", Payload: 1, Headers: map[string]string{"\xff": "v"}}, "Message[1].Headers"},
	{"Extra column the table lacks", envelope.Message{Topic: "t", Payload: 1, Extra: map[string]any{"tenant_id": 7}}, "Message[1].Extra"},
	{"Extra string NUL", envelope.Message{Topic: "t", Payload: 1, Extra: map[string]any{"note": "a\x00"}}, "Message[1].Extra"},
	{"DeliverAt after 9999", envelope.Message{Topic: "t", Payload: 1, DeliverAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "Message[1].DeliverAt"},
	{"DeliverAt before year 1", envelope.Message{Topic: "t", Payload: 1, DeliverAt: time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC)}, "Message[1].DeliverAt"},
	{"DeliverAt 9999 in a zone east of UTC is still 9999 in UTC", envelope.Message{Topic: "t", Payload: 1,
		DeliverAt: time.Date(10000, 1, 1, 0, 30, 0, 0, time.FixedZone("x", 3600))}, ""},
}

// TestWriteRejectsHostile: each hostile message is ErrValidation naming
// its field, on both dialects; nothing is written, and in the caller's
// PostgreSQL transaction no statement failed (the transaction stays
// usable: a failed statement would abort it).
func TestWriteRejectsHostile(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `ALTER TABLE herald_outbox ADD COLUMN note TEXT`); err != nil {
			t.Fatal(err)
		}
		ok := envelope.Message{Topic: "ok", Payload: 1}
		for _, c := range hostileCases {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = w.Write(ctx, tx, []envelope.Message{ok, c.m})
			switch {
			case c.where == "":
				if err != nil {
					t.Errorf("%s: %v, want it written", c.name, err)
				}
			case !errors.Is(err, envelope.ErrValidation):
				t.Errorf("%s: %v, want ErrValidation", c.name, err)
			case !strings.Contains(err.Error(), c.where):
				t.Errorf("%s: error %q does not name %s", c.name, err, c.where)
			}
			var one int
			if err := tx.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
				t.Errorf("%s: the caller's transaction is unusable after the rejection: %v", c.name, err)
			}
			_ = tx.Rollback()
		}
		if n := count(t, db, ""); n != 0 {
			t.Fatalf("%d events written by rejected calls", n)
		}
		// A surrogate pair, an escaped NUL-free control character and an
		// Extra column the table has are fine.
		res, err := w.Write(ctx, db, []envelope.Message{
			{Topic: "t", Payload: json.RawMessage(`{"s":"\ud83d\ude00\u0001"}`)},
			{Topic: "t", Payload: 1, Extra: map[string]any{"note": "n"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Events[0].Payload); got != `{"s":"\ud83d\ude00\u0001"}` {
			t.Errorf("payload %s", got)
		}
	})
}

// TestExtraColumnAdded: a column added to the table after the writer first
// read its columns is found (the writer reads them again before it
// rejects a column).
func TestExtraColumnAdded(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		_, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 1, Extra: map[string]any{"region": "a"}}})
		if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), `"region"`) {
			t.Fatalf("missing column: %v", err)
		}
		if _, err := db.ExecContext(ctx, `ALTER TABLE herald_outbox ADD COLUMN region TEXT`); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 1, Extra: map[string]any{"region": "a"}}}); err != nil {
			t.Fatalf("after ALTER TABLE: %v", err)
		}
	})
}

// TestDeliverAtRange: DeliverAt is validated at write time (years 1 to
// 9999 UTC) on both dialects, and the stored SQLite text sorts as time
// across the whole range, so "due" comparisons hold.
func TestDeliverAtRange(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		_, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 1, DeliverAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}})
		if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), "Message.DeliverAt") {
			t.Fatalf("year 10000: %v, want ErrValidation naming Message.DeliverAt", err)
		}
		times := []time.Time{
			time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), // 0001-01-01T00:00:00Z is the zero time: "now"
			time.Date(999, 6, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		}
		var ms []envelope.Message
		for i := len(times) - 1; i >= 0; i-- {
			ms = append(ms, envelope.Message{Topic: "t", Payload: i, DeliverAt: times[i]})
		}
		if _, err := w.Write(ctx, db, ms); err != nil {
			t.Fatal(err)
		}
		// What the relay asks: which events are due at 2026-06-01?
		now := outbox.TimeArg(d, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
		q := `SELECT payload FROM herald_outbox WHERE next_attempt_at <= $1 ORDER BY next_attempt_at`
		if d != envelope.Postgres {
			q = strings.ReplaceAll(q, "$1", "?")
		}
		rows, err := db.QueryContext(ctx, q, now)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				t.Fatal(err)
			}
			got = append(got, p)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != "0,1,2" {
			t.Errorf("due at 2026-06-01, in time order: %v, want [0 1 2]", got)
		}
		byPayload := `SELECT ` + envelope.EventColumns + ` FROM herald_outbox WHERE CAST(payload AS TEXT) = '3'`
		if d == envelope.MySQL {
			byPayload = strings.ReplaceAll(byPayload, "CAST(payload AS TEXT)", "payload")
		}
		e, err := outbox.ScanEvent(db.QueryRowContext(ctx, byPayload), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !e.NextAttemptAt.Equal(times[3]) {
			t.Errorf("year 9999 read back as %v", e.NextAttemptAt)
		}
	})
}
