package relay

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/wakeup"
)

// Defaults of Config: what a zero field means.
const (
	DefaultBatchSize                 = 100
	MaxBatchSize                     = 10000
	DefaultMaxAttempts               = 5
	DefaultRetryBase                 = time.Second
	DefaultRetryMax                  = 5 * time.Minute
	DefaultLease                     = 60 * time.Second
	DefaultDeliveryTimeout           = 30 * time.Second
	DefaultConcurrency               = 10
	DefaultMinPollInterval           = 250 * time.Millisecond
	DefaultMaxPollInterval           = 5 * time.Second
	DefaultMaxPollIntervalWithWakeup = time.Minute
	DefaultPollMultiplier            = 1.5
	DefaultCleanupBatchSize          = 1000
	DefaultCleanupInterval           = 10 * time.Minute
)

// Config configures a Relay. The zero value of every field means its
// default; New rejects incoherent values with an envelope.ErrConfiguration
// error naming the field.
type Config struct {
	// Table is the outbox table; "" = envelope.DefaultTable (herald_outbox).
	// On PostgreSQL it may be schema-qualified ("events.outbox").
	Table string

	// Dialect of the database; "" = detected from db's driver (pgx stdlib,
	// lib/pq, mattn/go-sqlite3, modernc.org/sqlite, glebarez/go-sqlite), or
	// by asking the database when the driver is wrapped.
	Dialect envelope.Dialect

	// BatchSize is how many events one poll leases, 1..MaxBatchSize;
	// 0 = DefaultBatchSize.
	BatchSize int

	// MaxAttempts is how many failed deliveries dead-letter an event;
	// 0 = DefaultMaxAttempts. A failure marked delivery.Permanent
	// dead-letters it at once.
	MaxAttempts int

	// RetryBase is the wait after the first failure; it doubles with each
	// further one, up to RetryMax, with ±10% jitter. 0 = DefaultRetryBase.
	RetryBase time.Duration
	// RetryMax caps the wait between attempts; 0 = DefaultRetryMax. It must
	// not be below RetryBase.
	RetryMax time.Duration

	// Lease is how long a leased batch is this relay's before another relay
	// may take it, counted on the database's clock from the lease
	// statement; the relay renews it three times per Lease while the batch
	// is out, and before delivering when the lease statement itself took a
	// third of it. 0 = DefaultLease.
	Lease time.Duration

	// DeliveryTimeout bounds one Deliver call (or one DeliverBatch call).
	// It must be shorter than Lease. 0 = DefaultDeliveryTimeout, or Lease/2
	// when that is shorter.
	DeliveryTimeout time.Duration

	// Concurrency is how many events of a batch a plain Delivery gets at
	// once (a BatchDelivery gets the whole batch); 0 = DefaultConcurrency.
	// The relay's goroutine delivers alone for the batch's first 50 µs:
	// the other workers start only for a batch not done by then.
	Concurrency int

	// Topics limits the relay to events of these topics: names, or prefix
	// patterns ending in '*' ("billing.*", the prefix taken literally).
	// nil = every topic. They apply to leasing, Backlog, the cleanups,
	// RetryDeadLettered and wakeups, so relays of different topics, each
	// with its own settings, share one table.
	Topics []string
	// ExcludeTopics leaves events of these topics (same patterns) to other
	// relays. A pattern that excludes a whole entry of Topics is an error.
	ExcludeTopics []string
	// Tenants limits the relay to events of these tenants (the outbox's
	// tenant column, schema version 6: envelope.Message.Tenant,
	// envelope.Options.Tenant); "" names the events without one. nil =
	// every tenant. Like Topics, they apply to leasing, Backlog, the
	// cleanups and RetryDeadLettered, so relays of different tenants share
	// one table.
	Tenants []string

	// Wakeup cuts the wait between polls short when a writer signals one of
	// the relay's topics; nil = none (poll only). The relay listens on it
	// but does not close it.
	Wakeup wakeup.Wakeup

	// MinPollInterval is the wait after the first poll that did not fill a
	// batch; 0 = DefaultMinPollInterval.
	MinPollInterval time.Duration
	// MaxPollInterval caps the wait between polls; 0 = DefaultMaxPollInterval,
	// or DefaultMaxPollIntervalWithWakeup when Wakeup is set (the wakeup
	// brings new events at once; polling only catches what it misses).
	MaxPollInterval time.Duration
	// PollMultiplier grows the wait after each poll that did not fill a
	// batch; a full batch — or one that delivered events with an ordering
	// key, whose next events are due at once — polls again at once and
	// resets the wait to MinPollInterval. 0 = DefaultPollMultiplier; must
	// be >= 1.
	PollMultiplier float64

	// Name identifies the relay in leased_by and logs; "" = host:pid:random.
	// Relays sharing a table must have distinct names.
	Name string

	// Logger receives WARN for each failed delivery and ERROR for each
	// dead letter; nil = slog.Default().
	Logger *slog.Logger

	// Observer is told of each delivered, failed and dead-lettered event;
	// nil = none.
	Observer Observer

	// ExtraColumns names extra outbox columns (a service's own, such as
	// region) to load into Event.Extra; nil = none. The tenant column is
	// the outbox's own: it is always loaded, into Event.Tenant.
	ExtraColumns []string

	// CleanupBatchSize is how many rows each DELETE of CleanupPublished and
	// CleanupDeadLettered removes; 0 = DefaultCleanupBatchSize.
	CleanupBatchSize int

	// RetainPublished, when positive, makes the running relay delete its
	// published events once they were published longer ago than this,
	// every CleanupInterval (CleanupPublished on a schedule). 0 = never:
	// the relay deletes nothing unless asked, so the default keeps every
	// event; a service that does not keep the outbox as a record sets it
	// (a day is a common choice: long enough to look into a delivery).
	RetainPublished time.Duration
	// RetainDeadLettered, when positive, deletes the relay's dead-lettered
	// events that died longer ago than this, on the same schedule
	// (CleanupDeadLettered). Deleting a dead event gives up on it and
	// releases the later events of its ordering key. 0 = never: dead
	// letters wait for RetryDeadLettered or a person.
	RetainDeadLettered time.Duration
	// DeleteOnPublish deletes each event in the statement that would mark
	// it published, instead of keeping it with published_at set. The
	// pending indexes then never fill with entries of published rows
	// between vacuums, so a poll's cost stays flat however much was
	// published before it (BENCHMARKS.md, "Latency over time"). What is
	// lost: the published history — no row to inspect after delivery,
	// nothing for CleanupPublished or RetainPublished to do (setting
	// RetainPublished too is an error) — and the idempotency key of a
	// delivered event is free again, so a later Enqueue with the same key
	// is written and delivered a second time. Failed and dead-lettered
	// events are kept as always (RetryDeadLettered is unaffected), and
	// per-key order holds: a deleted event no longer holds its key back,
	// exactly as a published one.
	DeleteOnPublish bool

	// AsyncCommit (PostgreSQL only) commits the relay's marks — published,
	// deleted on publish, failed, dead-lettered — and its releases of
	// leases without waiting for their WAL to be flushed to disk
	// (synchronous_commit off for those statements alone, set inside each
	// statement: no pool or DSN setting, nothing else on the connection
	// changes). Leases and renewals still wait for the flush, and each
	// lease's flush also writes every mark before it, so at most one
	// fsync per batch remains instead of two (BENCHMARKS.md, "Relay").
	//
	// What it costs: a crash of the PostgreSQL server (or its machine;
	// not of the relay) may lose the marks committed since the last
	// flush — at most about three times the server's wal_writer_delay
	// (3 × 200ms by default) of them, and only those after the last
	// lease anyone committed. Their events are then still leased by this
	// relay as before the mark (the lease was flushed); the lease runs
	// out and they are delivered again: a lost published mark is a
	// duplicate delivery (at least once, as after a relay crash), a lost
	// failure or dead letter an attempt that does not count (the event
	// may get more than MaxAttempts tries across such crashes). Per-key
	// order is unaffected: a successor of a lost mark's event cannot have
	// been leased, since that lease's flush would have written the mark.
	// Nothing is lost when the relay, rather than the server, stops or
	// crashes. A relay on SQLite with it set is an envelope.ErrUnsupported
	// error from New.
	AsyncCommit bool

	// LeaseByLock (PostgreSQL only) leases the batches of a drain of
	// unordered events by the row locks of a transaction the relay holds
	// open while it delivers them, instead of by writing a lease to each
	// row: the mark (published, deleted, failed) then runs in that
	// transaction, and each event is written once instead of twice. Other
	// relays skip the locked rows (FOR UPDATE SKIP LOCKED) as they skip a
	// leased one. The transaction's idle_in_transaction_session_timeout is
	// the Lease: a relay that stops answering loses its locks after one
	// Lease, as it would lose a lease, and a delivery longer than a third
	// of it is kept alive by a statement on the transaction, as a lease is
	// renewed. A relay that crashes loses its locks at once.
	//
	// Only the lease of unordered events from the lease floor — the
	// relay's statement while a backlog of them drains — takes locks;
	// keyed events and the lease from the start of the table are leased
	// as always, so per-key order is what it is without it.
	//
	// What it costs: one pooled connection and one open transaction per
	// relay while a batch is out (a long delivery holds back the
	// database's cleanup horizon for that long; a delivery that writes
	// through the same *sql.DB needs a second connection), and the events
	// out are not seen as leased (lease_until stays empty). A mark carried
	// from the batch before (one that held keyed events) runs in the same
	// transaction: if that transaction does not commit, those events are
	// delivered again once their lease runs out, as after any failed mark.
	// It cannot be combined with a delivery.TxDelivery (New returns an
	// envelope.ErrConfiguration error), and on SQLite or MySQL New returns
	// an envelope.ErrUnsupported error. BENCHMARKS.md, "Leases by lock",
	// has what it gains.
	LeaseByLock bool

	// CleanupInterval is how often the scheduled cleanup runs (±10%
	// jitter), the first time when the relay starts; it matters only when
	// RetainPublished or RetainDeadLettered is set. 0 = DefaultCleanupInterval.
	// Relays sharing a table may all run it: their DELETEs skip each
	// other's rows.
	CleanupInterval time.Duration
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.RetryBase == 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(DefaultRetryMax, c.RetryBase)
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = min(DefaultDeliveryTimeout, c.Lease/2)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MinPollInterval == 0 {
		c.MinPollInterval = DefaultMinPollInterval
	}
	if c.MaxPollInterval == 0 {
		c.MaxPollInterval = DefaultMaxPollInterval
		if c.Wakeup != nil {
			c.MaxPollInterval = DefaultMaxPollIntervalWithWakeup
		}
		c.MaxPollInterval = max(c.MaxPollInterval, c.MinPollInterval)
	}
	if c.PollMultiplier == 0 {
		c.PollMultiplier = DefaultPollMultiplier
	}
	if c.Name == "" {
		c.Name = defaultName()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CleanupBatchSize == 0 {
		c.CleanupBatchSize = DefaultCleanupBatchSize
	}
	if c.CleanupInterval == 0 {
		c.CleanupInterval = DefaultCleanupInterval
	}
	return c
}

func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), randomHex(4))
}

