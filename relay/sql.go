package relay

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// The relay's SQL. Placeholders are written $n and rendered as ?n on
// SQLite (numbered, so an argument may be used twice); {table} is the
// quoted table, {columns} the columns a lease returns (leaseColumns plus
// Config.ExtraColumns), {filter} the relay's topic filter over alias e.
// Every value is bound; identifiers come from envelope.ParseTable and
// names.IsIdentifier.
//
// Times are the database's clock, never the relay host's: every lease,
// renewal, due check, mark and cleanup cutoff is computed from one "now"
// of the database, so relays on hosts whose clocks disagree still agree on
// who holds a lease and what is due. On PostgreSQL that is now() (the
// statement's start), written coalesce($n::timestamptz, now()) so a test
// can bind a time instead (production binds NULL), and durations are bound
// as microseconds. SQLite runs inside the relay's process, on the machine
// that holds the database file: its clock is that machine's clock, read by
// the relay right before the statement and bound as fixed-width UTC text
// (outbox.TimeArg) that compares correctly as text.

// leaseBatchPostgres leases the next batch in one statement.
//
// The candidates are events not published, not dead, due, and not under a
// live lease, in sequence order. The lease_until predicate matters: the
// UPDATE commits at once and frees its row locks, so SKIP LOCKED alone
// would let a second relay lease rows the first is still delivering.
//
// Per-key order. An event with an ordering key qualifies only when no
// earlier event of its key is unpublished — pending, leased, failed and
// waiting, or dead (dead events keep published_at NULL). That one predicate
// also gives "at most one event per key per batch": of a key's unpublished
// events only the first can qualify. Why this holds with SKIP LOCKED and
// several relays under READ COMMITTED (relays A and B, events e1 < e2 of
// key k):
//
//   - A has leased e1 (committed or not) and is delivering it. B scans:
//     e1 is skipped (locked) or filtered out (lease_until in the future),
//     and e2 is filtered out because B's snapshot sees e1 unpublished. A
//     lease never publishes, so no snapshot can see e1 published before A
//     marks it.
//   - A marks e1 published and commits after B's statement took its
//     snapshot. B still sees e1 unpublished and skips e2: conservative; e2
//     goes in a later poll.
//   - A leases e2 (after publishing e1) while B's statement runs. If A's
//     lease is uncommitted, B skips e2 (locked). If it committed after B's
//     snapshot, B's FOR UPDATE finds the row updated, locks the newest
//     version and re-checks the WHERE clause on it (EvalPlanQual): its
//     lease_until is live, so e2 is dropped.
//   - e1 failed (next_attempt_at ahead) or is dead: it is unpublished, so
//     e2 waits; only key k waits — other keys and unordered events pass.
//   - e1 is not in B's snapshot but e2 is: impossible, because writers of
//     one key are serialized (the row's lock for captured changes, an
//     advisory lock for enqueued ones), so a key's sequence order is its
//     commit order and e2 visible implies e1 visible.
//   - Nothing ever sets published_at back to NULL, so a stale snapshot can
//     only wrongly hold e2 back, never wrongly release it.
//
// Where the candidates come from. Scanning pending events in sequence
// order until BatchSize of them qualify costs O(backlog) per poll when the
// backlog is concentrated on few keys (only each key's head qualifies, the
// rest is skipped one probe at a time: 4.9 s per poll for 100,000 events on
// 16 keys, measured in psql on PostgreSQL 15). So the candidates are a
// bounded set, and the predicates above are checked on them alone:
//
//   - the first 2 × BatchSize pending events in sequence order
//     ({base}_pending_idx), of which only the unordered ones and the first
//     of each key go on (pendingSourcePostgres);
//   - the first 2 × BatchSize pending unordered events
//     ({base}_pending_unordered_idx, schema version 3), so a backlog of
//     keyed events never hides an unordered one;
//   - the heads of up to $5 keys, walked through {base}_pending_key_idx one
//     key at a time (a loose index scan: one descent per key, however many
//     events each key holds). The walk is a second form of the statement
//     (walkCTEPostgres), run only after a lease that came back short of
//     BatchSize holding keyed events or none, and after every eighth short
//     one of unordered events: a full batch, or a table of unordered
//     events, pays nothing for it — not even in the plan's estimated cost,
//     which on a large table would otherwise cross jit_above_cost and
//     make PostgreSQL JIT-compile every lease (tens of milliseconds).
//
// The candidates only narrow where the predicates look; every predicate is
// checked on the row as before, so the per-key argument above is unchanged.
// The head test is "no pending event of e's key lies before e": a backward
// scan of {base}_pending_key_idx from (key, sequence), ended by the key's
// lower bound. For a head it finds nothing and reads no row (an entry
// found would need its row for visibility: without VACUUM no page is
// all-visible); the earlier form, "e is the first pending entry of its
// key", read the head's row every time, and that read was a third of a
// keyed lease. It is written with a row comparison and no equality on
// purpose: with "p.ordering_key = e.ordering_key AND p.sequence <
// e.sequence" the planner, on a table of few keys, answered the test with
// a sequential scan that stops at the first match (2,000 buffers a lease
// at 20,000 events on 4 keys, TestLeaseCostIndependentOfBacklog), or by
// the primary key; the order (ordering_key, sequence) DESC only
// {base}_pending_key_idx gives. The scan must run backward: forward, a
// row comparison ends the scan only on its first column, and the test
// read every entry of the key.
//
// A walk visits up to $5 keys in key order, from the key after the one
// the last full walk ended on (walkPostgres's last argument, see
// Relay.walkedTo), and from the first key after a walk that reached the
// last: every key is visited within keys ÷ BatchSize walks, however many
// keys before it hold their heads back. (A walk from the first key every
// time never reached a key behind BatchSize keys whose heads wait for a
// retry, TestWalkReachesEveryKey.)
//
// "sequence = ANY(ARRAY(subquery))" is "sequence IN (subquery)" written so
// that the candidates are an InitPlan run once, found again through
// {base}_pending_idx in sequence order (no sort before the locks), and
// likewise "ctid = ANY(ARRAY(…))" for the heads: with IN, the planner may
// hash-join them against a sequential scan of the whole table (published
// history included), as EXPLAIN shows on a table of 100k rows. The UPDATE
// finds the heads by their physical address (a TID scan), not by a descent
// of the primary key each. The heads' ctids are those of the versions FOR
// UPDATE locked (the newest, when another transaction changed a row
// meanwhile), so the UPDATE finds exactly the rows locked; a ctid names a
// row within one table only, so the relay refuses a partitioned table or
// one with inheritance children (Relay.checkPlainTable). The candidates
// are not found by ctid: under the locks that needs a sort, and each row
// another relay leased since the statement's snapshot is then rechecked
// (EvalPlanQual) through the sort at about 130 µs a row against a few for
// an index scan. With two relays a lease took 280 ms, holding the locks it
// took on the other relay's rows, and the other relay's mark waited for
// it (auto_explain in a drain of 100,000 events by two relays).
const leaseBatchPostgres = `{walkcte}UPDATE {table} SET lease_until = coalesce($3::timestamptz, now()) + $1::bigint * interval '1 microsecond', leased_by = $2
WHERE {hby} = ANY(ARRAY(
    ` + leaseHeadsPostgres + `))
RETURNING {columns}{walkret}`

// leaseHeadsPostgres selects and locks the heads a lease takes: the
// candidates of leaseBatchPostgres that pass every predicate. {headcols}
// adds the ordering key for leaseRunsPostgres.
const leaseHeadsPostgres = `SELECT e.{hby}{headcols} FROM {table} e
    WHERE e.sequence = ANY(ARRAY(
            {pendingsrc}
            UNION ALL
            (SELECT c.sequence FROM {table} c WHERE c.published_at IS NULL AND c.ordering_key IS NULL
               {available}{floor}{cfilter}
             ORDER BY c.sequence LIMIT {candidates}){walksource}))
      AND e.published_at IS NULL AND e.dead_lettered_at IS NULL
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= coalesce($3::timestamptz, now()))
      AND (e.lease_until IS NULL OR e.lease_until < coalesce($3::timestamptz, now()))
      AND (e.ordering_key IS NULL OR (
            SELECT 1 FROM {table} p
            WHERE p.published_at IS NULL AND p.ordering_key IS NOT NULL
              AND p.ordering_key >= e.ordering_key AND (p.ordering_key, p.sequence) < (e.ordering_key, e.sequence)
            ORDER BY p.ordering_key DESC, p.sequence DESC LIMIT 1) IS NULL)
      {efilter}
    ORDER BY e.sequence
    LIMIT $4
    FOR UPDATE SKIP LOCKED`

