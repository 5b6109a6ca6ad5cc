package envelope_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

type ctxHeadersKey struct{}

// The hook reads a context value only this file sets, so the package's
// parallel tests, which never set it, write no context headers.
func installCtxHeaders(t *testing.T) {
	t.Helper()
	restore := envelope.SetContextHeaders(func(ctx context.Context) map[string]string {
		h, _ := ctx.Value(ctxHeadersKey{}).(map[string]string)
		return h
	})
	t.Cleanup(restore)
}

func storedHeaders(t *testing.T, db *sql.DB, topic string) []map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT headers FROM herald_outbox WHERE topic = '` + topic + `' ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		var h map[string]string
		if err := json.Unmarshal([]byte(s), &h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Context headers reach every event of Write and WriteCapturedArrays (the
// array INSERT on PostgreSQL), only where the message does not set the
// header, and a header the hook gives that no event could hold is dropped.
func TestContextHeaders(t *testing.T) {
	installCtxHeaders(t)
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.WithValue(context.Background(), ctxHeadersKey{}, map[string]string{
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=1",
			"": "dropped", "bad": "nul\x00",
		})
		mine := map[string]string{"tracestate": "mine"}
		ms := []envelope.Message{{Topic: "ctx.h", Payload: 1}, {Topic: "ctx.h", Payload: 2, Headers: mine}}
		for _, write := range []func(context.Context, envelope.Querier, []envelope.Message) (*envelope.WriteResult, error){w.Write, outbox.WriteArrays(w)} {
			res, err := write(ctx, db, ms)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Events[0].Headers; len(got) != 2 || got["tracestate"] != "a=1" || got["traceparent"] == "" {
				t.Errorf("event 0's headers = %v", got)
			}
			if got := res.Events[1].Headers; len(got) != 2 || got["tracestate"] != "mine" {
				t.Errorf("event 1's headers = %v", got)
			}
		}
		if len(mine) != 1 {
			t.Errorf("the message's headers were changed: %v", mine)
		}
		hs := storedHeaders(t, db, "ctx.h")
		if len(hs) != 4 {
			t.Fatalf("%d events", len(hs))
		}
		for i, h := range hs {
			want := "a=1"
			if i%2 == 1 {
				want = "mine"
			}
			if len(h) != 2 || h["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || h["tracestate"] != want {
				t.Errorf("stored event %d: headers %v", i, h)
			}
		}
		// Without the context value: no headers.
		if _, err := w.Write(context.Background(), db, []envelope.Message{{Topic: "ctx.none", Payload: 1}}); err != nil {
			t.Fatal(err)
		}
		if hs := storedHeaders(t, db, "ctx.none"); len(hs) != 1 || len(hs[0]) != 0 {
			t.Errorf("headers without context headers: %v", hs)
		}
	})
}
