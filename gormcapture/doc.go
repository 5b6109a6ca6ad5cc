// Package gormcapture is herald's GORM plugin: it captures every GORM write
// to a captured model and writes one outbox event per affected row in the
// same transaction, and it lets a service enqueue its own events
// (Enqueue, EnqueueMany) with wakeups sent after the commit.
//
// Guarantee: a row written through GORM to a captured model commits if and
// only if its event commits — a capture that fails undoes its write, inside
// the caller's transaction too.
//
// # Usage
//
//	type Loan struct {
//		ID       int64
//		Status   string
//		Fee      decimal.Decimal `gorm:"type:numeric(10,2)"`
//		ReaderID int64
//		Secret   string `herald:"sensitive"` // left out of events unless named in Fields
//	}
//
//	func (Loan) ChangeCapture() envelope.Options {
//		return envelope.Options{Payload: envelope.BeforeAndAfter}
//	}
//
//	db, _ := gorm.Open(postgres.Open(dsn))
//	sqlDB, _ := db.DB()
//	_ = envelope.Migrate(ctx, sqlDB, envelope.Postgres, "") // the outbox table
//	err := db.Use(gormcapture.New(gormcapture.Config{
//		Namespace: "library",                 // topics library.loan.updated, label library.Loan
//		Models:    []any{&Reader{}, &Loan{}}, // validated now; their constraint tags reveal DB cascades
//		Wakeup:    w,                         // optional
//	}))
//
// A model declares capture with ChangeCapture (on itself or on an embedded
// base struct: one declaration covers every model built on it, each under
// its own name), or is registered without touching it with
// Plugin.Capture; Config.CaptureAll captures every other model written
// through GORM (models declared inside functions and the join tables GORM
// generates too), each from its first write. Declarations are checked when
// the plugin is installed (and by Capture): an unknown column in Fields or
// Exclude, an unknown template name, or a model whose table is the outbox
// is an envelope.ErrConfiguration naming the model and the option. So is
// a captured model without a key (Capture after db.Use, db.Use for one
// captured before it or declaring ChangeCapture in Config.Models): give a
// many-to-many join model without primary-key tags to db.SetupJoinTable
// first (see below).
//
// # What is captured
//
// Create, Save, FirstOrCreate, CreateInBatches and CreateBatchSize, maps
// and slices of maps; Update, Updates (struct or map, with Select/Omit),
// UpdateColumn(s), with any Where; Delete by key or conditions; soft deletes
// (gorm.DeletedAt: an "updated" event with changed ["deleted_at"]);
// Unscoped().Delete; Select(clause.Associations).Delete; the rows the
// database itself deletes or nulls through ON DELETE CASCADE / SET NULL / SET DEFAULT
// constraints declared in the models' constraint tags (read, locked, before
// the delete, recursively), and the rows whose foreign key it rewrites
// through ON UPDATE CASCADE / SET NULL / SET DEFAULT when an update changes the columns
// they reference (read, locked, before the update and again by key after
// it; an "updated" event with changed = the foreign-key columns, only for
// rows whose key did change); upserts with clause.OnConflict (a conflicting
// row as "updated", an inserted one as "inserted", a skipped one not at
// all); rows of a many-to-many join model given to db.SetupJoinTable
// (Association Append, Replace, Delete, Clear) — one without primaryKey
// tags, like GORM's PersonAddress example, is keyed by its foreign-key
// columns (which identify a row only if the table has a unique constraint
// on them); UPDATE … FROM (clause.From), its before images read through
// the FROM's tables; writes to db.Table(…); and the generic API
// (gorm.G[T]). "changed" lists the columns the caller set, not those GORM
// adds itself (autoUpdateTime, an optimistic-lock version), in table order.
//
// A write that names a table and no model — db.Table("users").Create(map),
// db.Table("users").Where(…).Update / Updates(map) / UpdateColumn(s),
// db.Table("users").Where(…).Delete(nil), and the map-only statements GORM
// builds itself (gorm.G's many2many association updates:
// Table("languages")…Updates(map)) — is captured as a write of the
// captured model whose table it names: one seen by the plugin (Config.Models,
// Capture, or a first write; under CaptureAll, any keyed model written
// before), the first one seen when two share the table (Config.Models in
// their order, then Capture, then first writes). GORM builds the statement
// exactly as without the plugin (no autoUpdateTime, no soft delete: a
// Delete through db.Table is a hard delete, its event "deleted"), and the
// caller's maps get what GORM gives them (on SQLite "@id"). Only a plain
// table name counts: an alias ("users u"), a schema-qualified name, a
// subquery, or a table no captured model has is not captured.
//
// Snapshots are set-based: a statement of N rows costs the statement, one
// locking SELECT when the mode needs the rows as they were
// (BeforeAndAfter, or a delete the database cascades; on PostgreSQL an
// update reads them in a FOR UPDATE subquery of the UPDATE itself), and
// one multi-row event INSERT — never a query per row. A set of keys the
// plugin reads rows by (the children a cascade reaches, an upsert's
// conflicting rows on SQLite, the rows an UPDATE … RETURNING changed or
// moved, read again) is ONE bind parameter whatever the number of rows:
// on PostgreSQL a JSON array read with json_populate_recordset(NULL::t,
// $1::json), whose row type gives each value its column's type (text,
// integer, uuid, timestamp: the column's input function reads it, as a
// bound value), on SQLite a JSON array read with json_each, a time as
// the text the driver writes for it (its format learnt once, binding a
// time in SELECT ?) (MySQL: see below). A key JSON cannot carry as the
// same value (bytes; times through a SQLite driver of an unknown format)
// is bound per value instead, in chunks under the databases' limits. The plugin's own
// statements (event INSERTs, locks, before-reads, read-backs, NOTIFY) never
// go through GORM's PrepareStmt cache: with PrepareStmt the cache holds the
// caller's statements, as many as without the plugin. Events hold the rows
// as the database stored them (read back with RETURNING: timestamps at the
// column's precision, numerics at their scale, defaults), in one JSON form
// whatever the path: a value is rendered from the field's Go type as GORM
// reads it back, unless that would not say what the row holds — a
// Valuer that renders NULL for a stored value (a struct read back with a
// zero field) puts the stored bytes or text in the event, and a serializer
// column holding the empty string (JSON's serializer stores nil so under NOT
// NULL) is "", not null. A single-row Create on PostgreSQL writes its row and
// its event in one statement, the event's row rendered by PostgreSQL from
// the stored row, when every column has a rendering known to match
// (integers, text, booleans, uuids, floats, numerics into decimals or
// strings, json/jsonb into strings, timestamps into time.Time — timestamptz
// only through pgx with time.Local UTC; the column types are read once
// per table, by a SELECT of no rows before its first single-row Create);
// any other takes two statements. A bulk Update on PostgreSQL is one
// statement too: the UPDATE's RETURNING (with the before images from its
// FOR UPDATE subquery) feeds an INSERT … SELECT of the events rendered by
// the database in the same JSON form; on SQLite the before images go into
// a temporary table and one INSERT … SELECT writes the events (integer
// keys, integer and text columns). Models with Extend, ExtendMany,
// TopicFunc or OrderingKeyFunc, UPDATE … FROM, and ON UPDATE cascades
// build their events in Go. What the caller sees is
// what GORM shows without the plugin: RowsAffected, generated keys and
// defaults filled in, and a struct or slice never overwritten by the
// plugin's RETURNING.
//
// # Order per key, and decimals
//
// On PostgreSQL every event with an ordering key is inserted after its
// transaction took the key's advisory lock (see the envelope package), so
// for every key — the default row key, a template without {pk} such as
// "{label}", an OrderingKeyFunc, or an Enqueue with a row's key beside
// that row's captured writes — sequence order is commit order. The lock is
// taken by the event INSERT itself (for the single-row Create, by its one
// statement), so it adds no round trip; a row-keyed event takes it shared,
// so captured writes of different rows never wait on each other.
//
// A decimal column declared with a scale (`gorm:"type:numeric(10,2)"`, or a
// numeric/decimal type with `scale:2`) keeps it in events on every
// database: "12.50", "0.00", as PostgreSQL returns it, although SQLite
// stores 12.5 and 0. Values are padded, never changed: one with more
// fractional digits is in the event as the database holds it (PostgreSQL
// rounded it into the column; SQLite keeps it as given).
//
// # Transactions
//
// A write outside a transaction runs in one with its events: GORM's
// default transaction, or one the plugin opens under SkipDefaultTransaction
// (config or session). That one covers the statement and its events only:
// the model's hooks and association saves run outside it, as they run
// outside any transaction in plain GORM, so a hook that fails or panics
// after the statement leaves the write committed with its event (where
// plain GORM leaves it committed) and no transaction open; a panic during
// the capture itself (a user's Extend) rolls back the plugin's transaction,
// or GORM's default one. A write inside the caller's transaction runs in a
// savepoint, so an event that fails after its row was written undoes the
// row even if the caller catches the error and goes on, and a PostgreSQL
// transaction stays usable. Statements nested in a captured write
// (association saves, CreateInBatches batches) share its scope instead of
// taking a savepoint each. With SkipDefaultTransaction, GORM itself does
// not make associations or CreateInBatches atomic; each captured statement
// still commits with its own events.
//
// Wakeups fire after the outermost commit, once per topic, never after a
// rollback; a wakeup.TxSignaler (PostgreSQL NOTIFY) is signalled inside the
// transaction instead.
//
// # Not captured, and setup rules
//
//   - Hand-written SQL — db.Exec, db.Raw, and anything run on the *sql.DB —
//     is not captured. Write captured models through GORM's write methods.
//   - Database cascades are known only from the constraint tags of models
//     the plugin knows (Config.Models, Capture, captured models already
//     seen); constraints added by hand-written migrations are not followed.
//     ON DELETE / ON UPDATE SET DEFAULT is followed like SET NULL. An ON UPDATE
//     CASCADE into a primary-key column of a captured model (a join table
//     keyed by its foreign keys) is envelope.ErrUnsupported: the rewritten
//     rows cannot be read again by their keys; the update is undone.
//     Constraints belong to the model type that declares them: when two
//     struct types map to one table, a delete or update through one follows
//     that type's constraint tags (and those of models referring to it), not
//     the other's; a write through db.Table(another table) follows none,
//     and one that names a captured model's table and no model follows
//     that model's (the one it is captured as).
//   - A model without a primary key (and not a join model as above) cannot
//     key its events: declaring it (Capture, ChangeCapture listed in
//     Config.Models) is an envelope.ErrConfiguration from Capture or
//     db.Use (a ChangeCapture model no declaration names, at its first
//     write), and CaptureAll leaves it uncaptured, logging a warning once.
//     Give a join model to db.SetupJoinTable before Capture and db.Use.
//   - Column values are in jsonform's forms; a column whose type: tag (or
//     data type) declares an array, a range, json/jsonb or a geometric
//     type is in that type's form (jsonform's package doc lists them), and
//     such a model's events are written from Go, not by a fused statement.
//     So is a column whose field declares no type (a string, []byte or
//     named string field, no type: tag) when the table has such a type in
//     the database (a hand-written migration's jsonb, text[], int4range,
//     point; SQLite's declared json or jsonb; MySQL's JSON and spatial
//     types, MariaDB's JSON, a LONGTEXT with a json_valid check): a string
//     field on a jsonb column is the embedded JSON, not a JSON string
//     holding it. The plugin reads those types from the catalog
//     (PostgreSQL: pg_attribute of to_regclass(table), as the connection's
//     search_path resolves it; SQLite: pragma_table_info; MySQL:
//     information_schema.COLUMNS) with one statement per table name: when
//     the model is registered (Config.Models at db.Use, Capture) if the
//     table exists then, otherwise in the transaction of its first
//     captured write (on SQLite after taking the write lock); never per
//     write, and never again for that table (a column altered later keeps
//     the type first read; tables of one name in several schemas are
//     taken to have one type). A type: tag always wins.
//   - Savepoints are tracked from the SQL that creates, rolls back to and
//     releases them (db.SavePoint, db.RollbackTo, nested Transaction, or
//     db.Exec of SAVEPOINT / ROLLBACK [TRANSACTION] TO / RELEASE), names
//     matched as the database matches them (without case on SQLite and
//     unquoted on PostgreSQL).
//   - Enqueue outside a transaction writes through the pool a captured
//     Create would use: with dbresolver, its source (for the outbox table),
//     not the pool given to gorm.Open. A transaction begun without
//     Clauses(dbresolver.Write) is on the pool given to gorm.Open, for its
//     captured writes and its Enqueue alike (dbresolver's rule).
//   - Call db.Use(gormcapture.New(...)) right after gorm.Open, before
//     registering dbresolver (so its sources are wrapped too) and before
//     deriving sessions. A transaction begun on a pool the plugin does not
//     wrap — inside db.Connection, on a session derived before db.Use, or
//     dbresolver registered first with Clauses(dbresolver.Write) before
//     Begin/Transaction — still gets its events (they are written in it), but
//     its commit cannot be seen: its wakeup is left to the relays' polling
//     and a warning is logged once.
//   - An upsert with ON CONFLICT ... DO UPDATE on SQLite, or in
//     BeforeAndAfter mode, reads the conflicting rows first, so it needs
//     its conflict target: clause.OnConflict.Columns or, on PostgreSQL,
//     OnConstraint naming a unique or primary-key constraint (its columns
//     are read from the catalog, one query per such upsert; with UpdateAll
//     GORM fills Columns with the primary key, but the constraint is what
//     the database uses, and so does the plugin); an
//     UPDATE that moves rows to new primary keys in BeforeAndAfter mode is
//     supported for one row at a time on SQLite (on PostgreSQL the UPDATE
//     returns each row's old values beside its new ones: any number); with
//     clause.Returning, for up to 30,000 key columns' worth of rows (the
//     caller's rows are read again by their new keys). All are
//     envelope.ErrUnsupported otherwise.
//   - On SQLite, a captured write that reads before it writes (BeforeAndAfter,
//     upserts, cascades) upgrades its transaction from reader to writer; under
//     concurrent writers use _txlock=immediate in the DSN so the upgrade waits
//     instead of failing with SQLITE_BUSY.
//   - Create(slice of maps) without a pointer fails in plain GORM with a scan
//     error; captured, it succeeds and fills in the generated keys.
//   - PostgreSQL, SQLite and MySQL/MariaDB (gorm.io/driver/mysql: MySQL
//     8.0+ and MariaDB 10.6+, tested on MariaDB 10.11) only; any other
//     dialector is envelope.ErrUnsupported at db.Use.
//
// # MySQL and MariaDB
//
// MySQL has no RETURNING (MariaDB's covers INSERT and DELETE only), so on
// MySQL the plugin captures around GORM's own statement rather than inside
// it, in the write's transaction: a create runs GORM's own INSERT (whose
// LAST_INSERT_ID, or MariaDB RETURNING, fills the model exactly as without
// the plugin) and reads the rows back by key FOR UPDATE; an UPDATE or
// DELETE first reads the rows its WHERE selects FOR UPDATE in key order
// (the before images and keys), runs, and an UPDATE's rows are read again
// by key (the after images). An upsert (ON DUPLICATE KEY UPDATE, which
// conflicts on any unique key of the table) first reads, FOR UPDATE, the
// rows holding any of its unique values, taking InnoDB's gap locks on the
// missing ones at REPEATABLE READ: a row found there is updated when its
// values changed and skipped (no event: MySQL does not write it) when they
// did not; any other row is inserted. The server's affected-rows count
// (1, 2, 0 per row; 1 for an unchanged row under CLIENT_FOUND_ROWS) must
// agree with what the locked reads saw, else the write fails with
// envelope.ErrUnsupported rather than emit wrong events (at READ
// COMMITTED, which takes no gap locks, a concurrent insert can cause
// this). GORM's RowsAffected stays the server's (an UPDATE counts changed
// rows only), while an event is written for every row the UPDATE matched,
// as on PostgreSQL. An UPDATE that sets a key column to an expression is
// envelope.ErrUnsupported on MySQL.
//
// Every set of keys the plugin reads by on MySQL — an UPDATE's rows after
// it, a create's rows read back, the children a cascade reaches, an
// upsert's rows by unique value — is ONE JSON parameter through
// JSON_TABLE whatever the number of rows, never a parameter per row:
// `(t.id) IN (SELECT k.c0 FROM JSON_TABLE(?, '$[*]' COLUMNS(c0 BIGINT
// PATH '$[0]')) AS k)`, which both servers run as a semi-join the JSON
// table drives, reaching each row by the key's index (so FOR UPDATE locks
// those rows, not the table). A string key column of the JSON table takes
// the character set and collation of the table's column (read from
// information_schema once per table; with them an upsert's unique keys):
// another character set would make the server convert the column and
// scan. The rows holding any of several unique keys (an upsert) are one
// semi-join over a UNION of per-key semi-joins. Keys that are neither
// integers nor strings (bytes, times) are bound per value.
package gormcapture