// pendingSourcePostgres is leaseHeadsPostgres's first candidate source:
// of the first 2 × BatchSize pending events, the unordered events and the
// first of each key — exactly the candidates that can be heads, since a
// later candidate of a key has an earlier pending one — so the head test
// runs once per key, not once per event of a run: after a run of 1000
// events of one key is published, each head test steps over their 1000
// index entries until VACUUM (or an index scan allowed to mark them dead)
// removes them, and 1000 such tests made a lease take seconds. With many
// keys it halves the head tests of a drain (two events of each of 1,000
// keys among 2,000 candidates). The keys are compared bytewise (COLLATE
// "C"): only equal keys matter, and the sort need not follow the
// database's collation.
const (
	pendingSourcePostgres = `(SELECT d.sequence FROM (
                SELECT c.sequence, c.ordering_key, row_number() OVER (PARTITION BY c.ordering_key COLLATE "C" ORDER BY c.sequence) AS rn
                FROM (SELECT c.sequence, c.ordering_key FROM {table} c WHERE c.published_at IS NULL AND c.dead_lettered_at IS NULL
                        {available}{floor}{cfilter}
                      ORDER BY c.sequence LIMIT {candidates}) c) d
             WHERE d.ordering_key IS NULL OR d.rn = 1)`
)

// leaseRunsPostgres is leaseBatchPostgres that also leases, behind each
// keyed head it takes, the events that follow it in its key: a run of
// consecutive events of one key in one batch, so a backlog of few keys
// drains BatchSize events per poll instead of one per key. It is the form
// a relay runs after a lease that held keyed events (see Relay.lease); a
// table of unordered events never runs it.
//
// Why a run keeps per-key order with several relays. A follower f of head
// h (same key, later sequence) is taken only together with h, in the
// statement that locks h (FOR UPDATE in heads), and only while f is
// itself leasable. No other relay can lease f meanwhile: for any snapshot
// f is no head while h is unpublished, and as a follower it comes only
// with h, which this statement holds. The run is the key's pending events
// in sequence order from h, cut at the first one that is not leasable
// (leased live, not due, dead, or outside the relay's topics): a prefix,
// never a gap, since writers of a key commit in sequence order (see
// leaseBatchPostgres), so no earlier event of the key can appear later.
// Each row returns its position in its run (herald_pos, 1 for heads and
// unordered events); the UPDATE re-checks every predicate on the row's
// newest version, and the relay keeps of each key only positions 1, 2, 3…
// without a gap, releasing the rest, so even a follower changed under the
// statement cannot be delivered ahead of its predecessor. How a run is
// delivered keeps the ordering contract (Relay.deliver): the events of a
// key one after another, each only after the one before it succeeded.
//
// The rows to update are found by their ctid, in one TID scan of the
// runs' ctids (an InitPlan run once; the versions the statement's
// snapshot read, which no one can reuse while it runs; EvalPlanQual
// re-checks the predicates on a newer version, so a row changed meanwhile
// is leased only if it still passes them). A row's position in its run
// is looked up by its sequence in a map built once from runs (a jsonb
// object: a binary search a row) — not by joining runs: with the join,
// the planner went through the primary key, a descent per row with the
// whole ctid array tested against each, or with the join on ctid, a TID
// scan re-run per row, and at 1,000 keys the join cost 2–3 ms of a
// 16 ms statement (BENCHMARKS.md, "ninth pass"). A row missing from the
// map (none can be) gets position 0, which the relay releases as a gap.
// Runs of heads alone (a batch of as many keys) need no map: every row
// is a head, position 1.
// The re-check of the predicates is written as a CASE so that the
// planner cannot answer it with a partial index (the topic index,
// partial on published_at IS NULL). Without all that, on a table without
// statistics (never analyzed: autovacuum off) the planner scanned the
// pending index and re-ran the runs for each of its rows — 1.4 s for a
// lease of 100.
//
// A head's followers are read forward from (key, head) in
// {base}_pending_key_idx, the scan ended by the key's upper bound; written
// with an equality on the key, the planner read them through the primary
// key from the head on, stepping over the other keys' events in between
// (976 rows read for 61 followers in a drain of 16 keys, auto_explain).
//
// The runs share the batch: each keyed head gets at most
// (BatchSize − heads) ÷ keyed heads followers, so a lease still returns at
// most BatchSize rows and costs O(BatchSize) index entries whatever the
// backlog, and many ready keys (a batch full of heads) take no followers.
const leaseRunsPostgres = `WITH {walkrec}heads AS MATERIALIZED (
    ` + leaseHeadsPostgres + `),
` + runsPostgres

// runsPostgres is the part of leaseRunsPostgres after its heads: the
// heads' followers, and the UPDATE of heads and followers;
// leaseSuccessorsPostgres shares it. {followers} is how many followers
// each head may take: runsFollowersPostgres, or a bound argument
// (leaseSuccessorsPostgres).
//
// runsFollowersPostgres shares the batch: (BatchSize − heads) ÷ keyed
// heads. PostgreSQL cannot estimate a LIMIT it computes: it takes a tenth
// of the key index for each head, so the statement's estimated cost grows
// with the table — at 1,000,000 events past half of jit_above_cost, and
// then the relay runs it in a transaction with jit off (jit.go).
const runsPostgres = `runs(herald_seq, herald_pos, herald_tid) AS MATERIALIZED (
    SELECT h.sequence, 1, h.herald_tid FROM heads h
    UNION ALL
    SELECT f.sequence, f.pos, f.herald_tid FROM heads h CROSS JOIN LATERAL (
        SELECT r.sequence, r.pos, r.herald_tid FROM (
            SELECT e.sequence, e.herald_tid, 1 + row_number() OVER w AS pos,
                bool_and(e.dead_lettered_at IS NULL
                    AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= coalesce($3::timestamptz, now()))
                    AND (e.lease_until IS NULL OR e.lease_until < coalesce($3::timestamptz, now()))
                    {filter}) OVER w AS ok
            FROM (SELECT p.ctid AS herald_tid, p.* FROM {table} p
                  WHERE p.published_at IS NULL AND p.ordering_key IS NOT NULL
                    AND p.ordering_key <= h.ordering_key AND (p.ordering_key, p.sequence) > (h.ordering_key, h.sequence)
                  ORDER BY p.ordering_key, p.sequence
                  LIMIT {followers}) e
            WINDOW w AS (ORDER BY e.sequence)) r
        WHERE r.ok) f
    WHERE h.ordering_key IS NOT NULL AND (SELECT count(*) FROM heads) < $4)
UPDATE {table} AS t SET lease_until = coalesce($3::timestamptz, now()) + $1::bigint * interval '1 microsecond', leased_by = $2
WHERE t.ctid = ANY(ARRAY(SELECT herald_tid FROM runs))
  AND CASE WHEN t.published_at IS NULL AND t.dead_lettered_at IS NULL
      AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= coalesce($3::timestamptz, now()))
      AND (t.lease_until IS NULL OR t.lease_until < coalesce($3::timestamptz, now())) THEN true ELSE false END
RETURNING {tcolumns}, CASE WHEN NOT EXISTS (SELECT 1 FROM runs WHERE herald_pos > 1) THEN 1
    ELSE coalesce(((SELECT jsonb_object_agg(herald_seq::text, herald_pos) FROM runs) ->> t.sequence::text)::bigint, 0) END{markcount}{walkret}`

const runsFollowersPostgres = `($4 - (SELECT count(*) FROM heads)) / greatest((SELECT count(*) FROM heads WHERE ordering_key IS NOT NULL), 1)`

