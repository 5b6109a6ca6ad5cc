package envelope

import (
	"context"
	"database/sql"
	"fmt"
	"hash/crc32"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/outboxsql"
)

// Per-key commit order on MySQL.
//
// The reason is PostgreSQL's (see keyLockBuckets): a sequence value is
// drawn when the row is inserted, not when it commits, so two writers of
// one key must be serialized from the first's INSERT until its commit.
// MySQL has no transaction-scoped advisory lock: GET_LOCK's locks belong
// to the session, outlive the transaction, and on a pooled connection
// outlive the caller unless released on every path. Row locks are
// transaction-scoped, so the writer locks rows: the outbox table's
// companion {base}_keylock holds mysqlKeyLockBuckets rows, one per bucket,
// and before its first INSERT a Write locks the bucket row of each of its
// ordering keys, CRC32(key) MOD mysqlKeyLockBuckets (CRC32 of the key's
// UTF-8 bytes, as MySQL's own CRC32() computes it for a utf8mb4 string):
//
//   - FOR UPDATE (exclusive) for every event but a captured row change's
//     whose key is its row's own (internal/capture's Spec.RowKeyed),
//     which takes it LOCK IN SHARE MODE: the row's own lock serializes those writers already;
//   - in ascending bucket order, one SELECT per run of buckets of one mode,
//     so two writers never deadlock on each other's buckets;
//   - released by the transaction's commit or rollback, whatever happens.
//
// The price is PostgreSQL's: false sharing (two exclusive writers of
// different keys in one bucket wait for each other), and the upgrade
// hazard of a transaction that holds a bucket shared and then asks for it
// exclusive — InnoDB detects the deadlock at once and rolls one
// transaction back with error 1213; retrying it succeeds.
const mysqlKeyLockBuckets = 1024

func mysqlKeyBucket(key string) int {
	return int(crc32.ChecksumIEEE([]byte(key)) % mysqlKeyLockBuckets)
}

// lockMySQL locks the bucket rows of the keys (see mysqlKeyLockBuckets).
func (w *Writer) lockMySQL(ctx context.Context, q Querier, l keyLocks) error {
	modes := map[int]bool{}
	for k, excl := range l {
		b := mysqlKeyBucket(k)
		modes[b] = modes[b] || excl
	}
	buckets := make([]int, 0, len(modes))
	for b := range modes {
		buckets = append(buckets, b)
	}
	sort.Ints(buckets)
	for i := 0; i < len(buckets); {
		j := i + 1
		for j < len(buckets) && modes[buckets[j]] == modes[buckets[i]] {
			j++
		}
		var b strings.Builder
		b.WriteString("SELECT bucket FROM ")
		b.WriteString(w.t.keyLockTable())
		b.WriteString(" WHERE bucket IN (")
		args := make([]any, j-i)
		for k := i; k < j; k++ {
			if k > i {
				b.WriteByte(',')
			}
			b.WriteByte('?')
			args[k-i] = buckets[k]
		}
		b.WriteString(") ORDER BY bucket")
		if modes[buckets[i]] {
			b.WriteString(" FOR UPDATE")
		} else {
			b.WriteString(" LOCK IN SHARE MODE")
		}
		n, err := countRows(ctx, q, b.String(), args...)
		if err != nil {
			return fmt.Errorf("herald/envelope: lock the ordering keys' rows of %s: %w", w.t.Name, err)
		}
		if n != j-i {
			return configurationf("Table", "%s has %d of the %d key-lock rows this write needs: bring the outbox table up to date with envelope.Migrate", w.t.keyLockTable(), n, j-i)
		}
		i = j
	}
	return nil
}

// insertMySQL writes one chunk on MySQL: the key locks first (the call's
// first INSERT), then one multi-row INSERT … VALUES; an idempotency key
// already stored is skipped by ON DUPLICATE KEY UPDATE idempotency_key =
// idempotency_key, a no-op that turns only a duplicate key into "no row"
// (INSERT IGNORE would also turn a value too long, a NULL in a NOT NULL
// column or a bad JSON into a warning and a stored row). MySQL has no
// RETURNING (MariaDB has, MySQL 8 not), so the sequences are read back in
// the same transaction: the statement's first AUTO_INCREMENT value is
// LAST_INSERT_ID() (the Result's LastInsertId), every row it inserted has a
// sequence at or above it (in message order, whatever
// innodb_autoinc_lock_mode), and the rows are told from other writers' by
// their ids (one JSON parameter) — one primary-key range read.
func (w *Writer) insertMySQL(ctx context.Context, q Querier, rows []row, batch []int, r run, now time.Time, seq map[uuid.UUID]int64, locks keyLocks) error {
	if len(locks) > 0 && !w.noKeyLocks {
		if err := w.lockMySQL(ctx, q, locks); err != nil {
			return err
		}
	}
	per := r.ownColumns() + len(r.extras)
	var b strings.Builder
	b.Grow(96 + len(batch)*per*2)
	b.WriteString("INSERT INTO ")
	b.WriteString(w.t.Quoted)
	b.WriteString(" (id, topic, payload, headers, ordering_key, idempotency_key, created_at, next_attempt_at")
	b.WriteString(r.tenantColumn())
	for _, c := range r.extras {
		b.WriteString(", ")
		b.WriteString(w.d.QuoteIdent(c))
	}
	b.WriteString(") VALUES ")
	args := make([]any, 0, len(batch)*per)
	created := w.d.timeArg(now)
	for bi, i := range batch {
		if bi > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for c := range per {
			if c > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
		}
		b.WriteByte(')')
		row := &rows[i]
		var next any
		if !row.at.IsZero() {
			next = w.d.timeArg(row.at)
		}
		args = append(args, row.id.String(), row.topic, row.payload, row.headers, nullString(row.okey), nullString(row.ikey), created, next)
		if r.tenant {
			args = append(args, row.tenant)
		}
		for _, c := range r.extras {
			args = append(args, row.extra[c])
		}
	}
	if r.idem {
		b.WriteString(" ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key")
	}
	res, err := q.ExecContext(ctx, b.String(), args...)
	if err != nil {
		return fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err)
	}
	first, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("herald/envelope: insert events into %s: %w", w.t.Name, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return nil // every key was stored already
	}
	// Read back: sequence >= first, one of this chunk's ids — the ids as
	// ONE JSON parameter, whatever the chunk's size.
	var ids strings.Builder
	ids.Grow(len(batch)*39 + 2)
	ids.WriteByte('[')
	for bi, i := range batch {
		if bi > 0 {
			ids.WriteByte(',')
		}
		ids.WriteByte('"')
		ids.WriteString(rows[i].id.String()) // hex and dashes: nothing to escape
		ids.WriteByte('"')
	}
	ids.WriteByte(']')
	return w.returning(ctx, q, mysqlReadBack(w.t.Quoted), []any{first, ids.String()}, seq)
}

// mysqlReadBack reads back the sequences of a chunk's rows: sequence >=
// the statement's first AUTO_INCREMENT value, id one of the chunk's (one
// JSON parameter, its column of the id column's type: the optimizer then
// looks each row of the sequence range up in the materialized ids).
func mysqlReadBack(table string) string {
	return "SELECT sequence, id FROM " + table +
		" WHERE sequence >= ? AND id IN (SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id " + outboxsql.MySQLIDType + " PATH '$')) AS j)"
}

// countRows runs a query and counts the rows it returns (the key-lock
// rows a SELECT … FOR UPDATE locked).
func countRows(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args ...any) (int, error) {
	rs, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rs.Close()
	n := 0
	for rs.Next() {
		n++
	}
	return n, rs.Err()
}
