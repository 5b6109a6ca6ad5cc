package envelope_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// FuzzWriteValidation writes fuzzed messages into real outbox tables —
// SQLite in-process, and PostgreSQL unless -short — each in a transaction
// that is rolled back. Every message must either be rejected with
// ErrValidation before any statement (the PostgreSQL transaction stays
// usable) or be stored and read back as it was given: any other error is
// a value the validation lets through to the database.
//
//	go test -run='^$' -fuzz='^FuzzWriteValidation$' -fuzztime=60s ./envelope
func FuzzWriteValidation(f *testing.F) {
	type target struct {
		name string
		d    envelope.Dialect
		db   *sql.DB
		w    *envelope.Writer
	}
	ctx := context.Background()
	var targets []target
	open := func(name string, d envelope.Dialect, db *sql.DB) {
		if err := envelope.Migrate(ctx, db, d, ""); err != nil {
			f.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `ALTER TABLE herald_outbox ADD COLUMN note TEXT`); err != nil {
			f.Fatal(err)
		}
		w, err := envelope.NewWriter(d, "")
		if err != nil {
			f.Fatal(err)
		}
		targets = append(targets, target{name, d, db, w})
	}
	lite, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(f)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = lite.Close() })
	open("sqlite", envelope.SQLite, lite)
	if !testing.Short() {
		pg, _ := testkit.Postgres(f)
		open("postgres", envelope.Postgres, pg)
	}

	for _, c := range hostileCases {
		var raw []byte
		if r, ok := c.m.Payload.(json.RawMessage); ok {
			raw = r
		}
		note, _ := c.m.Extra["note"].(string)
		var hdr string
		for k, v := range c.m.Headers {
			hdr = k + "=" + v
		}
		f.Add(c.m.Topic, c.m.OrderingKey, c.m.IdempotencyKey, raw, "s", hdr, note, c.m.DeliverAt.Unix())
	}
	f.Add("orders.created", "order:7", "idem-1", []byte(`{"id":7,"fee":"12.50","tags":["a"]}`), "", "trace=abc", "n", int64(0))
	f.Add("t", "", "", []byte(`"\ud83d\ude00"`), "é\u2028", "", "", int64(253402300800))

	f.Fuzz(func(t *testing.T, topic, okey, ikey string, raw []byte, str, header, note string, deliverAt int64) {
		m := envelope.Message{Topic: topic, OrderingKey: okey, IdempotencyKey: ikey}
		if json.Valid(raw) {
			m.Payload = json.RawMessage(raw)
		} else {
			m.Payload = map[string]any{"s": str, "raw": string(raw)}
		}
		if header != "" {
			m.Headers = map[string]string{header: header}
		}
		if note != "" {
			m.Extra = map[string]any{"note": note}
		}
		if deliverAt != 0 {
			m.DeliverAt = time.Unix(deliverAt, 0)
		}
		for _, tg := range targets {
			tx, err := tg.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := tg.w.Write(ctx, tx, []envelope.Message{m})
			if err != nil {
				if !errors.Is(err, envelope.ErrValidation) {
					_ = tx.Rollback()
					t.Fatalf("%s: %+v: not ErrValidation: %v", tg.name, m, err)
				}
				var one int
				if qerr := tx.QueryRowContext(ctx, `SELECT 1`).Scan(&one); qerr != nil {
					t.Errorf("%s: rejected (%v), yet a statement failed: %v", tg.name, err, qerr)
				}
				_ = tx.Rollback()
				continue
			}
			row := tx.QueryRowContext(ctx, `SELECT `+envelope.EventColumns+`, note FROM herald_outbox WHERE sequence = `+itoa(int(res.Events[0].Sequence)))
			got, err := outbox.ScanEvent(row, []string{"note"})
			_ = tx.Rollback()
			if err != nil {
				t.Fatalf("%s: %+v: written, but reading it back fails: %v", tg.name, m, err)
			}
			want := res.Events[0]
			if got.Topic != want.Topic || got.OrderingKey != okey || got.IdempotencyKey != ikey || !reflect.DeepEqual(got.Headers, m.Headers) {
				t.Errorf("%s: read back %+v, wrote %+v", tg.name, got, m)
			}
			if !jsonSame(got.Payload, want.Payload) {
				t.Errorf("%s: payload read back %s, wrote %s", tg.name, got.Payload, want.Payload)
			}
			if n, _ := got.Extra["note"].(string); note != "" && n != note {
				if b, ok := got.Extra["note"].([]byte); !ok || string(b) != note {
					t.Errorf("%s: note read back %v, wrote %q", tg.name, got.Extra["note"], note)
				}
			}
			if (got.NextAttemptAt == nil) != m.DeliverAt.IsZero() || (got.NextAttemptAt != nil && !got.NextAttemptAt.Equal(m.DeliverAt.Truncate(time.Microsecond))) {
				t.Errorf("%s: DeliverAt read back %v, wrote %v", tg.name, got.NextAttemptAt, m.DeliverAt)
			}
		}
	})
}

// jsonSame reports whether a and b are the same JSON value (PostgreSQL's
// jsonb reorders keys and respaces).
func jsonSame(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