// leaseSuccessorsPostgres is the lease a relay runs while it drains a
// backlog of keyed events (PostgreSQL; see Relay.afterLease): after a
// lease of at least half a batch that held keyed events and was delivered
// whole, the mark of that batch (published, or deleted with
// Config.DeleteOnPublish) and the lease of the next events of its keys,
// in one statement — one round trip and one commit, where the full form
// takes four (BEGIN, mark, lease, COMMIT). A key's successor — its first
// pending event after the last one the batch delivered — is that key's
// head once the mark commits, so it is leased with no head test and no
// candidate scan. Where leaseRunsPostgres scans 2 × BatchSize
// candidates, sorts them by key and tests each with a backward descent
// of {base}_pending_key_idx that steps over the entry the mark just
// published, this statement reads one window: the first pending keyed
// events after the lowest "last delivered" of the batch's keys, in
// sequence order (herald_window), and takes for each key its first event
// there after its own last delivered (herald_next). The window leaves out
// the last block of consecutive sequences the batch delivered ($%[5]d to
// $%[6]d, from carriedBlock): no other event has a sequence in that block,
// and the statement's snapshot sees those events pending, so reading them
// only to drop them in the join read twice as many rows (a backlog
// drained in runs of consecutive sequences has its whole batch in the
// block). It holds the events delivered below the block and twice as
// many events as the batch has keys, at most BatchSize ($%[7]d; see
// Relay.leaseSuccessors). The window is contiguous in sequence order from
// below every key's last delivered, less events that are none of its
// keys' next, so a key's first event in it after that point is its first
// pending event after it. The second range is read only when the mark
// published the whole batch (herald_done has rows). Only a key with no
// event in the window — its successor lies beyond, or it has none —
// costs a forward descent of
// {base}_pending_key_idx from (key, last delivered). With 1,000 keys a
// descent each took 6–7 ms a lease, the window 1.3–1.5 ms (psql, 100,000
// events). Behind each successor, its followers, as in leaseRunsPostgres
// (runsPostgres), up to a number the relay binds ($%[4]d): BatchSize less
// the keys delivered, shared among them. As an argument the planner
// knows it; computed in the statement from the heads, as
// leaseRunsPostgres does, it made the estimated cost grow with the table
// past half of jit_above_cost at 1,000,000 events, and the relay then
// ran the full form instead, at every lease.
//
// Why a successor may be leased before the mark is seen. The statement's
// snapshot is taken before its mark, so the mark's rows look pending to
// it; the successors are found after them. The delivered events of a key
// are the pending events of that key from its head on, in order, with no
// gap: a lease takes a head and the events that follow it in its key (a
// run, cut at the first one not leasable; the relay keeps a prefix), a
// head has no earlier pending event of its key, and none can appear later
// (writers of a key commit in sequence order; see leaseBatchPostgres).
// So once the delivered events are published, the first pending event
// after the last of them has nothing pending before it. That holds only
// if the mark published every one of them: a mark that found an event no
// longer leased by this relay (its lease ran out and another relay took
// it) leaves it pending, and then no successor is leased at all — the
// statement's successors are taken only when the mark's row count is the
// number of events delivered ($%[3]d). The successor itself must pass
// every predicate (due, not leased, not dead, the relay's topics, not
// paused): it is the first pending event of its key after the last
// delivered, tested as found, never the first leasable one — a key whose
// next event waits for its retry gives nothing. Other relays' snapshots
// see the delivered events pending until this statement commits, and the
// successors leased once it has: no other relay can take a successor as a
// head meanwhile, and one that tries after the commit finds it leased
// (EvalPlanQual re-checks the newest version).
//
// Keys the batch did not hold, and unordered events, are not its
// business: the relay runs the full form (leaseRunsPostgres, with the
// mark in its transaction) after any short lease and every floorEvery-th
// successive lease of successors (or later, at the pace of the leases
// from the start: Relay.fromStartDue), so an event outside the delivered
// keys waits at most floorEvery leases, or that pace.
const leaseSuccessorsPostgres = `{markcte}, herald_done AS MATERIALIZED (
    SELECT m.ordering_key, max(m.sequence) AS last FROM herald_marked m
    WHERE m.ordering_key IS NOT NULL
    GROUP BY m.ordering_key
    HAVING (SELECT count(*) FROM herald_marked) = $%[3]d::bigint),
herald_window AS MATERIALIZED (
    SELECT w.* FROM (
        (SELECT ` + successorColumns + ` FROM {table} p
         WHERE p.published_at IS NULL AND p.sequence > (SELECT min(d.last) FROM herald_done d) AND p.sequence < $%[5]d::bigint
           AND p.ordering_key IS NOT NULL
         ORDER BY p.sequence
         LIMIT $%[7]d::bigint)
        UNION ALL
        (SELECT ` + successorColumns + ` FROM {table} p
         WHERE p.published_at IS NULL AND p.sequence > $%[6]d::bigint AND p.ordering_key IS NOT NULL
           AND EXISTS (SELECT 1 FROM herald_done)
         ORDER BY p.sequence
         LIMIT $%[7]d::bigint)) w
    ORDER BY w.sequence
    LIMIT $%[7]d::bigint),
herald_next AS MATERIALIZED (
    SELECT DISTINCT ON (w.ordering_key COLLATE "C") w.* FROM herald_window w
    JOIN herald_done d ON d.ordering_key = w.ordering_key AND w.sequence > d.last
    ORDER BY w.ordering_key COLLATE "C", w.sequence),
heads AS MATERIALIZED (
    SELECT e.sequence, e.ordering_key, e.herald_tid FROM (
        SELECT n.* FROM herald_next n
        UNION ALL
        SELECT f.* FROM herald_done d CROSS JOIN LATERAL (
            SELECT ` + successorColumns + ` FROM {table} p
            WHERE p.published_at IS NULL AND p.ordering_key IS NOT NULL
              AND p.ordering_key <= d.ordering_key AND (p.ordering_key, p.sequence) > (d.ordering_key, d.last)
            ORDER BY p.ordering_key, p.sequence
            LIMIT 1) f
        WHERE NOT EXISTS (SELECT 1 FROM herald_next n WHERE n.ordering_key = d.ordering_key)) e
    WHERE e.dead_lettered_at IS NULL
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= coalesce($3::timestamptz, now()))
      AND (e.lease_until IS NULL OR e.lease_until < coalesce($3::timestamptz, now())){sfilter}
    LIMIT $4),
` + runsPostgres

// successorColumns are the columns leaseSuccessorsPostgres reads of a
// candidate successor: what the predicates and the relay's filter test,
// and its physical address for the UPDATE.
const successorColumns = `p.ctid AS herald_tid, p.sequence, p.ordering_key, p.topic, p.tenant, p.dead_lettered_at, p.next_attempt_at, p.lease_until`

// availablePostgres narrows the lease's candidate sources to events no
// live lease holds and whose retry is due. The candidates were the first
// BatchSize pending events whatever their state: while one relay held a
// lease on the front of a backlog, a second relay's candidates were those
// very events, each failing the lease's predicates, and it leased nothing
// until the first relay's marks (two relays drained no faster than one);
// and BatchSize failing unordered events waiting for their retry at the
// front of the table held back every unordered event behind them
// (TestSecondRelayLeasesPastTheFirstsLease, TestRetriesDoNotHoldBackOthers).
// Candidates only narrow where the predicates look, so the per-key
// argument above is unchanged. The pending index has no lease column: the
// scan reads each candidate's row, which the lease reads anyway, and steps
// over at most the events other relays hold plus those waiting for a retry.
const (
	availablePostgres = `AND (c.lease_until IS NULL OR c.lease_until < coalesce($3::timestamptz, now()))
               AND (c.next_attempt_at IS NULL OR c.next_attempt_at <= coalesce($3::timestamptz, now()))`
	availableSQLite = `AND (c.lease_until IS NULL OR c.lease_until < $3)
                  AND (c.next_attempt_at IS NULL OR c.next_attempt_at <= $3)`
)

