// Package gorminbox runs inbox handlers in GORM transactions: the handler
// gets a *gorm.DB transaction that also records the message's id, so its
// writes — captured models and gormcapture.Enqueue included — commit with
// the id, exactly once per message, or not at all.
package gorminbox

import (
	"context"
	"database/sql"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/outbox"
)

// tx adapts a GORM transaction to inbox.Tx.
type tx struct{ db *gorm.DB }

func (t tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.db.Statement.ConnPool.ExecContext(ctx, q, args...)
}

func (t tx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.db.Statement.ConnPool.QueryContext(ctx, q, args...)
}

func (t tx) Commit() error   { return t.db.Commit().Error }
func (t tx) Rollback() error { return t.db.Rollback().Error }

// Handle processes m once: it begins a transaction on db, records m's id
// in it (in's inbox table, which must be in db's database), runs fn with
// the transaction, and commits both; a repeat is inbox.Duplicate without
// running fn; an error or a panic from fn rolls both back. It is
// inbox.Handle for GORM.
//
// db must not be a transaction already: GORM would run this one as a
// savepoint, whose "commit" commits nothing — the id and the effect would
// still roll back with the outer transaction, and a repeat in between
// would not see the id. Use inbox.HandleWithin with the outer
// transaction's connection for that (tx.Statement.ConnPool).
func Handle(ctx context.Context, in *inbox.Inbox, db *gorm.DB, m inbox.Message, fn func(tx *gorm.DB) error) (inbox.Outcome, error) {
	if _, ok := db.Statement.ConnPool.(gorm.TxCommitter); ok {
		return 0, outbox.Configurationf("gorminbox.Handle", "db is a transaction already; give the *gorm.DB the transaction began from, or use inbox.HandleWithin inside it")
	}
	begin := func(ctx context.Context) (tx, error) {
		t := db.WithContext(ctx).Begin()
		return tx{t}, t.Error
	}
	return inbox.HandleTx(ctx, in, m, begin, func(ctx context.Context, t tx) error {
		return fn(t.db.WithContext(ctx))
	})
}

// Within is inbox.HandleWithin for a GORM transaction the caller opened
// and commits: it records m's id in tx and runs fn when the id is new.
func Within(ctx context.Context, in *inbox.Inbox, tx *gorm.DB, m inbox.Message, fn func(ctx context.Context) error) (inbox.Outcome, error) {
	if _, ok := tx.Statement.ConnPool.(gorm.TxCommitter); !ok {
		return 0, outbox.Configurationf("gorminbox.Within", "tx is not a transaction: the id would commit on its own; use Handle")
	}
	return in.HandleWithin(ctx, tx.Statement.ConnPool, m, fn)
}
