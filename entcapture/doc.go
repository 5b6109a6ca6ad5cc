// Package entcapture captures ent writes into herald's outbox: every
// mutation of a captured schema writes one event per affected row in the
// write's transaction, with the same envelope, topic and ordering key as
// gormcapture gives the same change. An event is delivered at least once
// if and only if its transaction commits.
//
// Three pieces, each installed once:
//
//   - Mixin declares capture on a schema (or on a helper every schema
//     uses): func (Loan) Mixin() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(envelope.Options{…})} }.
//   - entcapturegen.Extension (package
//     github.com/heraldgo/herald/entcapture/entcapturegen), added to the
//     code generation in entc.go (entc.Extensions(entcapturegen.Extension())),
//     generates the typed glue a generic hook lacks — table and column
//     names, the id, .Sensitive() fields (left out of events unless named
//     in Options.Fields), typed row scans, the foreign keys whose ON DELETE
//     reaches captured rows, the join tables of plain many-to-many edges —
//     and enables the sql/execquery and sql/upsert features. It is a
//     package of its own so that only entc.go links ent's code generator:
//     a service importing entcapture links no entgo.io/ent/entc package
//     (TestNoCodeGenerator). entc.go needs //go:build ignore, and
//     generate.go must run it (//go:generate go run -mod=mod entc.go): the
//     line ent new writes runs ent's CLI, which never runs extensions; a
//     captured write of code generated that way fails with
//     envelope.ErrConfiguration saying so. It fails `go generate` naming
//     the schema and option for an unknown column in Fields or Exclude, a
//     schema on the outbox table, or a view, and naming the release on an
//     ent release whose CreateBulk template is not the one (v0.14.5's) the
//     extension overrides to make a captured CreateBulk one scope.
//   - Driver wraps the client's driver: a captured write made without a
//     transaction runs, with its events, in a transaction the hook opens
//     and the wrapper routes the write's statements into. Without it such a
//     write fails with envelope.ErrConfiguration and writes nothing. Its
//     Config names the outbox table, the default namespace, the Wakeup and
//     per-schema Options (a key that is no captured schema's Go name, or a
//     second Config, is found by Driver itself: CaptureDriver.Err returns
//     the envelope.ErrConfiguration naming it, and every statement on the
//     driver, the migration first, and every Enqueue fail with it). client.Debug() keeps it (the
//     hook finds it under ent's dialect.DebugDriver). enttest.Open, like
//     ent.Open, adds a driver of its own after its options, which replaces
//     an ent.Driver option: in tests use
//     enttest.NewClient(t, enttest.WithOptions(ent.Driver(entcapture.Driver(…)))).
//
// The program must import the generated ent/runtime package: it installs
// schema hooks (without it ent itself fails the write with "uninitialized
// hook (forgotten import ent/runtime?)").
//
// # What each write captures, and how
//
//   - Create: the row as the database stored it. That is the entity ent
//     returns (no statement besides the INSERT; optional fields the create
//     leaves unset are null) unless the row may hold other values: a
//     column with a database default (entsql.Default, DefaultExpr) the
//     create leaves unset, or on PostgreSQL a time finer than its column
//     keeps (microseconds; timestamptz(3), declared by SchemaType, keeps
//     milliseconds — mixin.Time's fields carry time.Now's nanoseconds).
//     A field whose SchemaType declares, for the client's dialect, an
//     array, a range, json/jsonb or a geometric type (field.Other("tags",
//     pq.StringArray{}) as text[]) is in that type's JSON form (jsonform's
//     package doc lists them); entcapturegen writes those types into
//     Schema.Types, and such a schema's creates are not fused.
//     Such rows are read back by id, one SELECT for a whole CreateBulk, or
//     rendered from the fused statement's RETURNING (below). On PostgreSQL
//     through Driver (without a caller transaction, or in client.Tx of a
//     client opened on Driver) ent's INSERT and the event are one
//     statement — WITH "herald_row" AS (INSERT … RETURNING "id"),
//     "herald_event" AS (INSERT INTO the outbox … FROM "herald_row") —
//     with neither a savepoint nor a transaction of the hook's: the event
//     is rendered before the INSERT from the values the entity will hold,
//     the generated id (and the columns whose stored value may differ, as
//     above, when the driver is pgx's and time.Local is UTC; otherwise the
//     create is not fused) spliced in by the statement. A create with edges,
//     an upsert, a schema with hooks after the capture hook, or Options
//     with Extend, ExtendMany, TopicFunc or OrderingKeyFunc is captured
//     the other way (INSERT, then the event INSERT).
//   - CreateBulk: every item, with one event INSERT for the bulk (ent runs
//     the items' hooks nested; the generated CreateBulk marks its context so
//     they share one scope).
//   - A delete that a hook after the capture hook turns into an update
//     (ent's soft-delete mixin listed after entcapture.Mixin: it sets the
//     op to an update and runs the mutation through the client) is
//     captured as that update, once, as it is when the mixin comes first.
//   - Update by predicate: ent's UPDATE runs with a RETURNING of the after
//     images, which entcapture.Driver adds (ent is handed the row count the
//     UPDATE itself reports); in BeforeAndAfter mode the rows are read
//     first with SELECT … FOR UPDATE (on SQLite after taking the write
//     lock) and the write is pinned to exactly those ids (WhereP, the ids
//     bound as one JSON array whatever their number), so rows
//     that appear concurrently are neither written uncaptured nor captured
//     unwritten; in After and Keys mode the UPDATE itself locks and returns
//     the rows it writes (an update that also writes captured edges reads
//     the ids first). UpdateOne reads first only in BeforeAndAfter mode. In
//     a caller transaction on a client not opened on Driver (no wrapper to
//     add RETURNING) the rows are read locked first and the after images
//     read by id after the write, narrowed by the predicates schema hooks
//     after the capture hook add (a tenant's WhereP): only the rows the
//     UPDATE wrote have events. "changed" lists every column the UPDATE
//     sets: the mutation's fields (those schema hooks set included), the
//     foreign keys of edge setters, and the columns of its modifiers
//     (Modify, AppendX). An update that sets no column of its own
//     (UpdateOne(p).AddFollowing(q), UpdateOneID(k) with nothing set), for
//     which ent sends no UPDATE, has no event of its row; the join rows
//     and children its edge setters write have theirs.
//   - Delete, DeleteOne: ent's DELETE runs with a RETURNING of the before
//     images (their ids only in Keys mode); when the delete cascades to
//     captured rows, or without the wrapper, the rows are read locked
//     right before ent's DELETE runs instead — in the generated delete,
//     after every hook, so with the predicates a later hook adds (a
//     tenant's WhereP) — and the delete pinned to them. A delete that
//     never runs (a later hook turns it into an update) has no events.
//   - ON DELETE CASCADE / SET NULL (entsql.OnDelete, and ent's defaults as
//     the migrated tables have them): the rows of captured schemas the
//     database will delete or null, read locked with the rows above, one
//     statement per foreign key per level, recursively, also through
//     tables that are not captured; one event per row (a row reached
//     twice, through a self-referencing tree or two foreign keys, is
//     deleted once; a row deleted and nulled is deleted; a row nulled
//     through two keys is one update of both columns). A schema that is
//     not captured but whose deletes reach captured rows this way gets
//     CascadeHook, which the generated client installs: its deletes then
//     capture those rows, and so need Driver or a transaction like a
//     captured write (without them they fail with
//     envelope.ErrConfiguration and delete nothing). ON DELETE or ON
//     UPDATE SET DEFAULT (entsql.SetDefault) into a captured schema is not
//     followed, and go generate refuses it (envelope.ErrUnsupported naming
//     the schema and the foreign key): use SetNull or Cascade.
//   - Upserts (OnConflict…): a conflicting row is an update (its changed
//     columns those the conflict action sets), a new one an insert, a row
//     skipped by DoNothing or an UpdateWhere nothing; Ignore is ent's
//     DO UPDATE SET id = id, which writes the row: an update with equal
//     images, changed naming the columns set (as gormcapture) — with the
//     ids the database holds, even where ent's bulk upsert returns shifted
//     ids under DO NOTHING. Through Driver the INSERT itself says which,
//     row by row, also for an upsert without conflict columns
//     (OnConflict().DoNothing(), on SQLite also Ignore() and a DO UPDATE)
//     and one whose update has a WHERE (sql.UpdateWhere): the wrapper adds
//     to its RETURNING the event columns and, on PostgreSQL, "(xmax = 0)"
//     (true for an inserted row) and, in BeforeAndAfter mode, the
//     conflicting row as the statement locked it (the conflict action's
//     WHERE keeps it in a transaction-local setting, herald.before, that
//     the row's RETURNING reads), so nothing is read before or after it,
//     and an upsert that waited on another transaction's insert of its
//     key is an update of the row that transaction committed; on SQLite,
//     which has no xmax, the row's rowid: a row is inserted when its
//     rowid is beyond the table's largest read under the write lock
//     before the statement, or is an explicit integer id no row had (no
//     other writer can come between: SQLite has one), and in
//     BeforeAndAfter mode the rows the conflict columns find are read
//     under that lock as the before images. In a caller transaction on a
//     client not opened on Driver the rows the new ones conflict with are
//     read locked before the INSERT and read again after it by conflict
//     key and by id (an action may set a conflict column). A conflict
//     clause herald cannot classify fails with envelope.ErrUnsupported
//     naming the schema, and writes nothing: ON CONSTRAINT or a partial
//     index target; on SQLite, an update of the primary key, or in
//     BeforeAndAfter mode a DO UPDATE that changes columns but names no
//     conflict columns (the rows it replaces are unknown before it); in a
//     caller transaction of a client not opened on Driver, an upsert
//     without conflict columns or with UpdateWhere.
//     Concurrent upserts of one new key in client.Tx of a client NOT
//     opened on Driver (PostgreSQL): the rows the upsert conflicts with
//     are read before its INSERT, at READ COMMITTED in a snapshot of their
//     own; a row another transaction inserted and has not committed yet is
//     invisible to it, the INSERT then waits for that transaction and
//     updates its row, and the event says inserted, without the replaced
//     row. The capture cannot see that INSERT's outcome without the
//     wrapper. Open the client on Driver (the INSERT classifies its own
//     rows), or run such transactions at REPEATABLE READ or SERIALIZABLE:
//     PostgreSQL then fails the upsert with a serialization failure
//     ("could not serialize access due to concurrent update") instead of
//     updating a row its snapshot cannot see, and a retry captures it
//     right.
//   - Edge schemas (edge.To(…).Through(…)), with an id or a composite id
//     (field.ID("user_id", "group_id"), keyed by both columns): their rows
//     written through their own client are captured like any schema's; the
//     join rows that edge setters write past every hook (AddGroups,
//     RemoveGroups, ClearGroups, on create and update; both rows of a
//     bidirectional edge) are read before and after the write and captured
//     as inserted and deleted rows of the edge schema.
//   - Plain many-to-many edges between two captured schemas: their join
//     table is captured as a model named as the table (user_tags), keyed
//     by both foreign keys, its image both columns — as gormcapture
//     captures the join table of a many2many:user_tags relation — from
//     the setters of either side and from the cascades of a delete. Its
//     Options are Config.Options["user_tags"] when set, else those of the
//     schema that declares the edge (edge.To) as far as they apply to a
//     join row: Payload, Operations, Namespace, Unordered, Topic and
//     OrderingKey.
//   - Tables in another database schema: the capture's own statements
//     qualify each table with the client's SchemaConfig (ent's
//     sql/schemaconfig feature, which entsql.Annotation{Schema: …} fills
//     by default and ent.AlternateSchema at run time), or without that
//     feature with the annotation's schema — on PostgreSQL. On SQLite ent
//     writes no schema into its statements (a table of a database
//     ATTACHed under any name is found by its own name), and neither does
//     the capture.
//   - Edge setters on the side without the foreign key (user.AddPets,
//     ClearPets, a bidirectional one-to-one's other row) update rows of
//     another captured table past every hook: the rows they can touch are
//     read before (locked) and after, and each row whose foreign key
//     changed is captured as an update of that column. A setter on the
//     side with the foreign key (SetOwner, ClearOwner) is an update of the
//     row's own column, listed in "changed".
//
// Images say what the row holds as stored: null where the column is NULL,
// also for a field whose Go type has no null (an optional, non-Nillable
// UUID edge field); the column's default where the create left a field
// unset; a time at the column's precision (timestamptz(3) drops what the
// Go value had beyond milliseconds); a time.Duration as the integer
// nanoseconds its column holds (as gormcapture, so both ORMs give the
// same bytes for one row); and a field whose driver.Valuer does not
// read back what it wrote as the column returned it — but for a row
// reached only by a cascade or an edge setter, whose image is built from
// the Go values the capture's snapshot scanned: there such a Valuer shows
// what its Value method returns.
//
// The capture's reads and pins by keys — a bulk write pinned to the rows
// read before it, the rows a cascade reaches, join rows, the children of
// an edge setter, the rows an upsert conflicts with — bind their keys,
// single or composite, as ONE JSON parameter (json_each on SQLite,
// jsonb_populate_recordset on PostgreSQL, JSON_TABLE on MySQL), so they
// work at any number of rows (beyond SQLite's 32766 and PostgreSQL's and
// MySQL's 65535 bind parameters) and cost one parameter, not one per row.
//
// Each bulk write costs the same number of statements whatever its number
// of rows: at most one snapshot statement (two for an upsert in a caller
// transaction of a client not opened on Driver; through Driver none on
// PostgreSQL, and on SQLite one read of the largest rowid plus, in
// BeforeAndAfter mode, one of the conflicting rows), the write, one
// multi-row event INSERT.
//
// # Transactions
//
// entcapture.Enqueue and EnqueueMany write in the transaction of the
// Conn they are given: an *ent.Tx or its client (tx.Client(), m.Client()
// in a hook of a write in client.Tx) in a savepoint of it, on the Driver's
// Config.Table; in a schema hook of a captured write made outside
// client.Tx (which runs inside the capture hook), in the write's own
// transaction — the events commit or roll back with the row. A hook that
// runs before the capture hook (client.Use, a mixin listed before
// entcapture.Mixin) runs before that transaction exists; there Enqueue
// writes in a transaction of its own.
//
// In the caller's *ent.Tx the capture takes a savepoint: an event that
// fails (an Extend that returns an error, a bad value) rolls the write back
// to it, the error is returned, and the transaction stays usable. A
// fused Create (above) needs none: its one statement writes both or
// neither, and a database error fails the transaction as the same create
// without capture would. The
// Wakeup is signalled after the outermost commit (never after a rollback);
// a wakeup.TxSignaler is signalled inside the transaction.
//
// On SQLite, where preparing a statement costs about as much as running
// it, the event INSERT and the row INSERTs ent sends in the transaction
// Driver opens run as statements Driver prepares once per connection and
// keeps (at most 64), unless the pool sets MaxOpenConns: preparing takes a
// second connection, which such a pool may not have while the write holds
// one.
//
// # MySQL and MariaDB
//
// On ent's dialect.MySQL (MySQL 8.0 and MariaDB 10.6+; one code path
// for both, exercised on MariaDB 10.11) every write above is captured,
// with the same envelope bytes as on PostgreSQL and SQLite for the same
// row. MySQL has no RETURNING, so Driver adds nothing to ent's
// statements and the rows are read around each write in its
// transaction, as on a client not opened on Driver: an update's and a
// delete's rows (and those its cascades and edge setters reach) are read
// with SELECT … FOR UPDATE before it, the write pinned to them, and an
// update's after images read by key after it; a create holding a time
// with a fraction of a second is read back by id (a DATETIME or TIMESTAMP
// column keeps none unless declared with more; MySQL rounds, MariaDB
// truncates). An upsert (ON DUPLICATE KEY UPDATE, which names no conflict
// target: the database conflicts on any unique key) needs its conflict
// columns named with OnConflictColumns(…), or every row's id set; the rows
// holding those values are read FOR UPDATE before the INSERT and again
// after it: found before — updated (skipped under DoNothing or Ignore),
// found only after — inserted. At REPEATABLE READ, both servers' default,
// the locked read of a missing key holds InnoDB's gap lock until the
// commit, so a concurrent upsert of the same new key waits (or fails with
// a deadlock, 1213, to retry) and is then classified updated; at READ
// COMMITTED there is no gap lock, and such a race is classified
// inserted. A row conflicting on another unique key than the named one
// is not seen. UpdateWhere is refused (MySQL's upsert has no WHERE). An
// UPDATE setting the values a row already holds counts, in what ent
// returns, as MySQL's affected rows do (rows changed, unless the DSN sets
// clientFoundRows): 0 for that row, with or without capture; the row
// matched and was locked, so it has its updated event, as on PostgreSQL
// and SQLite.
// Every set of keys — the rows a write is pinned to, those a cascade or
// an edge setter reaches, join rows, an upsert's conflict values — is ONE
// JSON parameter through JSON_TABLE at any size (integers as BIGINT,
// strings compared under utf8mb4_bin, ent's default collation on MySQL; a
// key that is neither, such as bytes or a time, is bound per value). In
// a read, `col IN (SELECT … FROM JSON_TABLE(?, …))` is a semi-join the
// JSON table drives, reaching each row by the key's index, so FOR UPDATE
// locks the rows reached and no others; an OR of key sets is one
// semi-join over a UNION of per-set semi-joins (an OR of semi-joins would
// scan the table). A pinned UPDATE or DELETE is run by Driver as a
// multi-table statement joined to the key set (`UPDATE t JOIN
// JSON_TABLE(?, …) AS k ON t.id = k.c0 SET …`): a single-table UPDATE or
// DELETE cannot use a semi-join on MariaDB before 11.1 and would
// evaluate the subquery once per row it scans. Without Driver (a caller
// transaction on a client not opened on it) the pinned write keeps the
// subquery form: correct, but slow for large sets on those servers.
//
// # Not captured
//
// Statements that bypass ent's hooks: raw SQL, among it the
// ExecContext and QueryContext methods of the generated Client and Tx that
// the sql/execquery feature adds (the extension turns the feature on for
// its own statements: it also gives every caller a way to write rows no
// event records); rows of tables that are not captured; join rows of a
// plain many-to-many edge with an uncaptured side; views.
package entcapture