// candidatesPostgres is how many events each candidate source of the
// lease takes: twice BatchSize. A lease's row locks are taken before it
// commits and its lease_until is seen by others only after: while one
// relay's lease is in flight, a second relay's candidate scans still see
// the rows it is locking as available, and with BatchSize candidates
// those were all of them — skipped as locked, and the second relay leased
// nothing and waited its poll interval
// (TestSecondRelayLeasesPastALeaseInFlight). The outer scan stops at
// BatchSize rows that qualify: the second half costs only index entries.
//
// floorPostgres starts the candidate scans at the relay's lease floor
// (Relay.leaseFloor), bound as the statement's last argument ($n is
// numbered after the topic filter's); 0 scans from the start. The forms
// with the key walk, run only after a short lease, have none.
const (
	candidatesPostgres = `2 * $4::bigint`
	floorPostgres      = `
               AND c.sequence >= $%d::bigint`
)

// walkPostgres is the key walk's CTE and candidate source, spliced into
// leaseBatchPostgres only for a lease that walks: the statement without it
// carries no recursive CTE, whose estimated cost on a table with few
// keyed rows is enough, on a large table, for PostgreSQL to JIT-compile
// every lease.
const (
	walkCTEPostgres = `WITH RECURSIVE ` + walkPostgres + `
    `
	walkPostgres = `walk(k, s, n) AS (
        (SELECT w.ordering_key, w.sequence, 1 FROM {table} w
         WHERE w.published_at IS NULL AND w.ordering_key IS NOT NULL AND w.ordering_key > $%[1]d::text
         ORDER BY w.ordering_key, w.sequence LIMIT 1)
        UNION ALL
        SELECT n.ordering_key, n.sequence, walk.n + 1 FROM walk, LATERAL (
            SELECT w.ordering_key, w.sequence FROM {table} w
            WHERE w.published_at IS NULL AND w.ordering_key IS NOT NULL AND w.ordering_key > walk.k
            ORDER BY w.ordering_key, w.sequence LIMIT 1) n
        WHERE walk.n < $%[2]d)`
	walkSourcePostgres = `
            UNION ALL
            (SELECT walk.s FROM walk
             WHERE (SELECT coalesce((h.topic <> ALL(ARRAY(SELECT z.topic FROM {paused} z)) {hfilter}), false)
                    FROM {table} h WHERE h.sequence = walk.s))`
	// walkRetPostgres, returned with each row of a walk form, is where
	// the next walk starts after (see Relay.walkedTo): the last key this
	// walk visited when it visited as many as it may, else NULL (it
	// reached the last key: the next walk starts from the first).
	// walkEndPostgres asks the same on its own, for a walk that leased
	// nothing.
	walkRetPostgres = `(SELECT CASE WHEN count(*) = $%[2]d THEN max(k) END FROM walk)`
	walkEndPostgres = `WITH RECURSIVE ` + walkPostgres + `
SELECT CASE WHEN count(*) = $%[2]d THEN max(k) END FROM walk`
)

// leaseUnorderedPostgres is the lease a relay runs while it drains a
// backlog of unordered events (PostgreSQL; see Relay.afterLease): after a
// full lease of unordered events alone, from the lease floor, it takes the
// next unordered events in one range scan of {base}_pending_unordered_idx,
// each locked FOR UPDATE SKIP LOCKED as the scan passes it, the first
// BatchSize that pass the predicates — where leaseBatchPostgres reads two
// candidate sources of 2 × BatchSize entries, then finds each candidate
// again through {base}_pending_idx (one descent per candidate) and tests
// it. Half the work for the same events: in psql on a table of 100,000
// pending unordered events, batch 1000, 3.1–3.4 ms against 4.7–7.1 ms
// (BENCHMARKS.md, "Backlog drains, sixth pass"). Keyed events are not its
// business: they are leased by leaseBatchPostgres, which the relay runs
// again after any short lease and for every lease from the start of the
// table (every floorEvery-th full one, or later at their pace:
// Relay.fromStartDue), so a keyed event that arrives in an unordered
// backlog waits at most floorEvery leases or that pace, in its key's
// order. A second relay needs no candidates to look past the first's
// lease in flight: SKIP LOCKED steps over its locked rows and the scan
// goes on.
//
// The plan must not depend on statistics: a scan that stops after
// BatchSize rows is the right plan only if the planner believes many
// rows qualify. The relay's filter and the paused topics are written as
// one coalesce(…) — an expression whose selectivity PostgreSQL does not
// estimate from the column's statistics — and the paused topics as
// "<> ALL(ARRAY(…))", computed once: written as NOT EXISTS, or as the
// plain condition, on a table whose events all have one topic the
// planner estimated that one row qualified, and sorted the whole table
// (53–57 ms a lease, measured in psql).
//
// With a mark carried from the batch before (pending.go) it runs as one
// statement with the mark ({markcte}: leaseUnorderedMarkedPostgres), not
// in a transaction of BEGIN, mark, lease and COMMIT.
const leaseUnorderedPostgres = `{markcte}UPDATE {table} SET lease_until = coalesce($3::timestamptz, now()) + $1::bigint * interval '1 microsecond', leased_by = $2
WHERE ctid = ANY(ARRAY(
    SELECT e.ctid FROM {table} e
    WHERE e.published_at IS NULL AND e.ordering_key IS NULL AND e.dead_lettered_at IS NULL
      AND (e.lease_until IS NULL OR e.lease_until < coalesce($3::timestamptz, now()))
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= coalesce($3::timestamptz, now()))
      AND e.sequence >= $%[1]d::bigint
      AND coalesce((e.topic <> ALL(ARRAY(SELECT z.topic FROM {paused} z)) {filter}), false){markexcl}{limitref}
    ORDER BY e.sequence
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED))
RETURNING {columns}{markcount}`

// leaseUnorderedLockedPostgres is leaseUnorderedPostgres with
// Config.LeaseByLock: the same events, in the same order, locked FOR
// UPDATE SKIP LOCKED by a transaction the relay keeps open through their
// delivery and mark (markPublishedLockedPostgres…), and nothing written to
// them. The lease_until returned is the one the row would have had; the
// transaction's idle_in_transaction_session_timeout is set to the Lease
// ($1, in microseconds), so a relay that stops answering loses its locks
// after one Lease. The name ($2) is written by the mark, not here.
const leaseUnorderedLockedPostgres = `SELECT {lockcolumns}, e.ctid FROM {table} e
WHERE e.published_at IS NULL AND e.ordering_key IS NULL AND e.dead_lettered_at IS NULL
  AND (e.lease_until IS NULL OR e.lease_until < coalesce($3::timestamptz, now()))
  AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= coalesce($3::timestamptz, now()))
  AND e.sequence >= $%[1]d::bigint
  AND coalesce((e.topic <> ALL(ARRAY(SELECT z.topic FROM {paused} z)) {filter}), false)
  AND (SELECT set_config('idle_in_transaction_session_timeout', (greatest($1::bigint / 1000, 1))::text, true)) IS NOT NULL
  AND $2::text IS NOT NULL{limitref}
ORDER BY e.sequence
LIMIT {limit}
FOR UPDATE OF e SKIP LOCKED`

// The marks of a batch leased by lock (Config.LeaseByLock), run in the
// lease's transaction: no leased_by guard — the rows are locked by that
// transaction, so no other relay can have taken them — and the relay's
// name written with the outcome, as a lease would have written it. The
// delivered rows are found by the ctids their lease returned (a TID scan,
// not a descent of the primary key per row): a row locked by this
// transaction cannot have been updated, deleted or moved by another since.
const (
	markPublishedLockedPostgres = `UPDATE {table} SET published_at = coalesce($1::timestamptz, now()), leased_by = $3
WHERE ctid = ANY($2::tid[]) AND published_at IS NULL{async}`
	deletePublishedLockedPostgres = `DELETE FROM {table}
WHERE ctid = ANY($1::tid[]) AND published_at IS NULL{async}`
	markFailedLockedPostgres = `UPDATE {table} AS t SET attempts = v.attempts, last_error = v.error,
    next_attempt_at = CASE WHEN v.dead THEN NULL ELSE coalesce($3::timestamptz, now()) + v.backoff_us * interval '1 microsecond' END,
    dead_lettered_at = CASE WHEN v.dead THEN coalesce($3::timestamptz, now()) END, lease_until = NULL, leased_by = $2
FROM jsonb_to_recordset($1::jsonb) AS v(sequence bigint, attempts integer, error text, backoff_us bigint, dead boolean)
WHERE t.sequence = v.sequence AND t.published_at IS NULL{async}
RETURNING t.sequence, t.next_attempt_at`
)

