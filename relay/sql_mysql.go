package relay

import (
	"errors"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/heraldgo/herald/internal/outbox"
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

// The lease on MySQL (Relay.leaseMySQL) is a READ COMMITTED transaction
// of three statements — five when it takes runs of keys (no read-back:
// the locking reads return the rows):
//
//  1. leaseCandidatesMySQL, a plain read (no locks): the events that may
//     be leased, from bounded candidate sources as on PostgreSQL
//     (leaseBatchPostgres), checked against every predicate, in sequence
//     order, at most twice BatchSize of them;
//  2. leaseLockMySQL: those events read again by primary key, locked FOR
//     UPDATE SKIP LOCKED, every predicate checked again on the row's
//     newest committed version, the first BatchSize in sequence order;
//  3. with runs, leaseRunsPlanMySQL: behind each keyed head locked in 2,
//     the key's next unpublished events (a plain read, one index range per
//     key), then leaseLockMySQL without the head test: the followers that
//     are still leasable, locked; the relay keeps of each key the
//     consecutive prefix of its run;
//  4. leaseUpdateMySQL: what was kept, leased by primary key.
//
// Why two statements where PostgreSQL has one: a locking read with ORDER
// BY … LIMIT locks only the rows it returns only when it reads them in
// that order, which InnoDB does for a primary-key range (statement 2:
// "sequence IN (literal list)", EXPLAIN: range on PRIMARY, no filesort),
// not for candidates from a derived table, which are sorted after they
// are read — and locked as they are read: every qualifying candidate, not
// only the batch, and a second relay would find them all locked (what
// TestSecondRelayLeasesPastALeaseInFlight guards against on PostgreSQL).
//
// Why per-key order holds, with several relays: as on PostgreSQL
// (leaseBatchPostgres). In InnoDB at READ COMMITTED a locking read reads
// the newest committed version of a row and locks it, so statement 2
// checks the predicates on the row as it is (a lease committed by another
// relay since statement 1 shows its lease_until; one not committed yet is
// locked and skipped); the head test's subquery is a plain read of the
// statement's own snapshot (a locking clause locks only its own query
// block's rows: measured on MariaDB, a subquery reading a row another
// transaction holds neither waits nor skips it), which can only show an
// earlier event still unpublished, never one published that is not. A
// follower is leased only behind its head, locked by the same transaction,
// and only while it and every event before it in the run are leasable and
// not locked by anyone else (missing from 3's locking read: the run is cut
// there), so no relay can lease it meanwhile (for any snapshot it is no
// head while the head is unpublished).
//
// Indexes (MySQL version 3; no partial indexes in MySQL): {base}_pending_idx
// (published_at, dead_lettered_at) holds the pending events in sequence
// order at its start (the primary key is appended); {base}_pending_key_idx
// (published_at, ordering_key, sequence) holds the unpublished events —
// dead ones too — by key and sequence at its start, the unordered ones
// first: the head test, the key walk, the runs and the unordered source
// each read one range of it, and the published history, which follows in
// both indexes, is never read. FORCE INDEX names them, so a table whose
// statistics are stale or missing cannot steer a lease into a scan.
var (
	// mysqlLeasable: the row may be leased now (not published, not dead,
	// due, not under a live lease).
	mysqlLeasable = `e.published_at IS NULL AND e.dead_lettered_at IS NULL
  AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= ` + mysqlNow + `)
  AND (e.lease_until IS NULL OR e.lease_until < ` + mysqlNow + `)`

	// mysqlHead: an event with an ordering key is the first unpublished
	// event of its key (one descent of {base}_pending_key_idx). Written as
	// "= (… LIMIT 1)", not NOT EXISTS, which MariaDB may turn into an
	// anti-join over every pending event of the key.
	mysqlHead = `
  AND (e.ordering_key IS NULL OR e.sequence = (
        SELECT p.sequence FROM {table} p FORCE INDEX ({keyidx})
        WHERE p.published_at IS NULL AND p.ordering_key = e.ordering_key
        ORDER BY p.sequence LIMIT 1))`

	// mysqlAvailable narrows the candidate sources as availablePostgres.
	mysqlAvailable = `AND (c.lease_until IS NULL OR c.lease_until < ` + mysqlNow + `)
       AND (c.next_attempt_at IS NULL OR c.next_attempt_at <= ` + mysqlNow + `)`

	// leaseCandidatesMySQL is statement 1. $1 now, $2 twice BatchSize, $3
	// the keys to walk, $4 the key the walk starts after; the filter
	// follows from $7 ($5 and $6 are leaseLockMySQL's). The sources:
	//
	//   - the first $2 available pending events in sequence order
	//     ({base}_pending_idx);
	//   - with {unorderedsource}, the first $2 available unordered ones
	//     ({base}_pending_key_idx's ordering_key IS NULL range), so keyed
	//     events never hide them: in every lease but one that follows a
	//     full lease of unordered events only (Relay.noUnordered), which
	//     found the first pending events leasable — nothing was hidden,
	//     and a drain of unordered events reads half the candidates
	//     (where keyed events come to hide unordered ones, the lease that
	//     meets them holds keyed events or comes back short, and the next
	//     takes this source again);
	//   - with {walk}, the heads of up to $3 keys: the keys with
	//     unpublished events, read by a loose index scan of
	//     {base}_pending_key_idx (SELECT DISTINCT … LIMIT: one descent per
	//     key, and it stops at $3 keys — with an ORDER BY, MariaDB read
	//     every key before sorting), each key's head one more descent.
	//
	// The walk starts after the key $4 where the last walk that visited
	// $3 keys stopped (walkFromMySQL), so with more than $3 keys whose
	// heads are held back (failed, leased) the walk still reaches every
	// key in turn; a walk that visits fewer starts from the first key
	// again. The last row, (NULL, the walk's last key), is there only when
	// the walk visited $3 keys.
	leaseCandidatesMySQL = `(SELECT x.sequence, NULL AS walked FROM (
  SELECT e.sequence FROM (
    (SELECT c.sequence FROM {table} c FORCE INDEX ({pendingidx})
     WHERE c.published_at IS NULL AND c.dead_lettered_at IS NULL
       ` + mysqlAvailable + `{cfilter}
     ORDER BY c.sequence LIMIT $2){unorderedsource}{walksource}) AS c
  JOIN {table} e FORCE INDEX (PRIMARY) ON e.sequence = c.sequence
  WHERE ` + mysqlLeasable + mysqlHead + `
  {filter}
  ORDER BY e.sequence LIMIT $2) AS x){walkend}`

	unorderedSourceMySQL = `
    UNION
    (SELECT c.sequence FROM {table} c FORCE INDEX ({keyidx})
     WHERE c.published_at IS NULL AND c.ordering_key IS NULL
       ` + mysqlAvailable + `{cfilter}
     ORDER BY c.sequence LIMIT $2)`

	walkKeysMySQL = `SELECT DISTINCT w.published_at, w.ordering_key FROM {table} w FORCE INDEX ({keyidx})
           WHERE w.published_at IS NULL AND {walkfrom} LIMIT $3`
	walkSourceMySQL = `
    UNION
    (SELECT (SELECT h.sequence FROM {table} h FORCE INDEX ({keyidx})
             WHERE h.published_at IS NULL AND h.ordering_key = wk.ordering_key
             ORDER BY h.sequence LIMIT 1)
     FROM (` + walkKeysMySQL + `) AS wk)`
	walkEndMySQL = `
UNION ALL
(SELECT NULL, MAX(wk.ordering_key) FROM (` + walkKeysMySQL + `) AS wk HAVING COUNT(*) = $3)`

	// leaseLockMySQL is statements 2 and 3's locking read: {seqs} the
	// candidates' sequences (literal integers), every predicate again,
	// ({head}) the head test, ({limit}) BatchSize ($6). Its columns are
	// leaseColumns with lease_until the lease's end (now + $5 µs) and,
	// last, that end as text for leaseUpdateMySQL.
	leaseLockMySQL = `SELECT {lockcolumns} FROM {table} e FORCE INDEX (PRIMARY)
WHERE e.sequence IN ({seqs}) AND ` + mysqlLeasable + `{head}
  {filter}
ORDER BY e.sequence{limit}
FOR UPDATE SKIP LOCKED`

	mysqlLeaseEnd = `CAST(DATE_ADD(` + mysqlNow + `, INTERVAL $5 MICROSECOND) AS DATETIME(6))`

	// leaseRunsPlanMySQL is one key's part of statement 3's plan: the
	// key's first ? unpublished events, in sequence order (its head
	// first). The parts are joined by UNION ALL, one per keyed head.
	leaseRunsPlanMySQL = `(SELECT p.ordering_key, p.sequence FROM {table} p FORCE INDEX ({keyidx})
 WHERE p.published_at IS NULL AND p.ordering_key = ? ORDER BY p.sequence LIMIT ?)`

	// leaseUpdateMySQL is statement 4: ? the lease's end (text), ? the
	// relay's name, {seqs} the events kept, all locked by this transaction.
	leaseUpdateMySQL = `UPDATE {table} SET lease_until = ?, leased_by = ?
WHERE published_at IS NULL AND sequence IN ({seqs})`

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
	candidates                    [2][3]string // statement 1: [with the unordered source][without the key walk, walking from the first key, from $4]
	lockHeads, lockFollowers      string       // statements 2 and 3's locking read ({seqs} to fill)
	runsPlan, update              string
	markedFailed, renewed, revive string
}

// buildMySQL is build for MySQL.
func (b sqlBuilder) buildMySQL(f filter) (statements, mysqlStatements, []any) {
	var st statements
	var my mysqlStatements
	f4, _, _ := b.filterCondition(f, 4)
	f2, _, _ := b.filterCondition(f, 2)
	paused := " AND NOT EXISTS (SELECT 1 FROM " + outbox.PausedTable(b.t) + " z WHERE z.topic = e.topic)"
	f7, fargs, _ := b.filterCondition(f, 7) // the lease's: after its six arguments
	idx := strings.NewReplacer("{pendingidx}", b.d.QuoteIdent(b.t.Base+"_pending_idx"), "{keyidx}", b.d.QuoteIdent(b.t.Base+"_pending_key_idx"))
	walk := func(from string) *strings.Replacer {
		w := strings.NewReplacer("{walkfrom}", from)
		return strings.NewReplacer("{walksource}", w.Replace(walkSourceMySQL), "{walkend}", w.Replace(walkEndMySQL))
	}
	for u, src := range []string{"", unorderedSourceMySQL} {
		// The candidate sources take the relay's filter and skip paused
		// topics (see build).
		cands := strings.NewReplacer("{unorderedsource}", src).Replace(leaseCandidatesMySQL)
		cands = strings.ReplaceAll(cands, "{cfilter}", b.candidateFilter(f7, "c"))
		for w, form := range []*strings.Replacer{
			strings.NewReplacer("{walksource}", "", "{walkend}", ""),
			walk("w.ordering_key IS NOT NULL"),
			walk("w.ordering_key > $4"),
		} {
			my.candidates[u][w] = b.render(idx.Replace(form.Replace(cands)), f7+paused, "")
		}
	}
	// The lease's columns with lease_until the lease's end; the end as
	// text last (after Config.ExtraColumns).
	lockCols := strings.Replace(b.columns, "lease_until", mysqlLeaseEnd, 1) +
		", DATE_FORMAT(" + mysqlLeaseEnd + ", '%Y-%m-%d %H:%i:%s.%f')"
	lock := strings.NewReplacer("{lockcolumns}", lockCols).Replace(leaseLockMySQL)
	my.lockHeads = b.render(idx.Replace(strings.NewReplacer("{head}", mysqlHead, "{limit}", " LIMIT $6").Replace(lock)), f7+paused, "")
	my.lockFollowers = b.render(strings.NewReplacer("{head}", "", "{limit}", "").Replace(lock), f7+paused, "")
	my.runsPlan = b.render(idx.Replace(leaseRunsPlanMySQL), "", "")
	my.update = b.render(leaseUpdateMySQL, "", "")
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
