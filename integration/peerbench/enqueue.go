package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// manyPerTx is the events per transaction of the enqueue-many section.
const manyPerTx = 1000

// bareUnnest is the least an insert of a batch into herald's table can
// be: one INSERT … SELECT FROM unnest of the columns without defaults, no
// RETURNING.
const bareUnnest = `INSERT INTO herald_outbox (id, topic, payload, created_at)
SELECT u.id, u.topic, u.payload, now() FROM unnest($1::uuid[], $2::varchar[], $3::json[]) AS u(id, topic, payload)`

// bareUnnestReturning is bareUnnest returning what EnqueueMany must: each
// event's sequence, drawn in the messages' order (ORDER BY the
// ordinality), so that the i-th smallest is the i-th message's.
const bareUnnestReturning = `INSERT INTO herald_outbox (id, topic, payload, created_at)
SELECT u.id, u.topic, u.payload, now() FROM unnest($1::uuid[], $2::varchar[], $3::json[]) WITH ORDINALITY AS u(id, topic, payload, ord)
ORDER BY u.ord RETURNING sequence`

// enqueueManyRound writes cfg.events events with each case, manyPerTx per
// transaction, the cases alternated transaction by transaction (each
// transaction starting with the next case), and returns each case's
// events per second.
func enqueueManyRound(ctx context.Context, cfg config) ([]figure, error) {
	plain, herald, err := gormDBs(cfg, nil)
	if err != nil {
		return nil, err
	}
	plainSQL, _ := plain.DB()
	heraldSQL, _ := herald.DB()
	defer plainSQL.Close()
	defer heraldSQL.Close()
	herald = herald.WithContext(ctx)

	const wmTopic = "enqueue_many"
	wmSchema := wsql.DefaultPostgreSQLSchema{}
	wmInit, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(plainSQL), wsql.PublisherConfig{SchemaAdapter: wmSchema, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	if err := wmInit.Publish(wmTopic, message.NewMessage(watermill.NewUUID(), []byte(`{}`))); err != nil {
		return nil, err
	}
	if _, err := plainSQL.ExecContext(ctx, `TRUNCATE `+wmSchema.MessagesTable(wmTopic)); err != nil {
		return nil, err
	}

	pool, err := riverPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := riverMigrate(ctx, pool); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return nil, err
	}
	rc := riverConfig(false, &riverWorker{})
	rc.Queues = nil // insert-only client
	riverClient, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, err
	}

	riverParams := func(n int) []river.InsertManyParams {
		ps := make([]river.InsertManyParams, n)
		for i := range ps {
			ps[i] = river.InsertManyParams{Args: riverArgs{Body: payload}}
		}
		return ps
	}
	riverTx := func(fn func(pgx.Tx) error) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	sqlTx := func(fn func(*sql.Tx) error) error {
		tx, err := plainSQL.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	cases := []struct {
		name  string
		write func(n int) error
	}{
		{"herald gormcapture.EnqueueMany in db.Transaction", func(n int) error {
			ms := make([]envelope.Message, n)
			for i := range ms {
				ms[i] = envelope.Message{Topic: "many", Payload: json.RawMessage(payload)}
			}
			return herald.Transaction(func(tx *gorm.DB) error {
				es, err := gormcapture.EnqueueMany(tx, ms)
				if err == nil && len(es) != n {
					err = fmt.Errorf("EnqueueMany returned %d events, want %d", len(es), n)
				}
				return err
			})
		}},
		{"bare unnest INSERT into herald's table (id, topic, payload, created_at)", func(n int) error {
			ids, topics, payloads := make([]string, n), make([]string, n), make([]string, n)
			for i := range ids {
				ids[i], topics[i], payloads[i] = uuid.NewString(), "many", payload
			}
			return sqlTx(func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, bareUnnest, ids, topics, payloads)
				return err
			})
		}},
		{"bare unnest INSERT … ORDER BY ordinality RETURNING sequence (each event's Sequence, as EnqueueMany returns it)", func(n int) error {
			ids, topics, payloads := make([]string, n), make([]string, n), make([]string, n)
			for i := range ids {
				ids[i], topics[i], payloads[i] = uuid.NewString(), "many", payload
			}
			return sqlTx(func(tx *sql.Tx) error { return insertReturning(ctx, tx, ids, topics, payloads) })
		}},
		{"the same, each payload (a json.RawMessage) checked with json.Valid first, as EnqueueMany checks every message before writing", func(n int) error {
			raws := make([]json.RawMessage, n)
			for i := range raws {
				raws[i] = json.RawMessage(payload)
			}
			ids, topics, payloads := make([]string, n), make([]string, n), make([]string, n)
			for i, raw := range raws {
				if !json.Valid(raw) {
					return fmt.Errorf("message %d: payload is not valid JSON", i)
				}
				ids[i], topics[i], payloads[i] = uuid.NewString(), "many", string(raw)
			}
			return sqlTx(func(tx *sql.Tx) error { return insertReturning(ctx, tx, ids, topics, payloads) })
		}},
		{"bare unnest INSERT, ids bound as a binary uuid[] ([][16]byte)", func(n int) error {
			ids, topics, payloads := make([][16]byte, n), make([]string, n), make([]string, n)
			for i := range ids {
				ids[i], topics[i], payloads[i] = uuid.New(), "many", payload
			}
			return sqlTx(func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, bareUnnest, ids, topics, payloads)
				return err
			})
		}},
		{"watermill-sql Publish of the batch in one transaction", func(n int) error {
			msgs := make([]*message.Message, n)
			for i := range msgs {
				msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(payload))
			}
			return sqlTx(func(tx *sql.Tx) error {
				pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: wmSchema}, watermill.NopLogger{})
				if err != nil {
					return err
				}
				return pub.Publish(wmTopic, msgs...)
			})
		}},
		{"River InsertManyTx (riverpgxv5)", func(n int) error {
			ps := riverParams(n)
			return riverTx(func(tx pgx.Tx) error {
				_, err := riverClient.InsertManyTx(ctx, tx, ps)
				return err
			})
		}},
		{"River InsertManyFastTx (COPY FROM, riverpgxv5)", func(n int) error {
			ps := riverParams(n)
			return riverTx(func(tx pgx.Tx) error {
				_, err := riverClient.InsertManyFastTx(ctx, tx, ps)
				return err
			})
		}},
	}
	for _, c := range cases { // warm up: connections, prepared statements
		if err := c.write(10); err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
	}
	if _, err := plainSQL.ExecContext(ctx, `CHECKPOINT`); err != nil {
		return nil, err
	}
	took := make([]time.Duration, len(cases))
	done := make([]int, len(cases))
	for k := 0; k*manyPerTx < cfg.events; k++ {
		n := min(manyPerTx, cfg.events-k*manyPerTx)
		for j := range cases {
			c := (k + j) % len(cases)
			s := time.Now()
			if err := cases[c].write(n); err != nil {
				return nil, fmt.Errorf("%s: %w", cases[c].name, err)
			}
			took[c] += time.Since(s)
			done[c] += n
		}
	}
	out := make([]figure, len(cases))
	for c := range cases {
		out[c] = figure{name: cases[c].name, unit: "events/s", value: rate(done[c], took[c])}
	}
	return out, nil
}

// insertReturning runs bareUnnestReturning in tx and reads the sequences
// it returns.
func insertReturning(ctx context.Context, tx *sql.Tx, ids, topics, payloads []string) error {
	rows, err := tx.QueryContext(ctx, bareUnnestReturning, ids, topics, payloads)
	if err != nil {
		return err
	}
	defer rows.Close()
	seqs := make([]int64, 0, len(ids))
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			return err
		}
		seqs = append(seqs, s)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(seqs) != len(ids) {
		return fmt.Errorf("%d sequences returned, want %d", len(seqs), len(ids))
	}
	return nil
}