// leaseUnorderedMarkedPostgres fills leaseUnorderedPostgres's {mark…}: the
// mark carried from the last batch — published, or deleted with
// Config.DeleteOnPublish — as a data-modifying WITH of the lease, the
// delivered sequences bound after the floor ($%[2]d), then their lowest
// and highest ($%[3]d, $%[4]d). One statement and one commit, where the
// transaction took four round trips (BEGIN, mark, lease, COMMIT); the
// commit still waits for one WAL flush.
//
// Why the lease needs nothing of the mark: it takes unordered events
// alone, so no head of a key waits for the mark to be seen, and the events
// marked are this relay's, leased until later than now, which the lease's
// predicates step over. The rows it marks and the rows it leases are kept
// apart even when a lease ran out before its mark ({markexcl}): the scan
// leaves out the carried sequences, tested only on rows between the
// lowest and the highest of them that pass every other predicate, so in a
// drain almost no row pays for the test. Two updates of one row in one
// statement would leave one of them undone, and the event leased again
// (TestCarriedMarkRunsInTheUnorderedLease). {markcount} returns the mark's
// row count with each leased event, for Relay.warnUnmarked; a lease that
// returns no event returns no count, and then nothing is said of the mark.
// The mark returns each row's sequence and key: leaseSuccessorsPostgres
// runs the same mark ({markcte}) and leases after them.
const (
	carriedMarkCTEPostgres = `WITH herald_marked AS (
    UPDATE {table} SET published_at = coalesce($3::timestamptz, now())
    WHERE sequence = ANY($%[2]d::bigint[]) AND leased_by = $2 AND published_at IS NULL
    RETURNING sequence, ordering_key)
`
	carriedDeleteCTEPostgres = `WITH herald_marked AS (
    DELETE FROM {table}
    WHERE sequence = ANY($%[2]d::bigint[]) AND leased_by = $2 AND published_at IS NULL
    RETURNING sequence, ordering_key)
`
	carriedExclusionPostgres = `
      AND NOT (e.sequence BETWEEN $%[3]d AND $%[4]d AND e.sequence = ANY($%[2]d::bigint[]))`
	carriedCountPostgres = `, (SELECT count(*) FROM herald_marked)`
)

// leaseBatchSQLite is leaseBatchPostgres for SQLite: one UPDATE …
// RETURNING, atomic because SQLite has one writer at a time and the
// statement takes the write lock before it reads. RETURNING order is not
// defined; the relay sorts the batch by sequence. SQLite has no LATERAL:
// the walk visits keys, and each key's head is one more descent of
// {base}_pending_key_idx.
const leaseBatchSQLite = `{walkcte}UPDATE {table} SET lease_until = $1, leased_by = $2
WHERE sequence IN (
    SELECT e.sequence FROM {table} e
    WHERE e.sequence IN (
            SELECT sequence FROM (SELECT c.sequence FROM {table} c
                WHERE c.published_at IS NULL AND c.dead_lettered_at IS NULL
                  {available}{cfilter} ORDER BY c.sequence LIMIT $4)
            UNION ALL
            SELECT sequence FROM (SELECT c.sequence FROM {table} c
                WHERE c.published_at IS NULL AND c.ordering_key IS NULL
                  {available}{cfilter} ORDER BY c.sequence LIMIT $4){walksource})
      AND e.published_at IS NULL AND e.dead_lettered_at IS NULL
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= $3)
      AND (e.lease_until IS NULL OR e.lease_until < $3)
      AND (e.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM {table} p
            WHERE p.ordering_key = e.ordering_key AND p.published_at IS NULL AND p.sequence < e.sequence))
      {filter}
    ORDER BY e.sequence
    LIMIT $4)
RETURNING {columns}{walkret}`

// walkSQLite is walkPostgres for SQLite.
const (
	walkCTESQLite = `WITH RECURSIVE ` + walkSQLite + `
`
	walkSQLite = `walk(k) AS (
    SELECT (SELECT w.ordering_key FROM {table} w
            WHERE w.published_at IS NULL AND w.ordering_key IS NOT NULL AND w.ordering_key > $%[1]d
            ORDER BY w.ordering_key LIMIT 1)
    UNION ALL
    SELECT (SELECT w.ordering_key FROM {table} w
            WHERE w.published_at IS NULL AND w.ordering_key IS NOT NULL AND w.ordering_key > walk.k
            ORDER BY w.ordering_key LIMIT 1)
    FROM walk WHERE walk.k IS NOT NULL
    LIMIT $%[2]d)`
	walkSourceSQLite = `
            UNION ALL
            SELECT (SELECT h.sequence FROM {table} h
                    WHERE h.ordering_key = walk.k AND h.published_at IS NULL AND h.ordering_key IS NOT NULL
                    ORDER BY h.sequence LIMIT 1)
            FROM walk WHERE walk.k IS NOT NULL`
	walkRetSQLite = `(SELECT CASE WHEN count(k) = $%[2]d THEN max(k) END FROM walk)`
	walkEndSQLite = `WITH RECURSIVE ` + walkSQLite + `
SELECT CASE WHEN count(k) = $%[2]d THEN max(k) END FROM walk`
)

// markPublishedPostgres marks the delivered events of a batch published,
// in one statement. The leased_by guard keeps a relay whose lease expired
// and was taken over from touching the new holder's row; the event is then
// marked by the relay that holds it.
const markPublishedPostgres = `UPDATE {table} SET published_at = coalesce($1::timestamptz, now())
WHERE sequence = ANY($2::bigint[]) AND leased_by = $3 AND published_at IS NULL{async}`

const markPublishedSQLite = `UPDATE {table} SET published_at = $1
WHERE sequence IN (SELECT value FROM json_each($2)) AND leased_by = $3 AND published_at IS NULL`

// deletePublishedPostgres is markPublishedPostgres for
// Config.DeleteOnPublish: the delivered events of a batch are deleted, under
// the same guards, instead of being marked. For the lease, a deleted event is
// a published one: it no longer holds its key back.
const deletePublishedPostgres = `DELETE FROM {table}
WHERE sequence = ANY($1::bigint[]) AND leased_by = $2 AND published_at IS NULL{async}`

const deletePublishedSQLite = `DELETE FROM {table}
WHERE sequence IN (SELECT value FROM json_each($1)) AND leased_by = $2 AND published_at IS NULL`

// markFailedPostgres records the failed deliveries of a batch in one
// statement; the values per event (attempts, error, next attempt, dead)
// come as one JSON array. A failure is recorded only while this relay
// still holds the event (leased_by) and it is not published: an event
// another relay published meanwhile stays published.
const markFailedPostgres = `UPDATE {table} AS t SET attempts = v.attempts, last_error = v.error,
    next_attempt_at = CASE WHEN v.dead THEN NULL ELSE coalesce($3::timestamptz, now()) + v.backoff_us * interval '1 microsecond' END,
    dead_lettered_at = CASE WHEN v.dead THEN coalesce($3::timestamptz, now()) END, lease_until = NULL
FROM jsonb_to_recordset($1::jsonb) AS v(sequence bigint, attempts integer, error text, backoff_us bigint, dead boolean)
WHERE t.sequence = v.sequence AND t.leased_by = $2 AND t.published_at IS NULL{async}
RETURNING t.sequence, t.next_attempt_at`

const markFailedSQLite = `UPDATE {table} AS t SET attempts = v.attempts, last_error = v.error,
    next_attempt_at = v.next_attempt_at, dead_lettered_at = v.dead_lettered_at, lease_until = NULL
FROM (SELECT json_extract(value, '$.sequence') AS seq, json_extract(value, '$.attempts') AS attempts,
        json_extract(value, '$.error') AS error, json_extract(value, '$.next_attempt_at') AS next_attempt_at,
        json_extract(value, '$.dead_lettered_at') AS dead_lettered_at
      FROM json_each($1)) AS v
WHERE t.sequence = v.seq AND t.leased_by = $2 AND t.published_at IS NULL
RETURNING sequence, next_attempt_at`

