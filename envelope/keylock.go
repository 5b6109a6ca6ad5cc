package envelope

import (
	"sort"
	"strconv"
	"strings"

	"github.com/heraldgo/herald/internal/outboxsql"
)

// Per-key commit order on PostgreSQL.
//
// The relay delivers a key's events in sequence order and a consumer may
// keep a per-key high-water mark, so for every ordering key sequence order
// must be commit order. It is not by itself: a sequence value is drawn when
// the row is inserted, not when it commits. Transaction T1 inserts an event
// of key k (sequence 10) and stays open; T2 inserts one of k (11) and
// commits; the relay delivers 11; T1 commits and 10 appears below the
// consumer's mark. Two writers of one key must therefore be serialized from
// the moment the first draws a sequence value until it commits.
//
// Every statement that inserts events with an ordering key takes, before it
// draws any sequence value, a transaction-scoped advisory lock for each key:
//
//   - The lock is on the key's bucket, hashtextextended(key) mod
//     keyLockBuckets, in a lock space of the outbox table's own (the
//     two-int4 advisory lock form, classid the table's OID — the same
//     table however it is named, and two outbox tables of one name in
//     two schemas never share a lock), so a
//     write with 100,000 keys takes at most keyLockBuckets locks and never
//     exhausts the server's lock table (max_locks_per_transaction), as one
//     lock per key would (about 12,000 locks fail with "out of shared
//     memory" on a stock PostgreSQL 15).
//   - An event of a captured row change whose key is the row's own (the
//     default template "{label}:{pk}", see internal/capture's
//     Spec.RowKeyed) takes the lock SHARED: two writers of such a key
//     hold the row's lock, which already serializes them, so they need
//     not wait on each other — and writers of different rows whose keys
//     share a bucket never do. Every other event
//     (Enqueue, a template without {pk}, an OrderingKeyFunc) takes it
//     EXCLUSIVE, which waits for every other holder: for a row-keyed
//     writer of the same key (captured update, then Enqueue with the row's
//     key) as for another writer of a shared key ("{label}").
//   - Within one statement the buckets are locked in ascending order, so
//     two statements never deadlock on each other's buckets.
//   - The locks are taken by the INSERT itself, not by a statement before
//     it: in "INSERT … SELECT … WHERE <locks>" (one row) the locks are
//     a one-time filter evaluated before the projection that calls
//     nextval(); in a multi-row "INSERT … VALUES" (Extra columns) they are
//     in the first row's created_at, evaluated when the VALUES scan forms
//     that row, before the projection above it draws its sequence value;
//     in "INSERT … SELECT … FROM unnest(…)" they are a scalar subquery
//     (an InitPlan, run once before the first row). One key is one
//     pg_advisory_xact_lock call, several the lockKeysSQL subquery
//     (lockCond); both lock the same bucket.
//     TestKeyLockFormsBeforeSequence pins this for every pair of forms: a
//     writer that blocks on the lock draws its sequence values only once
//     it has the lock.
//
// The price of buckets is false sharing: two exclusive writers of different
// keys in one bucket (1 in keyLockBuckets) wait for each other, and a
// write with many keys (a bulk captured write) holds many buckets shared,
// so exclusive writers of those buckets wait for its commit. Row-keyed
// captured writes never wait on each other's buckets.
//
// Known hazard: a transaction that holds a bucket shared (a captured
// row-keyed write) and then asks for it exclusive (an Enqueue with a key
// in that bucket) upgrades its lock; two such transactions holding the
// same bucket shared deadlock, and PostgreSQL aborts one of them with
// SQLSTATE 40P01 after deadlock_timeout (1 s by default); retrying it
// succeeds. For "write row r, then Enqueue r's own key" that takes two
// concurrent transactions whose rows' keys share a bucket (1 in 1024 per
// pair); a bulk captured write (holding most buckets) followed by an
// Enqueue with a key makes it likely when two such transactions overlap.
// With only two advisory lock modes and a bounded number of locks per
// transaction (one lock per key would exhaust the lock table), writers
// that must not wait on each other (captured rows) and writers that must
// wait for them (Enqueue) cannot be told apart otherwise.
const (
	keyLockBuckets = outboxsql.KeyLockBuckets
	keyLockSeed    = outboxsql.KeyLockSeed
)

// lockClassSQL is the advisory lock classid of the table, as SQL: its OID
// (resolved once, when the statement is parsed), as int4. Advisory locks
// are per database, and a table's OID is unique in its database, so every
// outbox table — one per schema of a multi-tenant database, a test's own —
// has a lock space of its own, while every writer of one table, whatever
// name or search_path it reaches it by, shares it.
func lockClassSQL(t Table) string { return outboxsql.LockClassSQL(t.Quoted) }

// keyLocks are the ordering keys a write locks, and whether exclusively.
type keyLocks map[string]bool

func (l keyLocks) add(key string, exclusive bool) {
	if key == "" {
		return
	}
	l[key] = l[key] || exclusive
}

