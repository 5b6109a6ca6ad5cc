package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/heraldgo/herald/integration/relaybench"
	"github.com/heraldgo/herald/relay"
)

// payload is the ~250-byte body every drained message carries (the same as
// relaybench's).
const payload = `{"model": "library.Loan", "operation": "updated", "pk": 7, "changed": ["status"], ` +
	`"before": {"id": 7, "status": "lent", "fee": "0.00", "reader_id": 3}, ` +
	`"after": {"id": 7, "status": "returned", "fee": "0.00", "reader_id": 3}, "occurred_at": "2026-10-06T12:00:00Z"}`

type drainCase struct {
	name string
	run  func(context.Context, config) (float64, string, error)
}

// watermillBatches are the SubscribeBatchSizes of watermill's tuned
// drains (-watermill-batches), beside its default (100): the fastest of
// them is its best batch in the run.
var watermillBatches = []int{1000, 10000}

// backlogSizes are the backlog section's drains (-backlogs).
var backlogSizes = []int{10000, 100000, 1000000}

func drainCases() []drainCase {
	cs := []drainCase{
		{"herald relay, defaults (batch 100, 1 relay, delivery.Func)", heraldDrain(100, 1, false, 0)},
		{"herald relay, batch 1000, 1 relay, BatchDelivery", heraldDrain(1000, 1, true, 0)},
		{"herald relay, tuned (batch 1000, 2 relays, BatchDelivery)", heraldDrain(1000, 2, true, 0)},
		{"herald relay, batch 1000, 1 relay, BatchDelivery, 1,000 ordering keys", heraldDrain(1000, 1, true, 1000)},
		{"herald relay, batch 10000, 1 relay, BatchDelivery", heraldDrain(10000, 1, true, 0)},
		{"herald relay, batch 1000, 1 relay, BatchDelivery, LeaseByLock", heraldDrainConfig(1, true, relay.Config{BatchSize: 1000, LeaseByLock: true})},
		{"herald relay, batch 1000, 2 relays, BatchDelivery, LeaseByLock", heraldDrainConfig(2, true, relay.Config{BatchSize: 1000, LeaseByLock: true})},
		{"herald relay, defaults (batch 100, 1 relay, delivery.Func), LeaseByLock", heraldDrainConfig(1, false, relay.Config{LeaseByLock: true})},
		{"herald relay, batch 1000, 1 relay, BatchDelivery, DeleteOnPublish, LeaseByLock", heraldDrainConfig(1, true, relay.Config{BatchSize: 1000, DeleteOnPublish: true, LeaseByLock: true})},
		{"herald relay, batch 1000, 1 relay, BatchDelivery, DeleteOnPublish", heraldDrainConfig(1, true, relay.Config{BatchSize: 1000, DeleteOnPublish: true})},
		{"herald relay, batch 10000, 1 relay, BatchDelivery, DeleteOnPublish", heraldDrainConfig(1, true, relay.Config{BatchSize: 10000, DeleteOnPublish: true})},
		{"bare lease-and-mark loop (relaybench), batch 100, 1 worker", bareDrain(100, 1)},
		{"bare lease-and-mark loop (relaybench), batch 1000, 1 worker", bareDrain(1000, 1)},
		{"bare lease-and-mark loop (relaybench), batch 1000, 2 workers", bareDrain(1000, 2)},
		{"bare lease-and-mark loop (relaybench), batch 10000, 1 worker", bareDrain(10000, 1)},
		{"bare lease-and-mark loop (relaybench), batch 1000, 1 worker, 1,000 ordering keys", bareDrainKeys(1000, 1, 1000)},
		{"watermill-sql subscriber, defaults (batch 100)", watermillDrain(0)},
	}
	for _, b := range watermillBatches {
		cs = append(cs, drainCase{fmt.Sprintf("watermill-sql subscriber, batch %d", b), watermillDrain(b)})
	}
	cs = append(cs, drainCase{"watermill forwarder (components/forwarder on the SQL subscriber), defaults (batch 100)", forwarderDrain(0)})
	for _, b := range watermillBatches {
		cs = append(cs, drainCase{fmt.Sprintf("watermill forwarder (components/forwarder on the SQL subscriber), batch %d", b), forwarderDrain(b)})
	}
	return append(cs,
		drainCase{"River, defaults (MaxWorkers 100)", riverDrain(false)},
		drainCase{"River, tuned (MaxWorkers 1000, FetchCooldown 1ms, FetchPollInterval 10ms)", riverDrain(true)})
}