// renewLeasePostgres extends the lease of the events of a batch still out
// by one Lease from the database's now, and returns the events it still
// held. A HOT update, like the lease. The leased_by guard is the whole
// test of ownership: another relay that leased an event after this
// relay's lease ran out wrote its own name there.
const renewLeasePostgres = `UPDATE {table} SET lease_until = coalesce($4::timestamptz, now()) + $1::bigint * interval '1 microsecond'
WHERE sequence = ANY($2::bigint[]) AND leased_by = $3 AND published_at IS NULL
RETURNING sequence`

const renewLeaseSQLite = `UPDATE {table} SET lease_until = $1
WHERE sequence IN (SELECT value FROM json_each($2)) AND leased_by = $3 AND published_at IS NULL
RETURNING sequence`

// releasePostgres clears the lease of events this relay will not deliver
// (a forced stop cancelled them, or their lease ran out before delivery),
// so another relay may take them at once.
const releasePostgres = `UPDATE {table} SET lease_until = NULL
WHERE sequence = ANY($1::bigint[]) AND leased_by = $2 AND published_at IS NULL{async}`

const releaseSQLite = `UPDATE {table} SET lease_until = NULL
WHERE sequence IN (SELECT value FROM json_each($1)) AND leased_by = $2 AND published_at IS NULL`

// backlogSQL counts the pending events and finds the oldest one through
// {base}_pending_idx, and counts the dead ones through
// {base}_dead_lettered_idx; published history is never scanned. {now} is
// the database's now, from which the oldest event's age is measured.
const backlogSQL = `SELECT p.n, p.oldest, d.n, {now} FROM
    (SELECT count(*) AS n, min(e.created_at) AS oldest FROM {table} e
     WHERE e.published_at IS NULL AND e.dead_lettered_at IS NULL {filter}) AS p,
    (SELECT count(*) AS n FROM {table} e
     WHERE e.dead_lettered_at IS NOT NULL {filter}) AS d`

// backlogByTopicSQL is backlogSQL by topic, in one statement: the rows
// not yet published (pending and dead), grouped by topic, and the paused
// topics; published history is never scanned.
const backlogByTopicSQL = `SELECT b.topic, sum(b.pending), min(b.oldest), sum(b.dead), max(b.paused), {now} FROM (
    SELECT e.topic, CASE WHEN e.dead_lettered_at IS NULL THEN 1 ELSE 0 END AS pending,
        CASE WHEN e.dead_lettered_at IS NULL THEN e.created_at END AS oldest,
        CASE WHEN e.dead_lettered_at IS NULL THEN 0 ELSE 1 END AS dead, 0 AS paused
    FROM {table} e
    WHERE e.published_at IS NULL {filter}
    UNION ALL
    SELECT e.topic, 0, NULL, 0, 1 FROM {paused} e WHERE 1 = 1 {topicfilter}) b
GROUP BY b.topic
ORDER BY b.topic`

// backlogByTenantSQL is backlogSQL by tenant (schema version 6), in one
// statement: the rows not yet published, grouped by the tenant column;
// published history is never scanned. The same on every dialect.
const backlogByTenantSQL = `SELECT e.tenant,
    sum(CASE WHEN e.dead_lettered_at IS NULL THEN 1 ELSE 0 END),
    min(CASE WHEN e.dead_lettered_at IS NULL THEN e.created_at END),
    sum(CASE WHEN e.dead_lettered_at IS NULL THEN 0 ELSE 1 END), {now}
FROM {table} e
WHERE e.published_at IS NULL {filter}
GROUP BY e.tenant
ORDER BY e.tenant`

// cleanupPublishedPostgres deletes one batch of published events published
// more than $2 microseconds before the database's now; the caller repeats
// it until a batch comes back short, so no statement holds many locks for
// long. SKIP LOCKED lets two cleaners share the work; ANY(ARRAY(…)) as in
// leaseBatchPostgres.
const cleanupPublishedPostgres = `DELETE FROM {table} WHERE sequence = ANY(ARRAY(
    SELECT e.sequence FROM {table} e
    WHERE e.published_at IS NOT NULL
      AND e.published_at < coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond' {filter}
    LIMIT $3 FOR UPDATE SKIP LOCKED))`

// cleanupPublishedSQLite takes the cutoff itself as $1.
const cleanupPublishedSQLite = `DELETE FROM {table} WHERE sequence IN (
    SELECT e.sequence FROM {table} e
    WHERE e.published_at IS NOT NULL AND e.published_at < $1 {filter}
    LIMIT $2)`

// cleanupDeadLetteredPostgres deletes one batch of dead events older than
// the cutoff. Deleting a dead event releases the events of its key behind
// it.
const cleanupDeadLetteredPostgres = `DELETE FROM {table} WHERE sequence = ANY(ARRAY(
    SELECT e.sequence FROM {table} e
    WHERE e.dead_lettered_at IS NOT NULL
      AND e.dead_lettered_at < coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond' {filter}
    LIMIT $3 FOR UPDATE SKIP LOCKED))`

const cleanupDeadLetteredSQLite = `DELETE FROM {table} WHERE sequence IN (
    SELECT e.sequence FROM {table} e
    WHERE e.dead_lettered_at IS NOT NULL AND e.dead_lettered_at < $1 {filter}
    LIMIT $2)`

// retryDeadLetteredPostgres makes one batch of dead events due again with
// their attempts reset; {where} adds the caller's Filter. last_error is
// kept for the record.
const retryDeadLetteredPostgres = `UPDATE {table} SET dead_lettered_at = NULL, attempts = 0,
    next_attempt_at = NULL, lease_until = NULL, leased_by = NULL
WHERE sequence = ANY(ARRAY(
    SELECT e.sequence FROM {table} e
    WHERE e.dead_lettered_at IS NOT NULL {filter} {where}
    ORDER BY e.sequence LIMIT $1 FOR UPDATE SKIP LOCKED))
RETURNING topic`

const retryDeadLetteredSQLite = `UPDATE {table} SET dead_lettered_at = NULL, attempts = 0,
    next_attempt_at = NULL, lease_until = NULL, leased_by = NULL
WHERE sequence IN (
    SELECT e.sequence FROM {table} e
    WHERE e.dead_lettered_at IS NOT NULL {filter} {where}
    ORDER BY e.sequence LIMIT $1)
RETURNING topic`

// asyncCommitPostgres is {async} with Config.AsyncCommit: it runs the
// statement's own transaction (each mark is one statement, committed on
// its own) with synchronous_commit off. set_config(…, true) is SET LOCAL:
// the setting lasts until the transaction ends and is read when it
// commits, so the commit returns without waiting for its WAL to reach
// disk. Written as an uncorrelated scalar subquery, it is evaluated once
// per statement, before the statement's first row is written.
//
// Why only the marks and the release, never the lease or the renewal: a
// lease's commit waits for the WAL flush, which writes every earlier
// record — including this relay's asynchronous marks, and any mark that
// another relay's lease could have seen. So a server crash can lose only
// marks committed after the last lease that anyone committed, and none of
// those events' successors was leased yet: the lost marks' events are
// still leased by this relay (the lease was durable), their lease runs
// out, and they are delivered again, before their successors (a duplicate,
// as after a relay crash). Were the lease asynchronous too, a crash could
// lose a lease under which an event is still being delivered, and another
// relay could deliver it and its successors meanwhile.
const asyncCommitPostgres = `
  AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL`

// checkTableSQL selects every column the relay reads, and no row: it fails
// when the table or one of the columns is missing.
// It also names the table of paused topics the lease reads (schema
// version 5), so a table not migrated that far is found at start-up.
const checkTableSQL = `SELECT {all_columns} FROM {table}, (SELECT count(*) AS n FROM {paused}) AS herald_paused WHERE 1 = 0`

