package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/wakeup"
)

// PlainRow is the row every producer case writes; herald does not capture
// it. CapturedRow is the same row, captured (After).
type PlainRow struct {
	ID      int64
	Name    string
	Status  string
	Amount  int
	Version int64
}

type CapturedRow PlainRow

// gormDBs opens the plain GORM database (no plugin) and herald's (the
// plugin, capturing CapturedRow and bulk rows), with the tables migrated.
// Both share one *sql.DB, one pool, as one service's would: with a pool
// each, a case written on the other pool than the write before it woke a
// connection (a server backend) that had sat idle while the other pool
// worked, and paid for it (BENCHMARKS.md, "The producer, one pool").
func gormDBs(cfg config, w wakeup.Wakeup) (plain, herald *gorm.DB, err error) {
	gc := func() *gorm.Config { return &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)} }
	if plain, err = gorm.Open(postgres.Open(cfg.dsn), gc()); err != nil {
		return nil, nil, err
	}
	sqlDB, err := plain.DB()
	if err != nil {
		return nil, nil, err
	}
	if herald, err = gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), gc()); err != nil {
		return nil, nil, err
	}
	if err := resetHerald(context.Background(), sqlDB); err != nil {
		return nil, nil, err
	}
	if err := plain.AutoMigrate(&PlainRow{}, &CapturedRow{}, &PlainBulk{}, &CapturedBulk{}, &FloorBulk{}); err != nil {
		return nil, nil, err
	}
	p := gormcapture.New(gormcapture.Config{Wakeup: w, Logger: slog.New(slog.DiscardHandler)})
	if err := herald.Use(p); err != nil {
		return nil, nil, err
	}
	if err := p.Capture(&CapturedRow{}, envelope.Options{Payload: envelope.After}); err != nil {
		return nil, nil, err
	}
	if err := p.Capture(&CapturedBulk{}, envelope.Options{Payload: envelope.BeforeAndAfter}); err != nil {
		return nil, nil, err
	}
	return plain, herald, nil
}

const handInsert = `INSERT INTO herald_outbox (id, topic, payload, created_at) VALUES ($1, $2, $3, now())`

// handInsertKeyed is handInsert with an ordering key: the entry in the
// pending key index that every captured row's event (keyed by the row)
// costs, and an unordered event does not.
const handInsertKeyed = `INSERT INTO herald_outbox (id, topic, payload, ordering_key, created_at) VALUES ($1, $2, $3, $4, now())`

