// Package pgnotify wakes relays with PostgreSQL LISTEN/NOTIFY.
//
// Writers NOTIFY inside the events' own transaction (Wakeup implements
// wakeup.TxSignaler, which gormcapture's captured writes and Enqueue use):
// the server delivers the notification when the transaction commits and
// drops it when it rolls back, so a relay learns of a commit about as fast
// as the commit itself, and never of a rollback. A transaction NOTIFYs each
// topic once; the payload is the topic name only, never event data
// (NOTIFY payloads are limited to 8000 bytes).
//
// Relays LISTEN on one dedicated connection per Wakeup value, shared by all
// the relays of the process. When it drops — or stays silent for
// Config.HealthCheck and then does not answer a ping within it, as a
// connection to a server behind a middlebox that keeps TCP up does — it is
// reopened with back-off (a WARN per failure, an ERROR from the fifth in a
// row on) while the relays are told to poll. A new listening connection
// proves that notifications reach it with a NOTIFY on a channel of its own
// (herald_probe_ and random hex), never on the shared channel, which
// carries topic names only. LISTEN needs a direct or session-pooled
// connection: through a transaction-pooling proxy (PgBouncer
// pool_mode=transaction) the probe never arrives, Listen returns an error
// matching envelope.ErrUnsupported and the relays keep polling — point the
// Wakeup at the server, or at a session-mode pool, even when the
// application's own connections go through the proxy.
//
// Give one Wakeup value to both the writer side and the relays:
//
//	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn})
//	defer w.Close()
//	db.Use(gormcapture.New(gormcapture.Config{Wakeup: w}))
//	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w})
//
// # Throughput: NOTIFY serializes commits
//
// PostgreSQL takes one server-wide lock for every transaction that
// NOTIFYs and holds it until the commit is flushed, so notifying
// transactions commit one at a time and never share a WAL flush: their
// rate is capped near one per flush time. Where that matters (many
// concurrent writers, a disk slow to flush), give the writers
// w.AfterCommit() instead of w: they NOTIFY after commit, coalesced, from
// the Wakeup's own connection, and never wait on the lock; the relays
// keep listening on w. BENCHMARKS.md has the figures.
package pgnotify
