package envelope_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// The array path (outbox.WriteArrays, the captures' bulk path) writes
// exactly what Writer.Write writes, in the
// same order, on both dialects.
func TestWriteCapturedArrays(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db *sql.DB, d envelope.Dialect, w *envelope.Writer) {
		ctx := context.Background()
		at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		ms := make([]envelope.Message, 300)
		for i := range ms {
			ms[i] = envelope.Message{Topic: fmt.Sprint("t", i%3), Payload: map[string]any{"i": i}}
			if i%2 == 0 {
				ms[i].OrderingKey = fmt.Sprint("k", i)
			}
			if i%5 == 0 {
				ms[i].Headers = map[string]string{"h": fmt.Sprint(i)}
			}
			if i%7 == 0 {
				ms[i].DeliverAt = at
			}
		}
		read := func() []envelope.Event {
			rows, err := db.QueryContext(ctx, `SELECT `+envelope.EventColumns+` FROM herald_outbox ORDER BY sequence`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []envelope.Event
			for rows.Next() {
				e, err := outbox.ScanEvent(rows, nil)
				if err != nil {
					t.Fatal(err)
				}
				e.Sequence, e.ID, e.CreatedAt = 0, [16]byte{}, time.Time{}
				out = append(out, *e)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		}
		write := func(f func(context.Context, envelope.Querier, []envelope.Message) (*envelope.WriteResult, error)) []envelope.Event {
			if _, err := db.ExecContext(ctx, `DELETE FROM herald_outbox`); err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := f(ctx, tx, ms)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(res.Events); i++ {
				if res.Events[i].Sequence <= res.Events[i-1].Sequence || res.Events[i].Topic != ms[i].Topic {
					t.Fatalf("event %d: %+v after %+v", i, res.Events[i], res.Events[i-1])
				}
			}
			if len(res.Topics) != 3 {
				t.Errorf("topics %v", res.Topics)
			}
			return read()
		}
		want := write(w.Write)
		got := write(outbox.WriteArrays(w))
		if len(got) != len(ms) || !reflect.DeepEqual(got, want) {
			t.Errorf("the array path wrote\n%+v\nWrite\n%+v", got[:3], want[:3])
		}
		// Messages that leave every optional column at its default (no
		// headers, key or DeliverAt): the array INSERT writes those
		// columns as constants, and must store what the other path does.
		for i := range ms {
			ms[i] = envelope.Message{Topic: fmt.Sprint("t", i%3), Payload: map[string]any{"i": i}}
		}
		want = write(w.Write)
		got = write(outbox.WriteArrays(w))
		if len(got) != len(ms) || !reflect.DeepEqual(got, want) {
			t.Errorf("messages without headers, keys or DeliverAt: the array path wrote\n%+v\nWrite\n%+v", got[:3], want[:3])
		}
		// A rejected message writes nothing.
		_, err := outbox.WriteArrays(w)(ctx, db, []envelope.Message{{Topic: "a", Payload: 1}, {Topic: ""}})
		if !errors.Is(err, envelope.ErrValidation) {
			t.Errorf("empty topic: %v", err)
		}
	})
}

// recordingQuerier records the statements a write sends.
type recordingQuerier struct {
	q     envelope.Querier
	stmts []string
}

func (r *recordingQuerier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.stmts = append(r.stmts, query)
	return r.q.ExecContext(ctx, query, args...)
}

func (r *recordingQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.stmts = append(r.stmts, query)
	return r.q.QueryContext(ctx, query, args...)
}

// TestWriteArraysTakesUnnest: outbox.WriteArrays (Write given a context
// marked for arrays) inserts a PostgreSQL batch with one unnest INSERT
// that binds its payloads as a Go slice ($3::json[]); Write with an
// unmarked context binds them as a text literal of an array
// ($3::text::json[]).
func TestWriteArraysTakesUnnest(t *testing.T) {
	t.Parallel()
	db, _ := testkit.Postgres(t)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")
	ms := []envelope.Message{{Topic: "t", Payload: 1, OrderingKey: "a"}, {Topic: "t", Payload: 2}, {Topic: "t", Payload: 3}}
	unnest := func(stmts []string) int {
		n := 0
		for _, s := range stmts {
			if strings.Contains(s, "::json[]") && !strings.Contains(s, "::text::json[]") { // bound as a Go slice, not as text
				n++
			}
		}
		return n
	}
	arrays := &recordingQuerier{q: db}
	if _, err := outbox.WriteArrays(w)(ctx, arrays, ms); err != nil {
		t.Fatal(err)
	}
	if n := unnest(arrays.stmts); n != 1 {
		t.Errorf("WriteArrays sent %d array-bound statements, want 1: %q", n, arrays.stmts)
	}
	plain := &recordingQuerier{q: db}
	if _, err := w.Write(ctx, plain, ms); err != nil {
		t.Fatal(err)
	}
	if n := unnest(plain.stmts); n != 0 {
		t.Errorf("Write sent %d array-bound statements, want 0: %q", n, plain.stmts)
	}
}