var placeholderRE = regexp.MustCompile(`\$(\d+)`)

// statements is the relay's SQL rendered for its dialect, table, columns
// and topic filter.
type statements struct {
	lease, leaseWalk                                               string // without and with the key walk
	leaseUnordered                                                 string // unordered events alone, while a backlog of them drains (PostgreSQL)
	leaseUnorderedMarked, leaseUnorderedDeleted                    string // leaseUnordered with a carried mark or delete in the statement (PostgreSQL)
	leaseUnorderedLocked                                           string // leaseUnordered by row locks (Config.LeaseByLock; PostgreSQL)
	markPublishedLocked, deletePublishedLocked, markFailedLocked   string // the marks of a batch leased by lock, in its transaction
	leaseRuns, leaseRunsWalk                                       string // the same, leasing runs of a key (PostgreSQL; on SQLite = lease, leaseWalk)
	leaseSuccessorsMarked, leaseSuccessorsDeleted                  string // a carried mark or delete and the next events of its keys (PostgreSQL)
	walkEnd                                                        string // where the next key walk starts after, for a walk that leased nothing (Relay.walkedTo)
	markPublished, deletePublished, markFailed                     string
	fusedMark, fusedDelete                                         string // the marks carried into a lease's transaction (pending.go; PostgreSQL)
	renew, release                                                 string
	backlog, backlogByTopic, cleanupPublished, cleanupDeadLettered string
	backlogByTenant                                                string // every dialect's: rendered by relay.New
	retry, checkTable                                              string
}

// sqlBuilder renders statement templates.
type sqlBuilder struct {
	d          envelope.Dialect
	t          envelope.Table
	columns    string // what the lease returns: leaseColumns and the extras
	allColumns string // every column the relay relies on, for checkTableSQL
	async      bool   // Config.AsyncCommit (PostgreSQL)
	batch      int    // Config.BatchSize (validated, 1 or more), written into the lease of unordered events
}

func (b sqlBuilder) pick(pg, lite string) string {
	if b.d == envelope.Postgres {
		return pg
	}
	return lite
}

// render fills a template; filter is the topic filter fragment (already
// numbered) and where an extra condition.
func (b sqlBuilder) render(tmpl, filter, where string) string {
	now := "$1"
	switch b.d {
	case envelope.Postgres:
		now = "coalesce($1::timestamptz, now())"
	case envelope.MySQL:
		now = mysqlNow
	}
	async := ""
	if b.async && b.d == envelope.Postgres {
		async = asyncCommitPostgres
	}
	tcols := "t." + strings.ReplaceAll(b.columns, ", ", ", t.")
	s := strings.NewReplacer("{table}", b.t.Quoted, "{columns}", b.columns, "{tcolumns}", tcols, "{all_columns}", b.allColumns,
		"{filter}", filter, "{where}", where, "{now}", now, "{async}", async, "{paused}", outbox.PausedTable(b.t)).Replace(tmpl)
	if b.d == envelope.SQLite {
		s = placeholderRE.ReplaceAllString(s, "?$1")
	}
	return s
}

// topicCondition renders "(e.topic = $n OR e.topic LIKE $m ESCAPE '\' …)"
// for patterns, numbering placeholders from next, and returns the
// fragment, its arguments and the next free number. On SQLite a prefix is
// compared with substr, because SQLite's LIKE ignores ASCII case.
func (b sqlBuilder) topicCondition(ps []envelope.TopicPattern, next int) (string, []any, int) {
	var sb strings.Builder
	var args []any
	sb.WriteByte('(')
	for i, p := range ps {
		if i > 0 {
			sb.WriteString(" OR ")
		}
		switch {
		case !p.Prefix:
			sb.WriteString("e.topic = $" + strconv.Itoa(next))
			args = append(args, p.Text)
			next++
		case p.Text == "":
			sb.WriteString("TRUE")
		case b.d == envelope.Postgres:
			sb.WriteString("e.topic LIKE $" + strconv.Itoa(next) + ` ESCAPE '\'`)
			args = append(args, outbox.LikePattern(p))
			next++
		default:
			sb.WriteString("substr(e.topic, 1, $" + strconv.Itoa(next) + ") = $" + strconv.Itoa(next+1))
			args = append(args, utf8.RuneCountInString(p.Text), p.Text)
			next += 2
		}
	}
	sb.WriteByte(')')
	return sb.String(), args, next
}

// filterCondition renders the relay's Topics and ExcludeTopics as
// "AND … AND NOT …" ("" for every topic), numbering from next.
func (b sqlBuilder) filterCondition(f filter, next int) (string, []any, int) {
	var parts []string
	var args []any
	if f.include != nil {
		s, a, n := b.topicCondition(f.include, next)
		parts, args, next = append(parts, "AND "+s), append(args, a...), n
	}
	if len(f.exclude) > 0 {
		s, a, n := b.topicCondition(f.exclude, next)
		parts, args, next = append(parts, "AND NOT "+s), append(args, a...), n
	}
	if f.tenants != nil {
		var sb strings.Builder
		sb.WriteString("AND e.tenant IN (")
		for i, t := range f.tenants {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("$" + strconv.Itoa(next))
			args = append(args, t)
			next++
		}
		sb.WriteByte(')')
		parts = append(parts, sb.String())
	}
	return strings.Join(parts, " "), args, next
}

// candidateFilter is the relay's filter f (rendered over alias e) and the
// paused topics over alias a, for a candidate source. On PostgreSQL it is
// one coalesce(…) (see leaseUnorderedPostgres: an expression whose
// selectivity the planner does not estimate from the topic's statistics,
// so the source's plan stays an index scan that stops after its LIMIT),
// the paused topics read once as an array; on SQLite and MySQL the
// conditions themselves.
func (b sqlBuilder) candidateFilter(f, a string) string {
	f = strings.NewReplacer("e.topic", a+".topic", "e.tenant", a+".tenant").Replace(f)
	if b.d == envelope.Postgres {
		return "\n               AND coalesce((" + a + ".topic <> ALL(ARRAY(SELECT z.topic FROM {paused} z)) " + f + "), false)"
	}
	return "\n               AND NOT EXISTS (SELECT 1 FROM {paused} z WHERE z.topic = " + a + ".topic) " + f
}

// topicsOnly fills {topicfilter} in tmpl: the filter's topics alone (the
// table of paused topics has no tenants), numbered as in {filter} at 2.
func (b sqlBuilder) topicsOnly(tmpl string, f filter) string {
	ft, _, _ := b.filterCondition(filter{include: f.include, exclude: f.exclude}, 2)
	return strings.ReplaceAll(tmpl, "{topicfilter}", ft)
}

