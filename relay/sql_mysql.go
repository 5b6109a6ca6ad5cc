package relay

import (
	"errors"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// The relay's SQL on MySQL and MariaDB (one text for both: MySQL 8.0+,
// MariaDB 10.6+). The templates number their placeholders $n as the
// others do; mysqlArgs rewrites them to MySQL's positional ? and repeats
// or drops the arguments to match, just before a statement runs.
//
// Times are the database's clock, as on PostgreSQL: UTC_TIMESTAMP(6),
// written COALESCE($n, UTC_TIMESTAMP(6)) so a test can bind a time
// (production binds NULL), durations bound as microseconds. MySQL has no
// RETURNING (MariaDB has it for INSERT and DELETE only) and no UPDATE …
// FROM: statements over a batch join the table to JSON_TABLE of the
// batch's JSON array (a multi-table UPDATE, planned as primary-key
// lookups; a single-table UPDATE … WHERE sequence IN (subquery) may scan
// the table on MariaDB), and what RETURNING gives elsewhere is read back
// in the same transaction (lease_mysql.go).

// mysqlSeqs is the rows of a JSON array of sequences ($n), as j.seq.
func mysqlSeqs(n int) string {
	return `JSON_TABLE($` + strconv.Itoa(n) + `, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS j`
}

const mysqlNow = `COALESCE($1, UTC_TIMESTAMP(6))`

var (
	// The lease's candidates, locked: pending, due, not leased, heads of
	// their keys, of the relay's topics, not paused. Rows another relay is
	// leasing are skipped, not waited for. A key's head is the event with
	// no earlier unpublished event of its key ({base}_pending_key_idx); the
	// subquery is a plain read (a locking clause locks only the outer
	// query's rows), of what was committed when it ran (READ COMMITTED).
	leaseCandidatesMySQL = `SELECT e.sequence FROM {table} e
WHERE e.published_at IS NULL AND e.dead_lettered_at IS NULL
  AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= ` + mysqlNow + `)
  AND (e.lease_until IS NULL OR e.lease_until < ` + mysqlNow + `)
  AND (e.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM {table} p
        WHERE p.ordering_key = e.ordering_key AND p.published_at IS NULL AND p.sequence < e.sequence))
  {filter}
ORDER BY e.sequence
LIMIT $2
FOR UPDATE SKIP LOCKED`

	markPublishedMySQL = `UPDATE {table} t JOIN ` + mysqlSeqs(2) + ` ON t.sequence = j.seq
SET t.published_at = ` + mysqlNow + `
WHERE t.leased_by = $3 AND t.published_at IS NULL`

	deletePublishedMySQL = `DELETE t FROM {table} t JOIN ` + mysqlSeqs(1) + ` ON t.sequence = j.seq
WHERE t.leased_by = $2 AND t.published_at IS NULL`

	// markFailedMySQL: $1 the failures as markFailedPostgres has them, $2
	// the relay's name, $3 now.
	markFailedMySQL = `UPDATE {table} t JOIN JSON_TABLE($1, '$[*]' COLUMNS (
        seq BIGINT PATH '$.sequence', attempts INTEGER PATH '$.attempts', error LONGTEXT PATH '$.error',
        backoff_us BIGINT PATH '$.backoff_us', dead INTEGER PATH '$.dead')) AS v ON t.sequence = v.seq
SET t.attempts = v.attempts, t.last_error = v.error,
    t.next_attempt_at = CASE WHEN v.dead <> 0 THEN NULL ELSE DATE_ADD(COALESCE($3, UTC_TIMESTAMP(6)), INTERVAL v.backoff_us MICROSECOND) END,
    t.dead_lettered_at = CASE WHEN v.dead <> 0 THEN COALESCE($3, UTC_TIMESTAMP(6)) END,
    t.lease_until = NULL
WHERE t.leased_by = $2 AND t.published_at IS NULL`

	// markedFailedMySQL reads back, in markFailedMySQL's transaction, the
	// failures it recorded: the rows it updated are still this relay's.
	markedFailedMySQL = `SELECT t.sequence, t.next_attempt_at FROM {table} t JOIN ` + mysqlSeqs(1) + ` ON t.sequence = j.seq
WHERE t.leased_by = $2 AND t.published_at IS NULL AND t.lease_until IS NULL`

	// renewLeaseMySQL: $1 Lease in microseconds, $2 the batch, $3 the
	// relay's name, $4 now.
	renewLeaseMySQL = `UPDATE {table} t JOIN ` + mysqlSeqs(2) + ` ON t.sequence = j.seq
SET t.lease_until = DATE_ADD(COALESCE($4, UTC_TIMESTAMP(6)), INTERVAL $1 MICROSECOND)
WHERE t.leased_by = $3 AND t.published_at IS NULL`

	renewedMySQL = `SELECT t.sequence FROM {table} t JOIN ` + mysqlSeqs(2) + ` ON t.sequence = j.seq
WHERE t.leased_by = $3 AND t.published_at IS NULL AND t.lease_until IS NOT NULL`

	releaseMySQL = `UPDATE {table} t JOIN ` + mysqlSeqs(1) + ` ON t.sequence = j.seq
SET t.lease_until = NULL
WHERE t.leased_by = $2 AND t.published_at IS NULL`

	// The cleanups delete one batch through a derived table (MySQL allows
	// no LIMIT in an IN subquery, nor a subquery of the table it deletes
	// from unless it is materialized, which the LIMIT makes it).
	cleanupPublishedMySQL = `DELETE t FROM {table} t JOIN (
    SELECT e.sequence FROM {table} e
    WHERE e.published_at IS NOT NULL
      AND e.published_at < DATE_SUB(` + mysqlNow + `, INTERVAL $2 MICROSECOND) {filter}
    ORDER BY e.published_at LIMIT $3) AS x ON t.sequence = x.sequence`

	cleanupDeadLetteredMySQL = `DELETE t FROM {table} t JOIN (
    SELECT e.sequence FROM {table} e
    WHERE e.dead_lettered_at IS NOT NULL
      AND e.dead_lettered_at < DATE_SUB(` + mysqlNow + `, INTERVAL $2 MICROSECOND) {filter}
    ORDER BY e.dead_lettered_at LIMIT $3) AS x ON t.sequence = x.sequence`

	// retryDeadLetteredMySQL selects and locks one batch of dead events
	// ($1 the batch size, the filter from $2, {where} the caller's);
	// reviveMySQL revives them by sequence in the same transaction.
	retryDeadLetteredMySQL = `SELECT e.sequence, e.topic FROM {table} e
WHERE e.dead_lettered_at IS NOT NULL {filter} {where}
ORDER BY e.sequence LIMIT $1 FOR UPDATE SKIP LOCKED`

	reviveMySQL = `UPDATE {table} t JOIN ` + mysqlSeqs(1) + ` ON t.sequence = j.seq
SET t.dead_lettered_at = NULL, t.attempts = 0, t.next_attempt_at = NULL, t.lease_until = NULL, t.leased_by = NULL
WHERE t.dead_lettered_at IS NOT NULL`
)

// mysqlStatements are the MySQL statements that have no place in
// statements (the lease's steps and the read-backs).
type mysqlStatements struct {
	candidates, markedFailed, renewed, revive string
}

// buildMySQL is build for MySQL.
func (b sqlBuilder) buildMySQL(f filter) (statements, mysqlStatements, []any) {
	var st statements
	var my mysqlStatements
	f3, fargs, _ := b.filterCondition(f, 3)
	f4, _, _ := b.filterCondition(f, 4)
	f2, _, _ := b.filterCondition(f, 2)
	paused := " AND NOT EXISTS (SELECT 1 FROM " + b.t.PausedTable() + " z WHERE z.topic = e.topic)"
	my.candidates = b.render(leaseCandidatesMySQL, f3+paused, "")
	st.markPublished = b.render(markPublishedMySQL, "", "")
	st.deletePublished = b.render(deletePublishedMySQL, "", "")
	st.markFailed = b.render(markFailedMySQL, "", "")
	my.markedFailed = b.render(markedFailedMySQL, "", "")
	st.renew = b.render(renewLeaseMySQL, "", "")
	my.renewed = b.render(renewedMySQL, "", "")
	st.release = b.render(releaseMySQL, "", "")
	st.backlog = b.render(backlogSQL, f2, "")
	st.backlogByTopic = b.render(b.topicsOnly(backlogByTopicSQL, f), f2, "")
	st.cleanupPublished = b.render(cleanupPublishedMySQL, f4, "")
	st.cleanupDeadLettered = b.render(cleanupDeadLetteredMySQL, f4, "")
	st.retry = strings.NewReplacer("{filter}", f2).Replace(retryDeadLetteredMySQL)
	my.revive = b.render(reviveMySQL, "", "")
	st.checkTable = b.render(checkTableSQL, "", "")
	return st, my, fargs
}

// mysqlArgs rewrites q's $n placeholders to ? and returns the arguments in
// the order the ?s take them: an argument used twice is bound twice, one
// not used is dropped.
func mysqlArgs(q string, args []any) (string, []any) {
	idx := placeholderRE.FindAllStringSubmatchIndex(q, -1)
	if len(idx) == 0 {
		return q, args
	}
	var b strings.Builder
	b.Grow(len(q))
	out := make([]any, 0, len(idx))
	last := 0
	for _, m := range idx {
		n, _ := strconv.Atoi(q[m[2]:m[3]])
		b.WriteString(q[last:m[0]])
		b.WriteByte('?')
		last = m[1]
		if n >= 1 && n <= len(args) {
			out = append(out, args[n-1])
		} else {
			out = append(out, nil)
		}
	}
	b.WriteString(q[last:])
	return b.String(), out
}

// mysqlTransient reports whether err is a deadlock (1213) or a lock wait
// timeout (1205): the statement (or its transaction) was rolled back and
// may simply be run again. Never a failure of an event.
func mysqlTransient(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}
