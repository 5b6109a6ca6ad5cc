package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/go-sql-driver/mysql"

	"github.com/heraldgo/herald/envelope"
)

// MySQL and MariaDB have neither ON CONFLICT DO NOTHING nor RETURNING, and
// what an INSERT … ON DUPLICATE KEY UPDATE reports as affected rows
// depends on the connection's CLIENT_FOUND_ROWS flag (clientFoundRows=true
// in a go-sql-driver DSN makes an unchanged row count 1). So on MySQL the
// inbox decides nothing by affected rows:
//
//   - Claim is a plain INSERT, and a duplicate key (error 1062) is a
//     Duplicate. InnoDB rolls back only the failed statement, not the
//     transaction, and an INSERT of an id another transaction holds
//     uncommitted waits for it, as on PostgreSQL: error 1062 if it
//     commits, inserted if it rolls back. (INSERT IGNORE is not used: it
//     turns other errors — a too long value, a bad time — into warnings.)
//   - The per-key mark is an upsert that keeps the greater sequence,
//     then a locking read of the key's row (the row the upsert locked):
//     the message is stale when the kept sequence is greater than its own.
//   - ClaimBatch inserts the batch with a random token in the claim
//     column (duplicates keep theirs: ON DUPLICATE KEY UPDATE changes
//     nothing) and reads back the rows that carry its token — the ids it
//     inserted. Two statements, one JSON parameter each, whatever the size.
func (in *Inbox) prepareMySQL() {
	t := in.t
	in.claimSQL = `INSERT INTO ` + t.Quoted + ` (consumer, message_id) VALUES (?, ?)`
	// <=, not <: HandleOnce releases an id whose handler failed, and its
	// redelivery (same sequence) must not find itself stale. MySQL runs
	// the assignments left to right: processed_at compares the old
	// sequence.
	in.markKeySQL = `INSERT INTO ` + t.keys + ` (consumer, ordering_key, sequence) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE processed_at = IF(sequence <= ?, UTC_TIMESTAMP(6), processed_at), sequence = GREATEST(sequence, ?)`
	in.keySeqSQL = `SELECT sequence FROM ` + t.keys + ` WHERE consumer = ? AND ordering_key = ? FOR UPDATE`
	// The ids come sorted, so two batches that overlap wait for each
	// other's rows in one order.
	in.claimBatchSQL = `INSERT INTO ` + t.Quoted + ` (consumer, message_id, claim)
SELECT ?, j.id, ? FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARCHAR(255) PATH '$')) AS j
ON DUPLICATE KEY UPDATE consumer = consumer`
	in.claimedSQL = `SELECT message_id FROM ` + t.Quoted + ` WHERE consumer = ? AND claim = ?
AND message_id IN (SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARCHAR(255) PATH '$')) AS j)`
	in.seenSQL = `SELECT message_id FROM ` + t.Quoted + ` WHERE consumer = ?
AND message_id IN (SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARCHAR(255) PATH '$')) AS j)`
	// MySQL has no SKIP LOCKED in a DELETE: concurrent cleaners wait for
	// one another's batch, each small (CleanupBatch rows).
	in.cleanupSQL = `DELETE FROM ` + t.Quoted + ` WHERE consumer = ? AND processed_at < ? ORDER BY processed_at LIMIT ?`
	in.cleanupKeysSQL = `DELETE FROM ` + t.keys + ` WHERE consumer = ? AND processed_at < ? LIMIT ?`
}

// isDuplicateKey reports MySQL's error 1062 (ER_DUP_ENTRY).
func isDuplicateKey(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// markKeyMySQL records m's sequence for its key and reports whether m is
// not older than the key's last processed message.
func (in *Inbox) markKeyMySQL(ctx context.Context, tx envelope.Querier, m Message) (bool, error) {
	if _, err := tx.ExecContext(ctx, in.markKeySQL, in.cfg.Consumer, m.OrderingKey, m.Sequence, m.Sequence, m.Sequence); err != nil {
		return false, err
	}
	rows, err := tx.QueryContext(ctx, in.keySeqSQL, in.cfg.Consumer, m.OrderingKey)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var kept int64
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return false, err
		}
		return false, fmt.Errorf("the key's row is missing after its upsert")
	}
	if err := rows.Scan(&kept); err != nil {
		return false, err
	}
	return kept <= m.Sequence, rows.Close()
}

// claimBatchMySQL is ClaimBatch's statements on MySQL; ids is the sorted
// JSON array.
func (in *Inbox) claimBatchMySQL(ctx context.Context, tx envelope.Querier, ids string) (*sql.Rows, error) {
	token := rand.Int64()
	if _, err := tx.ExecContext(ctx, in.claimBatchSQL, in.cfg.Consumer, token, ids); err != nil {
		return nil, err
	}
	return tx.QueryContext(ctx, in.claimedSQL, in.cfg.Consumer, token, ids)
}