func (b sqlBuilder) build(f filter) (statements, []any) {
	var st statements
	// The filter's placeholders follow each statement's own: the lease has
	// four (five with the key walk), the PostgreSQL cleanups three, the
	// SQLite ones two, the backlog one; the filter's arguments are appended
	// to theirs.
	f5, fargs, n5 := b.filterCondition(f, 5)
	f6, _, n6 := b.filterCondition(f, 6)
	cleanupFrom := 3
	if b.d == envelope.Postgres {
		cleanupFrom = 4
	}
	fc, _, _ := b.filterCondition(f, cleanupFrom)
	f2, _, _ := b.filterCondition(f, 2)
	// The lease skips paused topics (schema version 5, {base}_paused): a
	// paused topic's events are simply not leased — not heads, and not
	// followers in a run, which the filter cuts there — so they wait, in
	// order, and other topics and keys pass. Only the lease carries it:
	// backlog, cleanup and retry see paused topics' events as any others.
	paused := " AND NOT EXISTS (SELECT 1 FROM " + outbox.PausedTable(b.t) + " z WHERE z.topic = e.topic)"
	// The filters without the paused topics: for leaseUnorderedPostgres,
	// which reads them its own way, and for the heads ({efilter}), whose
	// candidate sources already skip them.
	fu, fu6 := f5, f6
	c5, c6 := b.candidateFilter(f5, "c"), b.candidateFilter(f6, "c")
	h6 := strings.NewReplacer("e.topic", "h.topic", "e.tenant", "h.tenant").Replace(f6)
	f5, f6 = f5+paused, f6+paused
	lease := b.pick(leaseBatchPostgres, leaseBatchSQLite)
	avail := strings.NewReplacer("{available}", b.pick(availablePostgres, availableSQLite), "{candidates}", candidatesPostgres)
	floor, noFloor := strings.NewReplacer("{floor}", fmt.Sprintf(floorPostgres, n5)), strings.NewReplacer("{floor}", "")
	// The key walk starts after the key bound last ($n6, after the
	// filter's arguments; see Relay.walkedTo) and visits up to $5 keys;
	// the walk forms return, with each row, where the next walk starts.
	cte, src := fmt.Sprintf(b.pick(walkCTEPostgres, walkCTESQLite), n6, 5), b.pick(walkSourcePostgres, walkSourceSQLite)
	walkRet := strings.NewReplacer("{walkret}", ",\n    "+fmt.Sprintf(b.pick(walkRetPostgres, walkRetSQLite), n6, 5),
		"{walkrec}", "RECURSIVE "+fmt.Sprintf(walkPostgres, n6, 5)+",\n")
	noWalkRet := strings.NewReplacer("{walkret}", "", "{walkrec}", "")
	// The candidate sources take the relay's filter and skip paused
	// topics ({cfilter}; the key walk's heads too, {hfilter}): otherwise
	// 2 × BatchSize pending events the relay does not take — a paused
	// topic's backlog, another relay's topics or tenants — filled its
	// candidates, every lease came back empty and nothing behind them
	// was delivered (TestLeaseLooksPastEventsItDoesNotTake).
	cf5 := strings.NewReplacer("{cfilter}", c5, "{hfilter}", "", "{efilter}", fu)
	cf6 := strings.NewReplacer("{cfilter}", c6, "{hfilter}", h6, "{efilter}", fu6)
	by := func(h string) *strings.Replacer { return strings.NewReplacer("{hby}", h) }
	st.lease = b.render(noWalkRet.Replace(by("ctid").Replace(cf5.Replace(floor.Replace(avail.Replace(strings.NewReplacer("{walkcte}", "", "{walksource}", "", "{headcols}", "", "{pendingsrc}", pendingSourcePostgres).Replace(lease)))))), f5, "")
	st.leaseWalk = b.render(walkRet.Replace(by("ctid").Replace(cf6.Replace(noFloor.Replace(avail.Replace(strings.NewReplacer("{walkcte}", cte, "{walksource}", src, "{headcols}", "", "{pendingsrc}", pendingSourcePostgres).Replace(lease)))))), f6, "")
	st.leaseRuns, st.leaseRunsWalk = st.lease, st.leaseWalk
	st.walkEnd = b.render(fmt.Sprintf(b.pick(walkEndPostgres, walkEndSQLite), 1, 2), "", "")
	if b.d == envelope.Postgres {
		runs := leaseRunsPostgres
		noCount := strings.NewReplacer("{markcount}", "", "{followers}", runsFollowersPostgres)
		st.leaseRuns = b.render(noWalkRet.Replace(noCount.Replace(by("sequence").Replace(cf5.Replace(floor.Replace(avail.Replace(strings.NewReplacer("{walksource}", "", "{headcols}", ", e.ordering_key, e.ctid AS herald_tid", "{pendingsrc}", pendingSourcePostgres).Replace(runs))))))), f5, "")
		st.leaseRunsWalk = b.render(walkRet.Replace(noCount.Replace(by("sequence").Replace(cf6.Replace(noFloor.Replace(avail.Replace(strings.NewReplacer("{walksource}", src, "{headcols}", ", e.ordering_key, e.ctid AS herald_tid", "{pendingsrc}", pendingSourcePostgres).Replace(runs))))))), f6, "")
		// The lease of unordered events is the statement a drain runs
		// again and again, and the one the relay may run prepared
		// (Relay.planned): its LIMIT is BatchSize written out, so that
		// a generic plan is costed for the rows it takes and PostgreSQL
		// keeps it (with LIMIT $4 it estimated a tenth of the table and
		// kept planning each execution). $4, still bound, is checked
		// once per execution, so that it keeps its type.
		limit := strings.NewReplacer("{limit}", strconv.Itoa(b.batch), "{limitref}", "\n      AND $4::bigint > 0")
		unordered := func(cte, gate, count string) string {
			q := limit.Replace(strings.NewReplacer("{markcte}", cte, "{markexcl}", gate, "{markcount}", count).Replace(leaseUnorderedPostgres))
			return b.render(fmt.Sprintf(q, n5, n5+1, n5+2, n5+3), fu, "")
		}
		successors := func(cte string) string {
			q := strings.NewReplacer("{markcte}", strings.TrimSuffix(cte, "\n"), "{markcount}", carriedCountPostgres, "{sfilter}", b.candidateFilter(fu, "e"),
				"{walkret}", "", "{followers}", "$%[4]d::bigint").Replace(leaseSuccessorsPostgres)
			// The carried mark's sequences are its $%[2]d, as in the
			// lease of unordered events; this statement has no floor
			// ($%[1]d there), so they follow the filter's arguments, then
			// the mark's row count and the followers a head may take.
			return b.render(fmt.Sprintf(q, 0, n5, n5+1, n5+2, n5+3, n5+4, n5+5), f5, "")
		}
		st.leaseSuccessorsMarked = successors(carriedMarkCTEPostgres)
		st.leaseSuccessorsDeleted = successors(carriedDeleteCTEPostgres)
		st.leaseUnordered = unordered("", "", "")
		st.leaseUnorderedMarked = unordered(carriedMarkCTEPostgres, carriedExclusionPostgres, carriedCountPostgres)
		st.leaseUnorderedDeleted = unordered(carriedDeleteCTEPostgres, carriedExclusionPostgres, carriedCountPostgres)
		// The columns the lease returns, lease_until being the one a
		// written lease would have set; filled in after Sprintf, as
		// render fills {columns}.
		lockCols := strings.Replace(b.columns, ", lease_until, ", ", coalesce($3::timestamptz, now()) + $1::bigint * interval '1 microsecond' AS lease_until, ", 1)
		st.leaseUnorderedLocked = b.render(strings.ReplaceAll(fmt.Sprintf(limit.Replace(leaseUnorderedLockedPostgres), n5), "{lockcolumns}", lockCols), fu, "")
		st.markPublishedLocked = b.render(markPublishedLockedPostgres, "", "")
		st.deletePublishedLocked = b.render(deletePublishedLockedPostgres, "", "")
		st.markFailedLocked = b.render(markFailedLockedPostgres, "", "")
		st.fusedMark = b.render(fmt.Sprintf(fusedMarkSQL, markPublishedPostgres), "", "")
		st.fusedDelete = b.render(fmt.Sprintf(fusedMarkSQL, deletePublishedPostgres), "", "")
	}
	st.markPublished = b.render(b.pick(markPublishedPostgres, markPublishedSQLite), "", "")
	st.deletePublished = b.render(b.pick(deletePublishedPostgres, deletePublishedSQLite), "", "")
	st.markFailed = b.render(b.pick(markFailedPostgres, markFailedSQLite), "", "")
	st.renew = b.render(b.pick(renewLeasePostgres, renewLeaseSQLite), "", "")
	st.release = b.render(b.pick(releasePostgres, releaseSQLite), "", "")
	st.backlog = b.render(backlogSQL, f2, "")
	st.backlogByTopic = b.render(b.topicsOnly(backlogByTopicSQL, f), f2, "")
	st.cleanupPublished = b.render(b.pick(cleanupPublishedPostgres, cleanupPublishedSQLite), fc, "")
	st.cleanupDeadLettered = b.render(b.pick(cleanupDeadLetteredPostgres, cleanupDeadLetteredSQLite), fc, "")
	// retry's {where} is added per call (see Relay.RetryDeadLettered); keep
	// the template with the filter from $2 in place.
	st.retry = strings.NewReplacer("{filter}", f2).Replace(b.pick(retryDeadLetteredPostgres, retryDeadLetteredSQLite))
	st.checkTable = b.render(checkTableSQL, "", "")
	return st, fargs
}