// producerRound alternates, write by write, a plain Create with each
// producer case in turn, and returns each case's time ÷ the time of the
// plain Creates alternated with it.
func producerRound(ctx context.Context, cfg config) ([]figure, error) {
	plain, herald, err := gormDBs(cfg, nil)
	if err != nil {
		return nil, err
	}
	plainSQL, _ := plain.DB()
	heraldSQL, _ := herald.DB()
	defer plainSQL.Close()
	defer heraldSQL.Close()
	plain, herald = plain.WithContext(ctx), herald.WithContext(ctx)
	// watermill's table for the topic, created once.
	wmSchema := wsql.DefaultPostgreSQLSchema{}
	wmPub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(plainSQL), wsql.PublisherConfig{SchemaAdapter: wmSchema, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	if err := wmPub.Publish("producer", message.NewMessage(watermill.NewUUID(), []byte(`{}`))); err != nil {
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
	rw := &riverWorker{}
	rc := riverConfig(false, rw)
	rc.Queues = nil // insert-only client
	riverClient, err := river.NewClient(riverdatabasesql.New(plainSQL), rc)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(map[string]any{"id": 1, "name": "n", "status": "new", "amount": 1})
	row := func(i int) *PlainRow { return &PlainRow{Name: "n", Status: "new", Amount: i} }
	sqlTx := func(tx *gorm.DB) *sql.Tx { return tx.Statement.ConnPool.(*sql.Tx) }
	cases := []producerCase{
		{"herald captured Create (GORM's default transaction)", func(i int) error {
			return herald.Create((*CapturedRow)(row(i))).Error
		}},
		{"GORM Create of a model herald does not capture, on herald's *gorm.DB (the plugin's cost on writes it does not capture)", func(i int) error {
			return herald.Create(row(i)).Error
		}},
		{"GORM Create + herald Enqueue, one transaction", func(i int) error {
			return herald.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(row(i)).Error; err != nil {
					return err
				}
				_, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "producer", Payload: json.RawMessage(body)})
				return err
			})
		}},
		{"GORM Create + hand-written INSERT into herald's table", func(i int) error {
			return plain.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(row(i)).Error; err != nil {
					return err
				}
				return tx.Exec(handInsert, uuid.NewString(), "producer", string(body)).Error
			})
		}},
		{"GORM Create + hand-written INSERT into herald's table, keyed by the row (ordering_key = its id, as a captured row's event is)", func(i int) error {
			return plain.Transaction(func(tx *gorm.DB) error {
				r := row(i)
				if err := tx.Create(r).Error; err != nil {
					return err
				}
				return tx.Exec(handInsertKeyed, uuid.NewString(), "producer", string(body), strconv.FormatInt(r.ID, 10)).Error
			})
		}},
		{"GORM Create + watermill-sql Publish", func(i int) error {
			return plain.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(row(i)).Error; err != nil {
					return err
				}
				pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(sqlTx(tx)), wsql.PublisherConfig{SchemaAdapter: wmSchema}, watermill.NopLogger{})
				if err != nil {
					return err
				}
				return pub.Publish("producer", message.NewMessage(watermill.NewUUID(), body))
			})
		}},
		{"GORM Create + River InsertTx (riverdatabasesql)", func(i int) error {
			return plain.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(row(i)).Error; err != nil {
					return err
				}
				_, err := riverClient.InsertTx(ctx, sqlTx(tx), riverArgs{Body: string(body)}, nil)
				return err
			})
		}},
	}
	// Each case is alternated with plain Creates of its own, one case after
	// the other: in one rotation of every case, a case's time depended on
	// the case written before it (captured Create, right after the plain
	// Create, measured 1.44 in the rotation and 1.33 alternated alone;
	// watermill's Publish 1.23 and 1.27–1.30; BENCHMARKS.md, "The producer,
	// one pool").
	plainCreate := func(i int) error { return plain.Create(row(i)).Error }
	var tAllPlain time.Duration
	out := []figure{{"plain GORM Create, µs per write (the divisor)", "µs", 0, "", ""}}
	for _, c := range cases {
		tPlain, tCase, err := alternate(plainCreate, []producerCase{c}, cfg.writes)
		if err != nil {
			return nil, err
		}
		tAllPlain += tPlain
		out = append(out, figure{c.name, "÷ plain Create", float64(tCase[0]) / float64(tPlain), "", ""})
	}
	out[0].value = float64(tAllPlain.Microseconds()) / float64(cfg.writes*len(cases))
	return out, nil
}

// producerCase is one producer write, timed against a plain Create.
type producerCase struct {
	name  string
	write func(i int) error
}

// alternate warms plainCreate and every case up (50 writes each: the
// connections, prepared statements, the plugin's first insert), then
// runs writes rounds of plainCreate followed by each case, and returns
// the total time of plainCreate and of each case.
func alternate(plainCreate func(i int) error, cases []producerCase, writes int) (tPlain time.Duration, tCase []time.Duration, err error) {
	for i := range 50 {
		if err := plainCreate(i); err != nil {
			return 0, nil, err
		}
		for _, c := range cases {
			if err := c.write(i); err != nil {
				return 0, nil, fmt.Errorf("%s: %w", c.name, err)
			}
		}
	}
	tCase = make([]time.Duration, len(cases))
	for i := range writes {
		s := time.Now()
		if err := plainCreate(i); err != nil {
			return 0, nil, err
		}
		tPlain += time.Since(s)
		for j, c := range cases {
			s := time.Now()
			if err := c.write(i); err != nil {
				return 0, nil, fmt.Errorf("%s: %w", c.name, err)
			}
			tCase[j] += time.Since(s)
		}
	}
	return tPlain, tCase, nil
}
