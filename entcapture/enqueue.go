package entcapture

import (
	"context"
	stdsql "database/sql"
	"fmt"
	"strconv"

	"entgo.io/ent/dialect"

	"github.com/heraldgo/herald/envelope"
)

// Conn is a generated *ent.Client or *ent.Tx of a code generation that
// used entcapturegen.Extension (which generates HeraldDriver, HeraldTx and
// HeraldOnCommit; the sql/execquery feature it enables generates
// ExecContext and QueryContext). A "does not implement entcapture.Conn
// (missing method …)" compile error means the ent package was generated
// without the extension: ent's default generate.go line (go run -mod=mod
// entgo.io/ent/cmd/ent generate ./schema) runs ent's CLI, which never runs
// extensions. Write entc.go (with //go:build ignore) calling
// entc.Generate(…, entc.Extensions(entcapturegen.Extension())), make
// generate.go's line //go:generate go run -mod=mod entc.go, and run go
// generate.
type Conn interface {
	HeraldDriver() dialect.Driver
	ExecContext(ctx context.Context, query string, args ...any) (stdsql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*stdsql.Rows, error)
}

// txConn is a Conn that may be a transaction: the generated *ent.Tx, and
// the *ent.Client of a transaction (tx.Client(), m.Client() in a hook).
type txConn interface {
	Conn
	HeraldTx() dialect.Tx
	HeraldOnCommit(f func()) bool
}

// Enqueue writes one event through c. See EnqueueMany.
func Enqueue(ctx context.Context, c Conn, m envelope.Message) (*envelope.Event, error) {
	es, err := EnqueueMany(ctx, c, []envelope.Message{m})
	if err != nil {
		return nil, err
	}
	return es[0], nil
}

// EnqueueMany writes events through c, in message order, and returns them
// in that order; for an idempotency key already stored (or repeated in ms)
// the stored event comes back unchanged and nothing new is written for it.
//
// With an *ent.Tx, or the client of one (tx.Client(), or m.Client() in a
// hook of a write in client.Tx), the events are written in a savepoint of
// the transaction, so a failure leaves it usable and without them; they
// commit with the transaction's writes. From a hook of a captured write
// made outside client.Tx (Enqueue(ctx, m.Client(), …) in a schema hook,
// which runs inside the capture hook), they are written in a savepoint of
// the write's own transaction: they commit, or roll back, with the row.
// (A hook that runs before the capture hook — client.Use, or a mixin
// listed before entcapture.Mixin — runs before that transaction exists:
// run the write in client.Tx to make it atomic with the events.) With any
// other *ent.Client they are written in a transaction of their own.
// Events with an ordering key are serialized per key on PostgreSQL (an
// advisory lock), so their sequence order is their commit order. The
// Config of the client's entcapture.Driver gives the outbox table and the
// Wakeup, signalled with the topics of the events inserted once the
// outermost transaction commits (never after a rollback; a
// wakeup.TxSignaler inside it); without the wrapper the default table is
// used and nothing is signalled. A rejected message (envelope.ErrValidation)
// writes nothing.
func EnqueueMany(ctx context.Context, c Conn, ms []envelope.Message) ([]*envelope.Event, error) {
	if c == nil {
		return nil, envelope.Validationf("entcapture.EnqueueMany", "nil Conn")
	}
	drv := c.HeraldDriver()
	cd := captureOf(drv)
	var (
		w   *envelope.Writer
		d   envelope.Dialect
		cfg Config
		err error
	)
	if cd != nil {
		if err := cd.init(); err != nil {
			return nil, err
		}
		w, d, cfg = cd.writer, cd.dialect, cd.cfg
	} else {
		if d, err = dialectOf(drv.Dialect()); err != nil {
			return nil, err
		}
		if w, err = defaultWriter(d); err != nil {
			return nil, err
		}
	}
	if len(ms) == 0 {
		return nil, nil
	}
	if tc, ok := c.(txConn); ok && tc.HeraldTx() != nil {
		s := &scope{ctx: ctx, cd: cd, writer: w, d: d, cfg: cfg}
		return s.enqueueSavepoint(c, ms, func(topics []string) {
			wk := cfg.Wakeup
			tc.HeraldOnCommit(func() { s.signal(wk, topics) })
		})
	}
	if cd != nil {
		if t := cd.hookTxOf(ctx); t != nil {
			// Inside a captured write's own transaction (a hook's
			// m.Client()): join it; its commit signals.
			s := &scope{ctx: ctx, cd: cd, writer: w, d: d, cfg: cfg}
			return s.enqueueSavepoint(c, ms, t.addTopics)
		}
	}

	base := drv
	if cd != nil {
		base = cd.Driver
	}
	tx, err := base.Tx(ctx)
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: begin: %w", err)
	}
	q, ok := tx.(stdExecQuerier)
	if !ok {
		_ = tx.Rollback()
		return nil, fmt.Errorf("herald/entcapture: %T has no ExecContext/QueryContext (use an entgo.io/ent/dialect/sql driver)", tx)
	}
	s := &scope{ctx: ctx, cd: cd, writer: w, d: d, cfg: cfg}
	res, err := w.Write(ctx, q, ms)
	if err == nil {
		err = s.topicsOf(ctx, q, res.Topics)
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("herald/entcapture: commit: %w", err)
	}
	if len(s.topics) > 0 {
		s.signal(cfg.Wakeup, s.topics)
	}
	return res.Events, nil
}

// enqueueSavepoint writes ms through c in a savepoint of the transaction c
// runs in; a failure rolls back to it and leaves the transaction usable.
// after gets the topics to signal once the outermost commit is done.
func (s *scope) enqueueSavepoint(c Conn, ms []envelope.Message, after func([]string)) ([]*envelope.Event, error) {
	ctx := s.ctx
	s.savepoint = "herald_sp" + strconv.FormatUint(spSeq.Add(1), 10)
	if _, err := c.ExecContext(ctx, "SAVEPOINT "+s.savepoint); err != nil {
		return nil, fmt.Errorf("herald/entcapture: savepoint: %w", err)
	}
	res, err := s.writer.Write(ctx, c, ms)
	if err == nil {
		err = s.topicsOf(ctx, c, res.Topics)
	}
	if err != nil {
		if _, rerr := c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+s.savepoint); rerr != nil {
			return nil, fmt.Errorf("%w (and rolling back to the savepoint failed: %w)", err, rerr)
		}
		_, _ = c.ExecContext(context.WithoutCancel(ctx), "RELEASE SAVEPOINT "+s.savepoint)
		return nil, err
	}
	if _, err := c.ExecContext(ctx, "RELEASE SAVEPOINT "+s.savepoint); err != nil {
		return nil, fmt.Errorf("herald/entcapture: release savepoint: %w", err)
	}
	if len(s.topics) > 0 {
		after(s.topics)
	}
	return res.Events, nil
}

// topicsOf signals a TxSignaler inside the transaction, or keeps the
// topics for after the commit.
func (s *scope) topicsOf(ctx context.Context, q envelope.Querier, topics []string) error {
	if len(topics) == 0 || s.cfg.Wakeup == nil {
		return nil
	}
	if ts, ok := s.cfg.Wakeup.(interface {
		SignalTx(ctx context.Context, q envelope.Querier, topics []string) error
	}); ok {
		if err := ts.SignalTx(ctx, q, topics); err != nil {
			return fmt.Errorf("herald/entcapture: wakeup in transaction: %w", err)
		}
		return nil
	}
	s.topics = append(s.topics, topics...)
	return nil
}