func openDB(cfg config) (*sql.DB, error) { return sql.Open("pgx", cfg.dsn) }

func heraldDrain(batch, relays int, batchDelivery bool, keys int) func(context.Context, config) (float64, string, error) {
	return func(ctx context.Context, cfg config) (float64, string, error) {
		return heraldDrainOf(ctx, cfg, cfg.events, batch, relays, batchDelivery, keys)
	}
}

// heraldDrainConfig drains the run's events (unordered) with relays
// relays of cfg.
func heraldDrainConfig(relays int, batchDelivery bool, cfg relay.Config) func(context.Context, config) (float64, string, error) {
	return func(ctx context.Context, c config) (float64, string, error) {
		return drainFilled(ctx, c, c.events, 0, func(db *sql.DB) (time.Duration, error) {
			return relaybench.DrainRelaysConfig(ctx, db, "herald_outbox", c.events, relays, batchDelivery, cfg)
		})
	}
}

// heraldDrainOf drains n events spread over keys ordering keys (0:
// unordered) with relays relays of BatchSize batch.
func heraldDrainOf(ctx context.Context, cfg config, n, batch, relays int, batchDelivery bool, keys int) (float64, string, error) {
	return drainFilled(ctx, cfg, n, keys, func(db *sql.DB) (time.Duration, error) {
		return relaybench.DrainRelays(ctx, db, "herald_outbox", n, batch, relays, batchDelivery)
	})
}

// drainFilled fills herald's table with n events spread over keys
// ordering keys (0: unordered), runs drain on it and returns its rate,
// with a note of the CPU the drain took per 1,000 events (cpuNote).
func drainFilled(ctx context.Context, cfg config, n, keys int, drain func(*sql.DB) (time.Duration, error)) (float64, string, error) {
	db, err := openDB(cfg)
	if err != nil {
		return 0, "", err
	}
	defer db.Close()
	if err := fillHeraldKeys(ctx, db, n, keys); err != nil {
		return 0, "", err
	}
	before := readCPU()
	d, err := drain(db)
	return rate(n, d), cpuNote(n, before, readCPU()), err
}

// backlogCases drain backlogs of each -backlogs size with the relay at its
// defaults (batch 100, one relay): at PostgreSQL's default settings (JIT
// on; -stock for autovacuum on) the rate must not fall with the size.
// Beside each, the bare loop at the same batch drains the same backlog:
// the floor of that fall, since a larger table (a deeper index, pages
// past shared_buffers) costs a loop with nothing else in it too.
func backlogCases(sizes []int) []drainCase {
	var cs []drainCase
	for _, n := range sizes {
		cs = append(cs, drainCase{fmt.Sprintf("herald relay, defaults (batch 100, 1 relay), backlog of %d", n),
			func(ctx context.Context, cfg config) (float64, string, error) {
				return heraldDrainOf(ctx, cfg, n, 100, 1, false, 0)
			}})
		cs = append(cs, drainCase{fmt.Sprintf("bare lease-and-mark loop (relaybench), batch 100, 1 worker, backlog of %d", n),
			func(ctx context.Context, cfg config) (float64, string, error) {
				return bareDrainOf(ctx, cfg, n, 100, 1, 0)
			}})
	}
	return cs
}

func bareDrain(batch, workers int) func(context.Context, config) (float64, string, error) {
	return bareDrainKeys(batch, workers, 0)
}

// bareDrainKeys is bareDrain of events spread over keys ordering keys.
// The bare loop's lease keeps per-key order with the simplest head test
// (no earlier pending event of the key, NOT EXISTS): beside its unordered
// drain it shows what that order costs a loop with nothing else in it,
// the reference for the relay's keyed drain.
func bareDrainKeys(batch, workers, keys int) func(context.Context, config) (float64, string, error) {
	return func(ctx context.Context, cfg config) (float64, string, error) {
		return bareDrainOf(ctx, cfg, cfg.events, batch, workers, keys)
	}
}

// bareDrainOf drains n events spread over keys ordering keys (0:
// unordered) with the bare loop.
func bareDrainOf(ctx context.Context, cfg config, n, batch, workers, keys int) (float64, string, error) {
	return drainFilled(ctx, cfg, n, keys, func(db *sql.DB) (time.Duration, error) {
		return relaybench.DrainBare(ctx, db, "herald_outbox", n, batch, workers)
	})
}

