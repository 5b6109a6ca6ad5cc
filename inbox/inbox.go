package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/sqltime"
)

// Defaults of Config's zero fields.
const (
	DefaultTTL             = 7 * 24 * time.Hour
	DefaultCacheTTL        = time.Hour
	DefaultCleanupInterval = 10 * time.Minute
	DefaultCleanupBatch    = 1000
)

// MaxIDLength bounds a message id and a consumer name, in characters.
const MaxIDLength = 255

// The headers the inbox reads a herald message's id, ordering key and
// sequence from (the delivery package's names; every herald transport
// carries them).
const (
	HeaderEventID     = "herald-event-id"
	HeaderSequence    = "herald-sequence"
	HeaderOrderingKey = "herald-ordering-key"
)

// Order says what the inbox does with a message older than the last one
// processed for its ordering key.
type Order int

const (
	// OrderNone (the zero value) keeps no per-key marks: every new id is
	// processed.
	OrderNone Order = iota
	// OrderSkip records a stale message's id without running the handler:
	// Handle returns Stale. A redelivered old event never overwrites a
	// newer state.
	OrderSkip
	// OrderFlag runs the handler for a stale message too, with
	// IsStale(ctx) true, so it can merge instead of overwrite.
	OrderFlag
)

// Config configures an Inbox. Consumer and Dialect are required.
type Config struct {
	// Consumer names the consumer: ids are recorded per consumer, so two
	// consumers in one service each process an event once, and two
	// instances of one consumer (the same name) process it once between
	// them. At most 255 characters.
	Consumer string
	// Dialect is the database's: envelope.Postgres, envelope.SQLite or
	// envelope.MySQL (MySQL 8 and MariaDB).
	Dialect envelope.Dialect
	// Table is the inbox table; "" = DefaultTable. Its per-key marks are
	// {Table}_keys.
	Table string
	// TTL is how long a processed id is kept; 0 = DefaultTTL (7 days). It
	// must exceed the longest time a message can be redelivered after its
	// first delivery: the broker's retention plus the relay's retry span
	// (RedeliveryWindow), or a repeat after the id is cleaned up runs again.
	TTL time.Duration
	// RedeliveryWindow, when set, is that longest redelivery time —
	// typically the broker's retention + RelayRetrySpan(...) — and a TTL
	// below it is an ErrConfiguration. 0 = not checked.
	RedeliveryWindow time.Duration
	// Order is what to do with a message older than its key's last
	// processed one (by the herald-sequence header); OrderNone = nothing.
	// Batches ignore it.
	Order Order
	// Cache, when set, is asked before the database: a hit is a duplicate
	// without a query. It is written only after a commit, a failed read or
	// write of it is ignored (the database decides), and batch calls
	// bypass it. nil = none.
	Cache Cache
	// CacheTTL is how long the cache keeps an id; 0 = the smaller of
	// DefaultCacheTTL and TTL. Above TTL it is an ErrConfiguration: the
	// cache would call a message a duplicate the database has forgotten,
	// which is harmless for a repeat but not a rule to keep silently.
	CacheTTL time.Duration
	// CleanupInterval is how often Start's cleaner deletes expired ids;
	// 0 = DefaultCleanupInterval.
	CleanupInterval time.Duration
	// CleanupBatch is how many rows one cleanup statement deletes; 0 =
	// DefaultCleanupBatch.
	CleanupBatch int
	// Logger gets the cleaner's failures; nil = slog.Default().
	Logger *slog.Logger
}

// Inbox records the messages a consumer processed, in its database, so
// each is processed once. It is safe for concurrent use.
type Inbox struct {
	db  *sql.DB
	cfg Config
	t   table
	d   envelope.Dialect

	claimSQL, markKeySQL, setResultSQL, releaseSQL string
	claimBatchSQL, seenSQL, lookupSQL              string
	cleanupSQL, cleanupKeysSQL                     string
	keySeqSQL, claimedSQL                          string // MySQL's

	mu      sync.Mutex
	stop    context.CancelFunc
	stopped chan struct{}
}

func cfgErr(where, format string, args ...any) error {
	if !strings.Contains(where, ".") {
		where = "inbox.Config." + where
	}
	return outbox.Configurationf(where, format, args...)
}

