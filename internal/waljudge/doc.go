// Package waljudge judges a change-capture run by PostgreSQL's own log of
// what changed: for each committed transaction, the row changes that the
// test_decoding logical decoding plugin reports are matched against the
// outbox events inserted in the same transaction. It needs no expectations
// written by hand and cannot be fooled by the capture code: a row that
// changed without its event is missing, an event without its row change is
// a phantom, two events for one change are a duplicate, an event of
// another operation is a wrong operation, and an image column that differs
// from what the row holds is an image mismatch.
//
// # How a run is judged
//
//  1. A cluster with wal_level=logical (Settings; internal/pgcluster's
//     Start runs one on a free port).
//  2. Setup, on the judged database before the run: a DDL event trigger
//     makes every table REPLICA IDENTITY FULL (the whole old row of an
//     UPDATE or DELETE is in the log, for before images) and writes each
//     table's primary-key columns into the log as a message (PrefixKey);
//     and a test_decoding slot.
//  3. The run writes markers into the log with pg_logical_emit_message:
//     PrefixTest (non-transactional) when a test starts, so every
//     transaction committed after it is that test's; PrefixRaw
//     (transactional) in a transaction that ran hand-written SQL, or
//     PrefixRawBegin/PrefixRawEnd (non-transactional) around hand-written
//     SQL run outside one.
//  4. Drain reads the slot (pg_logical_slot_get_changes, include-xids) and
//     feeds the Judge in log order; Report says what it found.
//
// # Matching
//
// In one transaction, the outbox's INSERTs are the events (their payload:
// model, operation, pk, before, after) and every other table's changes are
// the row changes (herald's own tables, named herald_*, are not judged).
// An event belongs to the row change of its key (pk; a composite key names
// its columns, a single one is read by the table's primary key) on a table
// its model is written to (Config.Tables). Per row and operation there
// must be as many events as changes (INSERT: inserted, UPDATE: updated —
// a soft delete is an UPDATE —, DELETE: deleted). Paired events are
// compared column by column with the row (Config.Images): the after image
// with the new row, the before image with the old one (Equal says how
// values of each type compare).
//
// Row changes without events are excluded, and listed, not counted, when
// the transaction ran hand-written SQL naming the table (the capture
// plugins document that db.Exec/db.Raw writes are not captured), or when
// the table is exempt (Config.Exempt: a documented exception such as a
// model without a primary key). Nothing else is excluded.
//
// The package knows nothing of GORM or ent: integration/gormsuite uses it
// on GORM's own test suite, and the same cluster, markers and Judge can
// judge any other suite that writes herald events on PostgreSQL.
package waljudge