// args returns the keys as a PostgreSQL text[] literal and their modes as
// a boolean[] literal, in key order: two parameters whatever the number of
// keys (the bind-parameter limit never applies), bound as text so that any
// driver (pgx, lib/pq) can send them.
func (l keyLocks) args() (keys, exclusive string) {
	names := make([]string, 0, len(l))
	for k := range l {
		names = append(names, k)
	}
	sort.Strings(names)
	var kb, xb strings.Builder
	kb.WriteByte('{')
	xb.WriteByte('{')
	for i, k := range names {
		if i > 0 {
			kb.WriteByte(',')
			xb.WriteByte(',')
		}
		kb.WriteString(arrayElement(k))
		if l[k] {
			xb.WriteByte('t')
		} else {
			xb.WriteByte('f')
		}
	}
	kb.WriteByte('}')
	xb.WriteByte('}')
	return kb.String(), xb.String()
}

// arrayElement quotes s as an element of a PostgreSQL array literal.
func arrayElement(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	appendArrayElement(&b, s)
	return b.String()
}

// appendArrayElement appends s to b quoted as an element of a PostgreSQL
// array literal: between double quotes, with '"' and '\\' escaped, so
// array_in gives back exactly s.
func appendArrayElement(b *strings.Builder, s string) {
	b.WriteByte('"')
	for {
		i := strings.IndexAny(s, `"\`)
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		b.WriteByte('\\')
		b.WriteByte(s[i])
		s = s[i+1:]
	}
	b.WriteString(s)
	b.WriteByte('"')
}

// appendNullableElement is appendArrayElement, with "" as NULL.
func appendNullableElement(b *strings.Builder, s string) {
	if s == "" {
		b.WriteString("NULL")
		return
	}
	appendArrayElement(b, s)
}

// textArray returns ss as a PostgreSQL text[] literal.
func textArray(ss []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(arrayElement(s))
	}
	b.WriteByte('}')
	return b.String()
}

// lockKeysSQL is a scalar subquery that locks the buckets of the keys in
// the text[] parameter keys, each in the mode of the boolean[] parameter
// exclusive at the same index, in bucket order, and returns the number of
// buckets locked (>= 0).
func (w *Writer) lockKeysSQL(keys, exclusive string) string {
	c := w.lockClass
	return `(SELECT count(CASE WHEN l.x THEN pg_advisory_xact_lock(` + c + `, l.b)::text ELSE pg_advisory_xact_lock_shared(` + c + `, l.b)::text END)` +
		` FROM (SELECT (hashtextextended(u.k, ` + strconv.Itoa(keyLockSeed) + `) & ` + strconv.Itoa(keyLockBuckets-1) + `)::int AS b, bool_or(u.x) AS x` +
		` FROM unnest(` + keys + `::text[], ` + exclusive + `::boolean[]) AS u(k, x) GROUP BY 1 ORDER BY 1) AS l)`
}

// lockCond returns a boolean SQL condition, always true, that takes the
// locks, and args with its parameters appended (numbered after args'
// own). One key — the common case: an Enqueue, a row's captured event —
// is one pg_advisory_xact_lock call on one text parameter (keyLockSQL);
// several are the lockKeysSQL subquery over two array parameters, which
// costs the server an unnest, a sort and an aggregate on every statement
// (BenchmarkKeyLockForms measures both: BENCHMARKS.md, "Producer").
// Both lock the same bucket for a key, so
// writers of either form serialize with each other and with keyLockSQL's
// users.
//
// scan is true when the statement reads rows (INSERT … SELECT … FROM
// unnest(…)): a condition with a volatile function and no column would be
// evaluated for every row there, so the single call is wrapped in a
// scalar subquery, which PostgreSQL evaluates once, before the first row
// (an InitPlan), as it does lockKeysSQL's.
func (w *Writer) lockCond(l keyLocks, args []any, scan bool) (string, []any) {
	if len(l) == 1 {
		for k, excl := range l {
			args = append(args, k)
			cond := w.keyLockSQL(w.d.placeholder(len(args))+"::text", !excl)
			if scan {
				cond = "(SELECT " + cond + ")"
			}
			return cond, args
		}
	}
	keys, excl := l.args()
	args = append(args, keys, excl)
	return w.lockKeysSQL(w.d.placeholder(len(args)-1), w.d.placeholder(len(args))) + " >= 0", args
}

// keyLockSQL (internal/outbox.KeyLockSQL) returns a boolean SQL condition, always true, that takes the
// advisory lock of the ordering key keyExpr (a SQL text expression) on
// PostgreSQL: shared for an event whose key is its row's own key and whose
// row the statement locks (internal/capture's Spec.RowKeyed), exclusive
// otherwise. A statement that writes an event itself, without the Writer, puts it where
// it is evaluated before the event's sequence value is drawn: the WHERE
// clause of "INSERT INTO outbox … SELECT … FROM … WHERE <cond>". See the
// comment at keyLockBuckets for why.
func (w *Writer) keyLockSQL(keyExpr string, rowKeyed bool) string {
	return outboxsql.KeyLockSQL(w.lockClass, keyExpr, rowKeyed)
}