// resetHerald empties herald's table (creating it if needed) and, unless
// -unordered-idx=false, adds the index the lease reads unordered events
// from ({base}_pending_unordered_idx: the next schema version, not yet
// created by envelope.Migrate).
func resetHerald(ctx context.Context, db *sql.DB) error {
	if err := relaybench.Reset(ctx, db, "herald_outbox"); err != nil {
		return err
	}
	if !unorderedIdx {
		return nil
	}
	_, err := db.ExecContext(ctx, relaybench.UnorderedIndexDDL)
	return err
}

func fillHeraldKeys(ctx context.Context, db *sql.DB, n, keys int) error {
	if err := resetHerald(ctx, db); err != nil {
		return err
	}
	if err := relaybench.Fill(ctx, db, "herald_outbox", n, keys); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `CHECKPOINT`)
	return err
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

var wmTopicSeq atomic.Int64

// publishWatermill publishes n messages (payload, a traceparent header) to
// topic through pub, 1,000 per Publish call.
func publishWatermill(pub message.Publisher, topic string, n int) error {
	for i := 0; i < n; i += 1000 {
		msgs := make([]*message.Message, min(1000, n-i))
		for j := range msgs {
			msgs[j] = message.NewMessage(watermill.NewUUID(), []byte(payload))
			msgs[j].Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			return err
		}
	}
	return nil
}

// settle gives a freshly filled table its statistics and writes the fill
// to disk, so that the drain timed next starts from the same state.
func settle(ctx context.Context, db *sql.DB, table string) error {
	if _, err := db.ExecContext(ctx, `ANALYZE `+table); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `CHECKPOINT`)
	return err
}

// watermillDrain publishes n messages on a fresh topic (a table of its own),
// then times a subscriber acknowledging all of them. batch 0 = the
// subscriber's default (100).
func watermillDrain(batch int) func(context.Context, config) (float64, string, error) {
	return func(ctx context.Context, cfg config) (float64, string, error) {
		db, err := openDB(cfg)
		if err != nil {
			return 0, "", err
		}
		defer db.Close()
		logger := watermill.NopLogger{}
		schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch}
		topic := fmt.Sprintf("drain_%d_%d", time.Now().UnixNano()%1e6, wmTopicSeq.Add(1))
		pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, logger)
		if err != nil {
			return 0, "", err
		}
		if err := publishWatermill(pub, topic, cfg.events); err != nil {
			return 0, "", err
		}
		table := schema.MessagesTable(topic)
		if err := settle(ctx, db, table); err != nil {
			return 0, "", err
		}
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
			SchemaAdapter: schema, OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true,
		}, logger)
		if err != nil {
			return 0, "", err
		}
		defer sub.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		start := time.Now()
		ch, err := sub.Subscribe(cctx, topic)
		if err != nil {
			return 0, "", err
		}
		for got := range cfg.events {
			select {
			case m := <-ch:
				m.Ack()
			case <-cctx.Done():
				return 0, "", fmt.Errorf("watermill drain: %d of %d: %w", got, cfg.events, cctx.Err())
			}
		}
		d := time.Since(start)
		_, _ = db.ExecContext(ctx, `DROP TABLE IF EXISTS `+table)
		return rate(cfg.events, d), "", nil
	}
}

// forwarderDrain publishes n messages through watermill's forwarder
// publisher (each wrapped in its envelope, into the SQL table of the
// forwarder's topic), then times the forwarder — a Router handler reading
// that topic with the SQL subscriber, unwrapping each message and
// publishing it to its destination — until all n reached the destination,
// a no-op publisher. batch 0 = the subscriber's default (100).
func forwarderDrain(batch int) func(context.Context, config) (float64, string, error) {
	return func(ctx context.Context, cfg config) (float64, string, error) {
		db, err := openDB(cfg)
		if err != nil {
			return 0, "", err
		}
		defer db.Close()
		logger := watermill.NopLogger{}
		schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch}
		topic := fmt.Sprintf("fwd_%d_%d", time.Now().UnixNano()%1e6, wmTopicSeq.Add(1))
		sqlPub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, logger)
		if err != nil {
			return 0, "", err
		}
		pub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: topic})
		if err := publishWatermill(pub, "destination", cfg.events); err != nil {
			return 0, "", err
		}
		table := schema.MessagesTable(topic)
		defer func() { _, _ = db.ExecContext(context.Background(), `DROP TABLE IF EXISTS `+table) }()
		if err := settle(ctx, db, table); err != nil {
			return 0, "", err
		}
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
			SchemaAdapter: schema, OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true,
		}, logger)
		if err != nil {
			return 0, "", err
		}
		defer sub.Close()
		sink := &countingPublisher{want: int64(cfg.events), done: make(chan struct{})}
		f, err := forwarder.NewForwarder(sub, sink, logger, forwarder.Config{ForwarderTopic: topic, CloseTimeout: 10 * time.Second})
		if err != nil {
			return 0, "", err
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		start := time.Now()
		runErr := make(chan error, 1)
		go func() { runErr <- f.Run(cctx) }()
		select {
		case <-sink.done:
		case err := <-runErr:
			return 0, "", fmt.Errorf("watermill forwarder stopped after %d of %d: %w", sink.n.Load(), cfg.events, err)
		case <-ctx.Done():
			_ = f.Close()
			return 0, "", fmt.Errorf("watermill forwarder: %d of %d forwarded: %w", sink.n.Load(), cfg.events, ctx.Err())
		}
		d := time.Since(start)
		_ = f.Close()
		return rate(cfg.events, d), "", nil
	}
}

