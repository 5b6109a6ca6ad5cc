package envelope_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// BenchmarkWrite measures one Write in its own transaction: a single event,
// and 1000 events in one call (50 ordering keys). On PostgreSQL each Write
// alternates, in one run, with the floor of the same rows on the same
// table: a hand-written single-row INSERT, or a bare
// "INSERT … SELECT FROM unnest(…)" binding Go slices through pgx, each in
// its own transaction, so the ratio holds on a loaded machine. PostgreSQL
// runs through pgx and through lib/pq (the Writer binds the same SQL on
// both). Reports events/s of each, write-ratio (Write's total time ÷ the
// floor's) and median-ratio (the median of the per-iteration ratios,
// robust to a load spike hitting one side).
//
//	go test -run='^$' -bench=BenchmarkWrite -benchtime=100x ./envelope
func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct {
		name string
		d    envelope.Dialect
		open func(b *testing.B) (db, floor *sql.DB)
	}{
		{"sqlite", envelope.SQLite, func(b *testing.B) (*sql.DB, *sql.DB) {
			db, err := sql.Open("sqlite3", testkit.MattnDSN(testkit.SQLitePath(b)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			return db, nil
		}},
		{"postgres", envelope.Postgres, func(b *testing.B) (*sql.DB, *sql.DB) { db, _ := testkit.Postgres(b); return db, db }},
		{"postgres-libpq", envelope.Postgres, func(b *testing.B) (*sql.DB, *sql.DB) {
			floor, dsn := testkit.Postgres(b)
			db, err := sql.Open("postgres", dsn)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			return db, floor
		}},
		{"mysql", envelope.MySQL, func(b *testing.B) (*sql.DB, *sql.DB) { db, _ := testkit.MySQL(b); return db, db }},
	} {
		for _, n := range []int{1, 1000, 10000} {
			b.Run(c.name+"/"+itoa(n), func(b *testing.B) {
				db, floorDB := c.open(b)
				ctx := context.Background()
				if err := envelope.Migrate(ctx, db, c.d, ""); err != nil {
					b.Fatal(err)
				}
				w, _ := envelope.NewWriter(c.d, "")
				ms := make([]envelope.Message, n)
				for i := range ms {
					ms[i] = envelope.Message{Topic: "bench.topic", Payload: map[string]any{"id": i, "name": "row", "fee": "12.50"}, OrderingKey: "k:" + itoa(i%50)}
				}
				write := func() {
					benchTx(b, db, func(tx *sql.Tx) error { _, err := w.Write(ctx, tx, ms); return err })
				}
				floor := func() {}
				if floorDB != nil {
					floor = func() { benchTx(b, floorDB, func(tx *sql.Tx) error { return floorInsert(ctx, tx, c.d, n) }) }
				}
				for range 3 {
					floor()
					write()
				}
				b.ReportAllocs()
				var tw, tf time.Duration
				var ratios []float64
				b.ResetTimer()
				for b.Loop() {
					s := time.Now()
					floor()
					m := time.Now()
					write()
					e := time.Now()
					tf, tw = tf+m.Sub(s), tw+e.Sub(m)
					ratios = append(ratios, float64(e.Sub(m))/float64(m.Sub(s)))
				}
				b.ReportMetric(float64(b.N*n)/tw.Seconds(), "events/s")
				if floorDB != nil {
					b.ReportMetric(float64(b.N*n)/tf.Seconds(), "floor-events/s")
					b.ReportMetric(float64(tw)/float64(tf), "write-ratio")
					slices.Sort(ratios)
					b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
				}
			})
		}
	}
}

// floorInsert writes n events as a hand-written statement would, with
// what the relay needs and nothing else (no key locks, no RETURNING):
// the payloads formatted as Write's would be, one INSERT of one row, or
// one INSERT … SELECT FROM unnest(…) of Go slices (pgx).
func floorInsert(ctx context.Context, tx *sql.Tx, d envelope.Dialect, n int) error {
	ids, topics, payloads, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i := range ids {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		ids[i], topics[i], keys[i] = id.String(), "bench.topic", "k:"+itoa(i%50)
		payloads[i] = `{"fee":"12.50","id":` + itoa(i) + `,"name":"row"}`
	}
	if d == envelope.MySQL { // one multi-row INSERT, no key locks, no read-back
		var q strings.Builder
		q.WriteString(`INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at) VALUES `)
		args := make([]any, 0, 4*n)
		for i := range ids {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?, ?, ?, ?, UTC_TIMESTAMP(6))")
			args = append(args, ids[i], topics[i], payloads[i], keys[i])
		}
		_, err := tx.ExecContext(ctx, q.String(), args...)
		return err
	}
	if n == 1 {
		_, err := tx.ExecContext(ctx, `INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at) VALUES ($1, $2, $3, $4, now())`,
			ids[0], topics[0], payloads[0], keys[0])
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at)
		SELECT u.id, u.topic, u.payload, u.okey, now() FROM unnest($1::uuid[], $2::text[], $3::json[], $4::text[]) AS u(id, topic, payload, okey)`,
		ids, topics, payloads, keys)
	return err
}

// BenchmarkPayloadColumn compares the outbox at schema version 1 (payload
// and headers JSONB) with version 2 (JSON) on PostgreSQL: Write of one
// event and of 1000, each a BeforeAndAfter envelope of a ten-column row
// (about 600 bytes), in its own transaction.
//
//	go test -run='^$' -bench=BenchmarkPayloadColumn -count=5 ./envelope
func BenchmarkPayloadColumn(b *testing.B) {
	row := func(i int, status string) map[string]any {
		return map[string]any{"id": i, "status": status, "fee": "12.50", "reader_id": 3, "title": "The Name of the Rose",
			"isbn": "978-0-15-144647-6", "due_at": "2026-10-20T12:00:00Z", "renewals": 1, "branch": "central", "notes": "returned via drop box"}
	}
	for _, v := range []int{1, 2} {
		for _, n := range []int{1, 1000} {
			b.Run("version"+itoa(v)+"/"+itoa(n), func(b *testing.B) {
				db, _ := testkit.Postgres(b)
				ctx := context.Background()
				if err := envelope.MigrateTo(ctx, db, envelope.Postgres, "", v); err != nil {
					b.Fatal(err)
				}
				w, _ := envelope.NewWriter(envelope.Postgres, "")
				ms := make([]envelope.Message, n)
				for i := range ms {
					ms[i] = envelope.Message{Topic: "library.loan.updated", OrderingKey: "library.Loan:" + itoa(i),
						Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
						Payload: map[string]any{"model": "library.Loan", "operation": "updated", "pk": i, "changed": []string{"status"},
							"before": row(i, "lent"), "after": row(i, "returned"), "occurred_at": "2026-10-06T12:00:00Z"}}
				}
				b.ResetTimer()
				for b.Loop() {
					benchTx(b, db, func(tx *sql.Tx) error { _, err := w.Write(ctx, tx, ms); return err })
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkInsertForms times, alternated in one loop on one table, writes
// of 1000 and of 10,000 unordered events without headers, each write in
// its own transaction:
//
//   - floor: the bare unnest INSERT of id, topic and payload, no RETURNING,
//     the ids bound as strings (peerbench's "bare unnest INSERT");
//   - floor-binary: the same with the ids bound as [][16]byte (a binary
//     uuid[]) and the topic once;
//   - statement: the writer's statement written by hand (the ids as one
//     array literal in a text parameter, the topic once, ORDER BY u.ord,
//     RETURNING sequence), without the Go envelope;
//   - writer: WriteCapturedArrays, what EnqueueMany runs through pgx.
//
// Reports events/s of each and each ÷ the floor (-ratio).
//
//	go test -run '^$' -bench BenchmarkInsertForms -benchtime 100x -count 3 ./envelope
func BenchmarkInsertForms(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchInsertForms(b, n) })
	}
}

// benchInsertForms is BenchmarkInsertForms with n events a write.
func benchInsertForms(b *testing.B, n int) {
	db, _ := testkit.Postgres(b)
	ctx := context.Background()
	if err := envelope.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		b.Fatal(err)
	}
	w, _ := envelope.NewWriter(envelope.Postgres, "")
	payload := `{"model": "library.Loan", "operation": "updated", "pk": 7, "changed": ["status"], ` +
		`"before": {"id": 7, "status": "lent", "fee": "0.00", "reader_id": 3}, ` +
		`"after": {"id": 7, "status": "returned", "fee": "0.00", "reader_id": 3}, "occurred_at": "2026-10-06T12:00:00Z"}`
	ms := make([]envelope.Message, n)
	for i := range ms {
		ms[i] = envelope.Message{Topic: "many", Payload: json.RawMessage(payload)}
	}
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = payload
	}
	stringIDs := func() []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = uuid.Must(uuid.NewV7()).String()
		}
		return ids
	}
	binaryIDs := func() [][16]byte {
		ids := make([][16]byte, n)
		for i := range ids {
			ids[i] = uuid.Must(uuid.NewV7())
		}
		return ids
	}
	topics := make([]string, n)
	for i := range topics {
		topics[i] = "many"
	}
	forms := []struct {
		name string
		run  func()
	}{
		{"floor", func() {
			ids := stringIDs()
			benchTx(b, db, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO herald_outbox (id, topic, payload, created_at)
					SELECT u.id, u.topic, u.payload, now() FROM unnest($1::uuid[], $2::varchar[], $3::json[]) AS u(id, topic, payload)`, ids, topics, payloads)
				return err
			})
		}},
		{"floor-binary", func() {
			ids := binaryIDs()
			benchTx(b, db, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO herald_outbox (id, topic, payload, created_at)
					SELECT u.id, $2, u.payload, now() FROM unnest($1::uuid[], $3::json[]) AS u(id, payload)`, ids, "many", payloads)
				return err
			})
		}},
		{"statement", func() {
			ids := "{" + strings.Join(stringIDs(), ",") + "}"
			benchTx(b, db, func(tx *sql.Tx) error {
				rows, err := tx.QueryContext(ctx, `INSERT INTO herald_outbox (id, topic, payload, headers, ordering_key, created_at, next_attempt_at)
					SELECT u.c0, $2, u.c1, '{}'::json, NULL, $4, NULL FROM unnest($1::text::uuid[], $3::json[]) WITH ORDINALITY AS u(c0, c1, ord)
					ORDER BY u.ord RETURNING sequence`, ids, "many", payloads, time.Now())
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var s int64
					if err := rows.Scan(&s); err != nil {
						return err
					}
				}
				return rows.Err()
			})
		}},
		{"writer", func() {
			benchTx(b, db, func(tx *sql.Tx) error { _, err := outbox.WriteArrays(w)(ctx, tx, ms); return err })
		}},
	}
	for range 3 {
		for _, f := range forms {
			f.run()
		}
	}
	took := make([]time.Duration, len(forms))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range forms {
			f := forms[(i+j)%len(forms)]
			s := time.Now()
			f.run()
			took[(i+j)%len(forms)] += time.Since(s)
		}
	}
	for j, f := range forms {
		b.ReportMetric(float64(b.N*n)/took[j].Seconds(), f.name+"-ev/s")
		if j > 0 {
			b.ReportMetric(float64(took[j])/float64(took[0]), f.name+"-ratio")
		}
	}
}

// benchTx runs f in a transaction of db and commits it, failing b on any
// error.
func benchTx(b *testing.B, db *sql.DB, f func(tx *sql.Tx) error) {
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := f(tx); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}
