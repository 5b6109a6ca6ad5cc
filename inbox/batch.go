package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/heraldgo/herald/envelope"
)

// ClaimBatch records the ids of ms in tx, a transaction the caller opened,
// in one statement with one JSON parameter (whatever the batch's size;
// on MySQL two, see prepareMySQL),
// and returns the messages whose ids were new, in ms's order; an id given
// twice is new at its first place only. The caller does the work of the
// new ones in tx and commits. Batches bypass the cache and ignore Order.
func (in *Inbox) ClaimBatch(ctx context.Context, tx envelope.Querier, ms []Message) ([]Message, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	ids, err := sortedIDs(ms)
	if err != nil {
		return nil, err
	}
	var rows *sql.Rows
	if in.d == envelope.MySQL {
		rows, err = in.claimBatchMySQL(ctx, tx, ids)
	} else {
		rows, err = tx.QueryContext(ctx, in.claimBatchSQL, in.cfg.Consumer, ids)
	}
	if err != nil {
		return nil, fmt.Errorf("herald/inbox: record a batch of %d: %w", len(ms), err)
	}
	fresh, err := scanIDs(rows)
	if err != nil {
		return nil, fmt.Errorf("herald/inbox: record a batch of %d: %w", len(ms), err)
	}
	out := make([]Message, 0, len(fresh))
	for _, m := range ms {
		if fresh[m.ID] {
			out = append(out, m)
			delete(fresh, m.ID) // a second copy in the batch is a duplicate
		}
	}
	return out, nil
}

// HandleBatch processes a batch effectively once: in one transaction it
// records the batch's ids (ClaimBatch) and runs fn with the messages not
// processed before, in the batch's order, and commits both. fn is not
// called when every message is a duplicate. An error or a panic rolls
// back the whole batch. It returns the messages fn got.
func (in *Inbox) HandleBatch(ctx context.Context, ms []Message, fn func(ctx context.Context, tx *sql.Tx, fresh []Message) error) (fresh []Message, err error) {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("herald/inbox: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	fresh, err = in.ClaimBatch(ctx, tx, ms)
	if err != nil || len(fresh) == 0 {
		return nil, err
	}
	if err := fn(ctx, tx, fresh); err != nil {
		return nil, err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("herald/inbox: commit a batch of %d: %w", len(ms), err)
	}
	return fresh, nil
}

// Seen reports which of ids the consumer has processed (committed), in
// one statement; it records nothing.
func (in *Inbox) Seen(ctx context.Context, ids []string) (map[string]bool, error) {
	if len(ids) == 0 {
		return map[string]bool{}, nil
	}
	arg, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := in.db.QueryContext(ctx, in.seenSQL, in.cfg.Consumer, string(arg))
	if err != nil {
		return nil, fmt.Errorf("herald/inbox: seen: %w", err)
	}
	return scanIDs(rows)
}

func sortedIDs(ms []Message) (string, error) {
	ids := make([]string, len(ms))
	for i, m := range ms {
		if err := m.validate(); err != nil {
			return "", fmt.Errorf("batch[%d]: %w", i, err)
		}
		ids[i] = m.ID
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	b, err := json.Marshal(ids)
	return string(b), err
}

func scanIDs(rows *sql.Rows) (map[string]bool, error) {
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}
