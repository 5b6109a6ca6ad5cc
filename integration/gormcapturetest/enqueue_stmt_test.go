package gormcapture_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// TestEnqueueStatements: in the caller's transaction an Enqueue, and an
// EnqueueMany of 1000 events, is one INSERT — no savepoint, no separate
// lock statement: what a hand-written INSERT costs. Extra columns keep
// the savepoint (their values are checked only by the database), so a
// value the column refuses leaves the transaction usable.
func TestEnqueueStatements(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		db, log := countingDB(t, d)
		must(t, db.Exec(`ALTER TABLE herald_outbox ADD COLUMN region INTEGER`).Error)
		must(t, db.Use(gormcapture.New(gormcapture.Config{})))
		// The writer reads the table's columns the first time Extra is used.
		_, err := gormcapture.Enqueue(db, envelope.Message{Topic: "warm", Payload: 1, Extra: map[string]any{"region": 1}})
		must(t, err)
		many := make([]envelope.Message, 1000)
		for i := range many {
			many[i] = envelope.Message{Topic: "t", Payload: i, OrderingKey: fmt.Sprint("k", i%10)}
		}
		cases := []struct {
			name string
			ms   []envelope.Message
			want []string
		}{
			{"one", []envelope.Message{{Topic: "t", Payload: 1, OrderingKey: "k"}}, []string{"INSERT herald_outbox"}},
			{"one with an idempotency key", []envelope.Message{{Topic: "t", Payload: 1, IdempotencyKey: "i1"}}, []string{"INSERT herald_outbox"}},
			{"1000", many, []string{"INSERT herald_outbox"}},
			{"with Extra", []envelope.Message{{Topic: "t", Payload: 1, Extra: map[string]any{"region": 3}}},
				[]string{"SAVEPOINT", "INSERT herald_outbox", "RELEASE"}},
		}
		for _, c := range cases {
			var stmts []string
			must(t, db.Transaction(func(tx *gorm.DB) error {
				stmts = log.record(func() {
					_, err := gormcapture.EnqueueMany(tx, c.ms)
					must(t, err)
				})
				return nil
			}))
			if got := kinds(stmts); !slices.Equal(got, c.want) {
				t.Errorf("%s: statements %q, want %q:\n%s", c.name, got, c.want, short(stmts))
			}
		}
		// An Extra value the column refuses (PostgreSQL) fails in its
		// savepoint; the caller's transaction goes on.
		if d == envelope.Postgres {
			must(t, db.Transaction(func(tx *gorm.DB) error {
				_, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "t", Payload: 1, Extra: map[string]any{"region": "not a number"}})
				if err == nil || errors.Is(err, envelope.ErrValidation) {
					t.Errorf("a text value for an integer column: %v, want a database error", err)
				}
				_, err = gormcapture.Enqueue(tx, envelope.Message{Topic: "after", Payload: 1})
				return err
			}))
		}
	})
}