// New returns an Inbox on db for cfg's consumer. It checks cfg and that
// the inbox table is at LatestVersion (run Migrate first).
func New(ctx context.Context, db *sql.DB, cfg Config) (*Inbox, error) {
	if db == nil {
		return nil, cfgErr("db", "nil *sql.DB")
	}
	if err := cfg.Dialect.Validate(); err != nil {
		return nil, err
	}
	t, err := parseTable(cfg.Dialect, cfg.Table)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Consumer == "":
		return nil, cfgErr("Consumer", "empty: name the consumer (ids are recorded per consumer)")
	case len([]rune(cfg.Consumer)) > MaxIDLength:
		return nil, cfgErr("Consumer", "longer than %d characters", MaxIDLength)
	case cfg.TTL < 0:
		return nil, cfgErr("TTL", "negative (%s)", cfg.TTL)
	case cfg.CacheTTL < 0:
		return nil, cfgErr("CacheTTL", "negative (%s)", cfg.CacheTTL)
	case cfg.CleanupInterval < 0:
		return nil, cfgErr("CleanupInterval", "negative (%s)", cfg.CleanupInterval)
	case cfg.CleanupBatch < 0:
		return nil, cfgErr("CleanupBatch", "negative (%d)", cfg.CleanupBatch)
	case cfg.Order < OrderNone || cfg.Order > OrderFlag:
		return nil, cfgErr("Order", "unknown value %d", cfg.Order)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.RedeliveryWindow > 0 && cfg.TTL < cfg.RedeliveryWindow {
		return nil, cfgErr("TTL", "%s is shorter than RedeliveryWindow %s: a message redelivered after its id is cleaned up would be processed again; "+
			"keep ids at least as long as the broker's retention plus the relay's retry span", cfg.TTL, cfg.RedeliveryWindow)
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = min(DefaultCacheTTL, cfg.TTL)
	}
	if cfg.CacheTTL > cfg.TTL {
		return nil, cfgErr("CacheTTL", "%s exceeds TTL %s: the cache must not remember an id longer than the inbox does", cfg.CacheTTL, cfg.TTL)
	}
	if cfg.CleanupInterval == 0 {
		cfg.CleanupInterval = DefaultCleanupInterval
	}
	if cfg.CleanupBatch == 0 {
		cfg.CleanupBatch = DefaultCleanupBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	v, err := Version(ctx, db, cfg.Dialect, t.Name)
	if err != nil {
		return nil, err
	}
	if v != LatestVersion {
		return nil, cfgErr("Table", "%s is at version %d, this release needs %d: run inbox.Migrate (or `herald migrate up --inbox`)", t.Name, v, LatestVersion)
	}
	in := &Inbox{db: db, cfg: cfg, t: t, d: cfg.Dialect}
	in.prepareSQL()
	return in, nil
}

// Consumer is the consumer's name.
func (in *Inbox) Consumer() string { return in.cfg.Consumer }

// DB is the database the inbox records ids in.
func (in *Inbox) DB() *sql.DB { return in.db }

// Dialect is the database's dialect.
func (in *Inbox) Dialect() envelope.Dialect { return in.d }

// Message is what the inbox needs of a received message.
type Message struct {
	// ID is the message's id, what the inbox de-duplicates on: herald's
	// herald-event-id header by default. Required, at most 255 characters.
	ID string
	// OrderingKey is the message's ordering key (herald-ordering-key);
	// "" = unordered. Used only with OrderSkip or OrderFlag.
	OrderingKey string
	// Sequence is the message's sequence (herald-sequence); 0 = unknown,
	// and then no order is checked.
	Sequence int64
}

// FromHeaders reads a Message from herald's headers (names in any case).
// A missing herald-event-id or a sequence that is not a number is an
// ErrValidation.
func FromHeaders(h map[string]string) (Message, error) {
	var m Message
	var seq string
	for k, v := range h {
		switch {
		case strings.EqualFold(k, HeaderEventID):
			m.ID = v
		case strings.EqualFold(k, HeaderOrderingKey):
			m.OrderingKey = v
		case strings.EqualFold(k, HeaderSequence):
			seq = v
		}
	}
	if m.ID == "" {
		return m, outbox.Validationf("header "+HeaderEventID, "missing: not a herald message, or give the consumer an id extractor")
	}
	if seq != "" {
		n, err := strconv.ParseInt(seq, 10, 64)
		if err != nil {
			return m, outbox.Validationf("header "+HeaderSequence, "%q is not a number", seq)
		}
		m.Sequence = n
	}
	return m, nil
}

func (m Message) validate() error {
	switch {
	case m.ID == "":
		return outbox.Validationf("Message.ID", "empty: the inbox de-duplicates on it")
	case len([]rune(m.ID)) > MaxIDLength:
		return outbox.Validationf("Message.ID", "longer than %d characters", MaxIDLength)
	case len([]rune(m.OrderingKey)) > MaxIDLength:
		return outbox.Validationf("Message.OrderingKey", "longer than %d characters", MaxIDLength)
	}
	return nil
}

// Outcome is what the inbox did with a message.
type Outcome int

const (
	// Processed: a new id; the handler ran and its work committed with
	// the id (or, for HandleOnce, the id committed and the handler ran).
	Processed Outcome = iota
	// Duplicate: the id was processed before; the handler did not run.
	Duplicate
	// Stale: with OrderSkip, the message is older than its key's last
	// processed one; its id is recorded and the handler did not run.
	Stale
)

func (o Outcome) String() string {
	switch o {
	case Processed:
		return "Processed"
	case Duplicate:
		return "Duplicate"
	case Stale:
		return "Stale"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

type ctxKey int

const (
	staleKey ctxKey = iota
	resultKey
)

// IsStale reports, inside a handler of an inbox with OrderFlag, whether
// the message is older than the last one processed for its ordering key.
func IsStale(ctx context.Context) bool {
	s, _ := ctx.Value(staleKey).(bool)
	return s
}

type resultBox struct {
	s   string
	set bool
}

// SetResult, inside a transactional handler (Handle, HandleTx,
// gorminbox.Handle), keeps s with the message's id, committed with it;
// Lookup returns it. webhookinbox keeps the first answer's status so.
// Outside such a handler it does nothing.
func SetResult(ctx context.Context, s string) {
	if b, ok := ctx.Value(resultKey).(*resultBox); ok {
		b.s, b.set = s, true
	}
}

// Keep sets the result kept with a processed id (outside a handler's
// transaction; SetResult does it inside one). An id not recorded is left
// alone.
func (in *Inbox) Keep(ctx context.Context, id, result string) error {
	if _, err := in.db.ExecContext(ctx, in.setResultSQL, result, in.cfg.Consumer, id); err != nil {
		return fmt.Errorf("herald/inbox: keep the result of %s: %w", id, err)
	}
	return nil
}

// Record is what the inbox keeps of a processed message.
type Record struct {
	ProcessedAt time.Time
	Result      string
	HasResult   bool
}

// Lookup returns the record of id, and false when it is not (or no
// longer) recorded.
func (in *Inbox) Lookup(ctx context.Context, id string) (Record, bool, error) {
	var r Record
	var at sqltime.NullTime
	var res sql.NullString
	err := in.db.QueryRowContext(ctx, in.lookupSQL, in.cfg.Consumer, id).Scan(&at, &res)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("herald/inbox: lookup %s: %w", id, err)
	}
	r.ProcessedAt, r.Result, r.HasResult = at.Time, res.String, res.Valid
	return r, true, nil
}

func (in *Inbox) cacheKey(id string) string { return in.cfg.Consumer + "\x00" + id }

// cached reports a cache hit; a failing cache is a miss.
func (in *Inbox) cached(ctx context.Context, id string) bool {
	if in.cfg.Cache == nil {
		return false
	}
	hit, err := in.cfg.Cache.Contains(ctx, in.cacheKey(id))
	return err == nil && hit
}

// remember writes id to the cache after a commit; a failure is ignored:
// the database, not the cache, is what keeps a message from running twice.
func (in *Inbox) remember(ctx context.Context, id string) {
	if in.cfg.Cache != nil {
		_ = in.cfg.Cache.Add(context.WithoutCancel(ctx), in.cacheKey(id), in.cfg.CacheTTL)
	}
}