// filter is the compiled Topics / ExcludeTopics of a relay.
type filter struct {
	include []envelope.TopicPattern // nil = every topic
	exclude []envelope.TopicPattern
	tenants []string // nil = every tenant
}

// Match reports whether the relay handles topic.
func (f filter) Match(topic string) bool {
	if f.include != nil && !outbox.MatchAny(f.include, topic) {
		return false
	}
	return !outbox.MatchAny(f.exclude, topic)
}

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("relay.Config."+field, format, args...)
}

// validate checks a config that already has its defaults.
func (c Config) validate() (filter, error) {
	var f filter
	switch {
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return f, cfgErr("BatchSize", "%d is outside 1..%d", c.BatchSize, MaxBatchSize)
	case c.MaxAttempts < 1:
		return f, cfgErr("MaxAttempts", "%d: want at least 1 (0 means %d)", c.MaxAttempts, DefaultMaxAttempts)
	case c.RetryBase < 0:
		return f, cfgErr("RetryBase", "negative (%s)", c.RetryBase)
	case c.RetryMax < c.RetryBase:
		return f, cfgErr("RetryMax", "%s is below RetryBase %s", c.RetryMax, c.RetryBase)
	case c.Lease < 0:
		return f, cfgErr("Lease", "negative (%s)", c.Lease)
	case c.DeliveryTimeout < 0:
		return f, cfgErr("DeliveryTimeout", "negative (%s)", c.DeliveryTimeout)
	case c.DeliveryTimeout >= c.Lease:
		return f, cfgErr("DeliveryTimeout", "%s is not shorter than Lease %s: a lease that expires mid-delivery lets another relay deliver the event again; shorten DeliveryTimeout or lengthen Lease", c.DeliveryTimeout, c.Lease)
	case c.Concurrency < 1:
		return f, cfgErr("Concurrency", "%d: want at least 1 (0 means %d)", c.Concurrency, DefaultConcurrency)
	case c.MinPollInterval < 0:
		return f, cfgErr("MinPollInterval", "negative (%s)", c.MinPollInterval)
	case c.MaxPollInterval < c.MinPollInterval:
		return f, cfgErr("MaxPollInterval", "%s is below MinPollInterval %s", c.MaxPollInterval, c.MinPollInterval)
	case c.PollMultiplier < 1 || math.IsInf(c.PollMultiplier, 0) || math.IsNaN(c.PollMultiplier):
		return f, cfgErr("PollMultiplier", "%v: want a finite number >= 1 (0 means %v)", c.PollMultiplier, DefaultPollMultiplier)
	case utf8.RuneCountInString(c.Name) > 255:
		return f, cfgErr("Name", "longer than 255 characters")
	case !utf8.ValidString(c.Name) || strings.IndexByte(c.Name, 0) >= 0:
		return f, cfgErr("Name", "%q is not valid UTF-8 without NUL bytes (it is written to leased_by)", c.Name)
	case c.CleanupBatchSize < 1:
		return f, cfgErr("CleanupBatchSize", "%d: want at least 1 (0 means %d)", c.CleanupBatchSize, DefaultCleanupBatchSize)
	case c.RetainPublished < 0:
		return f, cfgErr("RetainPublished", "negative (%s); 0 means never delete", c.RetainPublished)
	case c.RetainDeadLettered < 0:
		return f, cfgErr("RetainDeadLettered", "negative (%s); 0 means never delete", c.RetainDeadLettered)
	case c.DeleteOnPublish && c.RetainPublished > 0:
		return f, cfgErr("RetainPublished", "%s is set with DeleteOnPublish, which keeps no published events to delete; set one of them", c.RetainPublished)
	case c.CleanupInterval < 0:
		return f, cfgErr("CleanupInterval", "negative (%s)", c.CleanupInterval)
	}
	for _, list := range []struct {
		field string
		ps    []string
	}{{"Topics", c.Topics}, {"ExcludeTopics", c.ExcludeTopics}} {
		for i, p := range list.ps {
			if !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
				return f, cfgErr(fmt.Sprintf("%s[%d]", list.field, i), "%q is not valid UTF-8 without NUL bytes", p)
			}
		}
	}
	if c.Tenants != nil && len(c.Tenants) == 0 {
		return f, cfgErr("Tenants", "empty list matches nothing; leave it nil for every tenant")
	}
	for i, t := range c.Tenants {
		switch {
		case !utf8.ValidString(t) || strings.IndexByte(t, 0) >= 0:
			return f, cfgErr(fmt.Sprintf("Tenants[%d]", i), "%q is not valid UTF-8 without NUL bytes", t)
		case utf8.RuneCountInString(t) > envelope.MaxKeyLength:
			return f, cfgErr(fmt.Sprintf("Tenants[%d]", i), "longer than %d characters", envelope.MaxKeyLength)
		case slices.Contains(c.Tenants[:i], t):
			return f, cfgErr(fmt.Sprintf("Tenants[%d]", i), "%q listed twice", t)
		}
	}
	f.tenants = slices.Clone(c.Tenants)
	var err error
	if c.Topics != nil {
		if len(c.Topics) == 0 {
			return f, cfgErr("Topics", "empty list matches nothing; leave it nil for every topic")
		}
		if f.include, err = envelope.ParseTopicPatterns("relay.Config.Topics", c.Topics); err != nil {
			return f, err
		}
	}
	if f.exclude, err = envelope.ParseTopicPatterns("relay.Config.ExcludeTopics", c.ExcludeTopics); err != nil {
		return f, err
	}
	for i, in := range f.include {
		for j, ex := range f.exclude {
			if ex == in || (ex.Prefix && strings.HasPrefix(in.Text, ex.Text)) {
				return f, cfgErr("ExcludeTopics", "%q (ExcludeTopics[%d]) excludes all of %q (Topics[%d]): a topic cannot be both included and excluded", ex, j, in, i)
			}
		}
	}
	for i, col := range c.ExtraColumns {
		switch {
		case !names.IsIdentifier(col):
			return f, cfgErr(fmt.Sprintf("ExtraColumns[%d]", i), "%q is not an identifier", col)
		case outbox.IsOwnColumn(col):
			return f, cfgErr(fmt.Sprintf("ExtraColumns[%d]", i), "%q is one of the outbox table's own columns, loaded anyway", col)
		case slices.Contains(c.ExtraColumns[:i], col):
			return f, cfgErr(fmt.Sprintf("ExtraColumns[%d]", i), "%q listed twice", col)
		}
	}
	return f, nil
}
