// Package admin inspects and repairs a herald outbox table: the Go API for
// an operator's tools, and an HTTP handler (a JSON API and a small page)
// built on it. A CLI can sit on the same API.
//
// Why a package of its own, beside relay rather than in it: the admin
// acts on a table, not on a running relay — a process with no relay of
// its own (a CLI, an admin service) uses it as well — and its HTTP
// handler and page would weigh on every program that only relays.
// It reuses the relay where the relay already owns a statement: Retry goes
// through relay.Relay.RetryDeadLettered (of Config.Relay, or of a relay
// the Admin makes and never starts).
//
// # The Go API
//
//	adm, err := admin.New(admin.Config{DB: db, Relay: r}) // or Config{DB: db, Table: "herald_outbox"} without a relay
//
// List returns a page of events by State — StateDead (out of attempts,
// holding back their key's later events), StateFailed (pending after at
// least one failed delivery), StatePending (not yet delivered) — narrowed by
// topic patterns ("billing.*"), ordering key, tenants (Query.Tenants: the
// outbox's tenant column, each Event's Tenant), a created_at range and a
// text of last_error, in sequence order; Page.Next is the keyset cursor for the
// next page (Query.After), so a deep page costs what the first does. Get
// returns one event with its state, attempts and last error, and the count
// and first HeldBackShown of the events its key holds back.
//
// Retry makes the dead letters a Query selects due again (attempts reset),
// ahead of their keys' later events. Discard deletes them in batches of
// 1000, releasing their keys, and returns the count; both log what they did
// and the Query through Config.Logger. They take dead letters only.
// RetryBatches and DiscardBatches are the same with a batch size and a
// Progress callback, for a million dead letters: each batch is taken by
// keyset on the sequence (the primary key, so the millionth batch costs
// what the first does) and committed on its own; when ctx ends, the batch
// in hand rolls back and the same call continues where it stopped. Count
// says how many events a Query selects, LastSequence where the table
// ends, and Follow calls a function with each new event (StateAll selects
// every event, published history included). The herald command's dead,
// events and tail subcommands are built on these.
//
// Backlog counts, per topic, the pending events, the age of the oldest and
// the dead letters, in one statement grouped by topic, and tells which
// topics are paused; BacklogByTenant counts the same per tenant. Both
// count what Config.Relay delivers (its Topics / ExcludeTopics and
// Tenants, as its own BacklogByTopic and BacklogByTenant), the whole
// table without a Relay.
//
// Pause records a topic in the table of paused topics ({base}_paused,
// created by envelope.Migrate at schema version 5). Every relay of the
// table reads it in its lease: from its next poll on it leases none of the
// topic's events, and none of the events queued behind them in their
// ordering keys, so per-key order is kept; nothing is attempted, so nothing
// is dead-lettered. Events already leased when the pause commits are still
// delivered. Resume deletes the record; the relays lease the topic again
// at their next poll. A relay built by this release requires the table
// (relay.New reports a table not migrated that far as
// envelope.ErrConfiguration).
//
// A bad argument — an unknown State, a bad topic pattern, Until not after
// Since, a Limit out of range, an empty topic to pause — is an
// envelope.ErrValidation error (an *envelope.Error naming the field, such
// as "admin.Query.State"); nothing runs. A missing DB, or a table that is
// not there, is an envelope.ErrConfiguration error from New.
//
// # The HTTP handler
//
// NewHandler serves the API as JSON under api/ and a page at its root:
// the backlog per topic with pause and resume, and the dead letters with
// their error and payload, filters, and retry and discard (one, or every
// one the filter selects), each asking for confirmation. The page is
// rendered on the server by html/template, with no build step and no
// external asset. See Handler for the routes and the protections:
// HandlerConfig.Authorize is required (the handler has no auth of its
// own; it is told reads from writes), every POST must be same-origin and
// carry the page's secret form token or, for the JSON API, the
// X-Herald-Request header; payloads and errors are escaped text, and the
// page's Content-Security-Policy allows no script but its own.
package admin
