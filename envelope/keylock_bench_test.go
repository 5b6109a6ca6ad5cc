package envelope

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/testkit"
)

// BenchmarkKeyLockForms: the statement cost of the key lock of a
// single-event write on PostgreSQL, alternated in one run: a hand-written
// INSERT without lock (the floor), the INSERT … SELECT … WHERE <lock> that
// Write sends for one key (one pg_advisory_xact_lock call), and the same
// with the lock of several keys' form (lockKeysSQL over two array
// parameters) given the one key. Each in its own transaction, on one
// connection with synchronous_commit off, so that the commit's flush does
// not drown the statements' difference. Reports µs per transaction and
// each form's extra µs over the floor.
//
//	go test -run '^$' -bench BenchmarkKeyLockForms -benchtime 3000x ./envelope
func BenchmarkKeyLockForms(b *testing.B) {
	db, _ := testkit.Postgres(b)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if err := Migrate(ctx, db, Postgres, ""); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `SET synchronous_commit = off`); err != nil {
		b.Fatal(err)
	}
	w, _ := NewWriter(Postgres, "")
	const cols = `INSERT INTO "herald_outbox" (id, topic, payload, headers, ordering_key, idempotency_key, created_at, next_attempt_at)`
	floor := cols + ` VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	one := cols + ` SELECT $2, $3, $4, $5, $6, $7, $8, $9 WHERE ` + w.keyLockSQL("$1::text", false) + ` RETURNING sequence, id`
	arrays := cols + ` SELECT $3, $4, $5, $6, $7, $8, $9, $10 WHERE ` + w.lockKeysSQL("$1", "$2") + ` >= 0 RETURNING sequence, id`
	forms := []string{"floor", "one-key", "array-subquery"}
	run := func(form, i int) {
		id, _ := uuid.NewV7()
		key := "order:" + itoa(int64(i%100))
		row := []any{id.String(), "orders.created", `{"id":` + itoa(int64(i)) + `,"status":"new"}`, "{}", key, nil, time.Now(), nil}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		switch form {
		case 0:
			_, err = tx.ExecContext(ctx, floor, row...)
		case 1:
			var s int64
			var rid uuid.UUID
			err = tx.QueryRowContext(ctx, one, append([]any{key}, row...)...).Scan(&s, &rid)
		case 2:
			var s int64
			var rid uuid.UUID
			l := keyLocks{key: true}
			k, x := l.args()
			err = tx.QueryRowContext(ctx, arrays, append([]any{k, x}, row...)...).Scan(&s, &rid)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 100 {
		for f := range forms {
			run(f, i)
		}
	}
	tot := make([]time.Duration, len(forms))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for f := range forms {
			s := time.Now()
			run(f, i)
			tot[f] += time.Since(s)
		}
	}
	n := float64(b.N)
	for f, name := range forms {
		b.ReportMetric(float64(tot[f].Microseconds())/n, name+"-µs/tx")
		if f > 0 {
			b.ReportMetric(float64((tot[f]-tot[0]).Microseconds())/n, name+"-extra-µs")
		}
	}
}