// countingPublisher is the forwarder's destination: it counts and drops.
type countingPublisher struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (p *countingPublisher) Publish(_ string, msgs ...*message.Message) error {
	if p.n.Add(int64(len(msgs))) == p.want {
		close(p.done)
	}
	return nil
}

func (p *countingPublisher) Close() error { return nil }

// riverArgs is the job every River case inserts.
type riverArgs struct {
	Body string `json:"body"`
	Sent int64  `json:"sent,omitempty"` // latency runs: unix nanos at commit (approximate: before)
	Seq  int64  `json:"seq,omitempty"`
}

func (riverArgs) Kind() string { return "peerbench" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	fn func(*river.Job[riverArgs])
}

func (w *riverWorker) Work(_ context.Context, j *river.Job[riverArgs]) error {
	if w.fn != nil {
		w.fn(j)
	}
	return nil
}

func riverMigrate(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

func riverConfig(tuned bool, w *riverWorker) *river.Config {
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	c := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		Workers: workers,
		Logger:  slog.New(slog.DiscardHandler),
	}
	if tuned {
		c.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1000, FetchCooldown: time.Millisecond, FetchPollInterval: 10 * time.Millisecond}}
		c.FetchCooldown = time.Millisecond
		c.FetchPollInterval = 10 * time.Millisecond
	}
	return c
}

func riverPool(ctx context.Context, cfg config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.dsn)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 20
	return pgxpool.NewWithConfig(ctx, pc)
}

func riverDrain(tuned bool) func(context.Context, config) (float64, string, error) {
	return func(ctx context.Context, cfg config) (float64, string, error) {
		pool, err := riverPool(ctx, cfg)
		if err != nil {
			return 0, "", err
		}
		defer pool.Close()
		if err := riverMigrate(ctx, pool); err != nil {
			return 0, "", err
		}
		if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
			return 0, "", err
		}
		var done atomic.Int64
		finished := make(chan struct{})
		w := &riverWorker{}
		client, err := river.NewClient(riverpgxv5.New(pool), riverConfig(tuned, w))
		if err != nil {
			return 0, "", err
		}
		params := make([]river.InsertManyParams, 0, 1000)
		for i := 0; i < cfg.events; i += len(params) {
			params = params[:0]
			for range min(1000, cfg.events-i) {
				params = append(params, river.InsertManyParams{Args: riverArgs{Body: payload}})
			}
			if _, err := client.InsertManyFast(ctx, params); err != nil {
				return 0, "", err
			}
		}
		if _, err := pool.Exec(ctx, `ANALYZE river_job`); err != nil {
			return 0, "", err
		}
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			return 0, "", err
		}
		events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: cfg.events + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
		defer cancelSub()
		go func() {
			for range events {
				if done.Add(1) == int64(cfg.events) {
					close(finished)
					return
				}
			}
		}()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		start := time.Now()
		if err := client.Start(cctx); err != nil {
			return 0, "", err
		}
		select {
		case <-finished:
		case <-cctx.Done():
			return 0, "", fmt.Errorf("river drain: %d of %d completed: %w", done.Load(), cfg.events, cctx.Err())
		}
		d := time.Since(start)
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		_ = client.Stop(sctx)
		return rate(cfg.events, d), "", nil
	}
}
