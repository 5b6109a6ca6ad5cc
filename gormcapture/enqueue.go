package gormcapture

import (
	"context"
	"fmt"
	"strconv"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/wakeup"
)

// Enqueue writes one event through db: in db's transaction when db is one
// (the event commits or rolls back with it), otherwise in a transaction of
// its own that commits before Enqueue returns. See EnqueueMany.
func Enqueue(db *gorm.DB, m envelope.Message) (*envelope.Event, error) {
	es, err := EnqueueMany(db, []envelope.Message{m})
	if err != nil {
		return nil, err
	}
	return es[0], nil
}

// EnqueueMany writes events through db, in message order, and returns
// them in that order; for an idempotency key already stored (or repeated
// in ms) the stored event comes back unchanged and nothing new is written
// for it.
//
// In a transaction (db.Transaction, db.Begin) the events commit with the
// caller's writes. Every message is checked before any statement runs, so
// a rejected message (envelope.ErrValidation) writes nothing and leaves
// the transaction usable. When the events take one INSERT — no Extra
// columns, all with or all without an idempotency key, and at most a few
// thousand — that INSERT is the whole write, atomic by itself, with no
// savepoint around it: the cost of a hand-written INSERT. A database
// failure of it (a deadlock, a lost connection) fails the caller's
// transaction as a failure of any of its statements does. Otherwise (Extra
// columns, whose values only the database checks, several INSERTs, or a
// wakeup.TxSignaler that signals inside the transaction) the events are
// written in a savepoint of the transaction, so a failure leaves it usable
// and without them. Outside a transaction they are written in a
// transaction of their own, on the pool a captured Create would write
// through (with dbresolver: its source for the outbox table, not the pool
// given to gorm.Open).
//
// On PostgreSQL through pgx, many events without idempotency keys or Extra
// columns are one INSERT … SELECT FROM unnest(…) binding one array per
// column, whatever their number. The configured Wakeup is signalled with the topics
// of the events actually inserted, once, after the outermost commit, and
// never after a rollback (a wakeup.TxSignaler is signalled inside the
// transaction instead).
//
// The plugin must be installed on db (db.Use(gormcapture.New(...))): it
// knows the outbox table and the dialect.
func EnqueueMany(db *gorm.DB, ms []envelope.Message) ([]*envelope.Event, error) {
	if db == nil || db.Statement == nil {
		return nil, outbox.Validationf("gormcapture.EnqueueMany", "nil *gorm.DB")
	}
	if db.Error != nil {
		return nil, db.Error
	}
	p, ok := db.Plugins[Name].(*Plugin)
	if !ok || p.writer == nil {
		return nil, outbox.Configurationf("gormcapture.EnqueueMany", "the capture plugin is not installed on this *gorm.DB: call db.Use(gormcapture.New(gormcapture.Config{...})) after gorm.Open")
	}
	if len(ms) == 0 {
		return nil, nil
	}
	st := db.Statement
	ctx := st.Context
	cp := p.wrap(st.ConnPool)

	write := p.writer.Write
	if len(ms) > 1 && p.bindsArrays(cp) {
		write = outbox.WriteArrays(p.writer) // unnest; Write when a message has an idempotency key or Extra
	}

	if raw := rawTx(cp); raw != nil {
		if p.oneStatement(ms) {
			res, err := write(ctx, querier{cp, p}, ms)
			if err == nil {
				err = p.signal(ctx, cp, res.Topics)
			}
			if err != nil {
				return nil, err
			}
			return res.Events, nil
		}
		name := "herald_sp" + strconv.FormatUint(p.spSeq.Add(1), 10)
		if _, err := raw.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
			return nil, fmt.Errorf("herald/gormcapture: savepoint: %w", err)
		}
		res, err := write(ctx, querier{cp, p}, ms)
		if err == nil {
			err = p.signal(ctx, cp, res.Topics)
		}
		if err != nil {
			if _, rerr := raw.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+name); rerr != nil {
				return nil, fmt.Errorf("%w (and rolling back to the savepoint failed: %w)", err, rerr)
			}
			_, _ = raw.ExecContext(ctx, "RELEASE SAVEPOINT "+name)
			return nil, err
		}
		if _, err := raw.ExecContext(ctx, "RELEASE SAVEPOINT "+name); err != nil {
			return nil, fmt.Errorf("herald/gormcapture: release savepoint: %w", err)
		}
		return res.Events, nil
	}

	pool := p.writePool(db)
	if len(ms) > 1 && p.bindsArrays(pool) {
		write = outbox.WriteArrays(p.writer)
	} else {
		write = p.writer.Write
	}
	tx, err := beginOn(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("herald/gormcapture: begin: %w", err)
	}
	tc := tx.(gorm.TxCommitter)
	res, err := write(ctx, querier{tx, p}, ms)
	if err == nil {
		err = p.signal(ctx, tx, res.Topics)
	}
	if err != nil {
		_ = tc.Rollback()
		return nil, err
	}
	if err := tc.Commit(); err != nil {
		return nil, fmt.Errorf("herald/gormcapture: commit: %w", err)
	}
	return res.Events, nil
}

// oneStatement reports whether writing ms in a caller's transaction is a
// single INSERT that needs no savepoint: a statement is atomic, and every
// message is validated before it runs. Extra values are checked only by
// the database (a type a column refuses), several INSERTs could fail
// half-way, and a wakeup.TxSignaler runs a statement after the INSERT:
// those keep the savepoint. (A second, read-only statement may follow, to
// read the events of idempotency keys already stored.)
func (p *Plugin) oneStatement(ms []envelope.Message) bool {
	if _, ok := p.cfg.Wakeup.(wakeup.TxSignaler); ok {
		return false
	}
	// The Writer splits its INSERTs as if each bound 8 parameters per event
	// plus the key locks' 2 (as a VALUES INSERT does); beyond that the write
	// is several INSERTs.
	if len(ms)*8+2 > outbox.MaxBindParams(p.writer.Dialect()) {
		return false
	}
	idem := ms[0].IdempotencyKey != ""
	for i := range ms {
		if len(ms[i].Extra) > 0 || (ms[i].IdempotencyKey != "") != idem {
			return false
		}
	}
	return true
}

// writePool returns the pool a captured Create on db would write through
// outside a transaction: dbresolver (and any plugin that switches pools
// the same way) swaps the statement's pool in a callback of the create
// chain, which Enqueue does not run, so that callback is run here on a
// statement of the outbox table. Without it, db's own pool.
func (p *Plugin) writePool(db *gorm.DB) gorm.ConnPool {
	if fc := db.Callback().Create().Get(dbresolverCallback); fc != nil {
		ctx := db.Statement.Context
		if ctx == nil {
			ctx = context.Background()
		}
		// A Session with a Context clones the statement, keeping its
		// clauses (dbresolver.Use, Write): the callback changes the clone.
		tx := db.Session(&gorm.Session{Context: ctx})
		tx.Statement.Table = p.writer.Table().Name
		fc(tx)
		return p.wrap(tx.Statement.ConnPool)
	}
	return p.wrap(db.Statement.ConnPool)
}

// dbresolverCallback is the name of the callback dbresolver registers
// before every create, update and delete to pick the write source.
const dbresolverCallback = "gorm:db_resolver"
