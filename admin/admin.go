package admin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/outboxsql"
	"github.com/heraldgo/herald/internal/sqltime"
	"github.com/heraldgo/herald/relay"
)

// State is what an event is waiting for.
type State string

// The states an event can be listed by.
const (
	// StateDead: out of attempts (dead_lettered_at set). It holds back the
	// later events of its ordering key until it is retried or discarded.
	StateDead State = "dead"
	// StateFailed: pending, with at least one failed delivery behind it
	// (a subset of StatePending).
	StateFailed State = "failed"
	// StatePending: not yet delivered and not dead — due, waiting for a
	// retry, or leased by a relay.
	StatePending State = "pending"
	// StatePublished: delivered (kept until cleaned up). Reported by
	// Event.State; a Query selects it only within StateAll.
	StatePublished State = "published"
	// StateAll selects every event the table holds, published history
	// included (List, Count and Follow; not Retry or Discard).
	StateAll State = "all"
)

// DefaultLimit and MaxLimit bound a page of List.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// HeldBackShown is how many of the events an event holds back Get returns.
const HeldBackShown = 5

// ErrNotFound is returned by Get for an id the table does not hold.
var ErrNotFound = errors.New("herald/admin: no such event")

// Config configures an Admin.
type Config struct {
	// DB holds the outbox table. Required.
	DB *sql.DB
	// Relay, when set, is the relay whose RetryDeadLettered retries go
	// through: it polls at once and signals its Wakeup, so other relays
	// hear of the retried events. Its table and dialect are the Admin's,
	// and its Topics / ExcludeTopics narrow what Retry reaches. When nil,
	// the Admin makes a relay of its own that is never started (Table and
	// Dialect below are then used); relays of the table find the retried
	// events at their next poll.
	Relay *relay.Relay
	// Table is the outbox table when Relay is nil; "" = envelope.DefaultTable.
	Table string
	// Dialect when Relay is nil; "" = detected from DB's driver.
	Dialect envelope.Dialect
	// Logger records every change (retry, discard, pause, resume);
	// nil = slog.Default().
	Logger *slog.Logger
}

// Admin inspects and repairs an outbox table: lists events by state, shows
// one, retries and discards dead letters, counts the backlog per topic and
// pauses topics. It is safe for concurrent use.
type Admin struct {
	db      *sql.DB
	r       *relay.Relay
	d       envelope.Dialect
	t       envelope.Table
	paused  string // the table of paused topics, for SQL
	log     *slog.Logger
	sqlNow  func() time.Time // SQLite's clock (the process's); tests may set it
	columns string
}

// New returns an Admin of cfg.DB's outbox table. A missing DB, or a table
// that is missing or not migrated to envelope.LatestVersion, is an
// envelope.ErrConfiguration error.
func New(cfg Config) (*Admin, error) {
	if cfg.DB == nil {
		return nil, &envelope.Error{Kind: envelope.ErrConfiguration, Where: "admin.Config.DB", Msg: "nil *sql.DB"}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	r := cfg.Relay
	if r == nil {
		var err error
		r, err = relay.New(cfg.DB, unstarted{}, relay.Config{Table: cfg.Table, Dialect: cfg.Dialect, Name: "herald-admin", Logger: log,
			CleanupBatchSize: MaxBatchSize}) // a batch of RetryBatches is one statement
		if err != nil {
			return nil, err
		}
	} else if cfg.Table != "" && cfg.Table != r.Table() {
		return nil, &envelope.Error{Kind: envelope.ErrConfiguration, Where: "admin.Config.Table",
			Msg: fmt.Sprintf("%q, but Config.Relay delivers from %q: leave Table empty with a Relay", cfg.Table, r.Table())}
	}
	t, err := envelope.ParseTable(r.Dialect(), r.Table())
	if err != nil {
		return nil, err
	}
	return &Admin{db: cfg.DB, r: r, d: r.Dialect(), t: t, paused: outbox.PausedTable(t), log: log, sqlNow: time.Now,
		columns: "e." + strings.ReplaceAll(envelope.EventColumns, ", ", ", e.") + ", e.tenant"}, nil
}

// unstarted is the delivery of the Admin's own relay, which never runs.
type unstarted struct{}

func (unstarted) Deliver(context.Context, *envelope.Event) error {
	return errors.New("herald/admin: the admin's relay does not deliver")
}
func (unstarted) Close() error { return nil }

var _ delivery.Delivery = unstarted{}

// Dialect is the table's dialect.
func (a *Admin) Dialect() envelope.Dialect { return a.d }

// Table is the outbox table's name.
func (a *Admin) Table() string { return a.t.Name }

// Event is an outbox event as the admin shows it.
type Event struct {
	Sequence       int64             `json:"sequence"`
	ID             uuid.UUID         `json:"id"`
	State          State             `json:"state"`
	Topic          string            `json:"topic"`
	OrderingKey    string            `json:"ordering_key,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Payload        json.RawMessage   `json:"payload"`
	Headers        map[string]string `json:"headers,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	Attempts       int               `json:"attempts"`
	LastError      string            `json:"last_error,omitempty"`
	NextAttemptAt  *time.Time        `json:"next_attempt_at,omitempty"`
	LeaseUntil     *time.Time        `json:"lease_until,omitempty"`
	LeasedBy       string            `json:"leased_by,omitempty"`
	PublishedAt    *time.Time        `json:"published_at,omitempty"`
	DeadLetteredAt *time.Time        `json:"dead_lettered_at,omitempty"`
	Tenant         string            `json:"tenant,omitempty"` // the tenant column (envelope.Message.Tenant); "" = none
}

func fromEnvelope(e *envelope.Event) Event {
	s := StatePending
	switch {
	case e.PublishedAt != nil:
		s = StatePublished
	case e.DeadLetteredAt != nil:
		s = StateDead
	case e.Attempts > 0:
		s = StateFailed
	}
	p := e.Payload
	if !json.Valid(p) {
		p, _ = json.Marshal(string(p))
	}
	return Event{Sequence: e.Sequence, ID: e.ID, State: s, Topic: e.Topic, OrderingKey: e.OrderingKey,
		IdempotencyKey: e.IdempotencyKey, Payload: p, Headers: e.Headers, CreatedAt: e.CreatedAt,
		Attempts: e.Attempts, LastError: e.LastError, NextAttemptAt: e.NextAttemptAt, LeaseUntil: e.LeaseUntil,
		LeasedBy: e.LeasedBy, PublishedAt: e.PublishedAt, DeadLetteredAt: e.DeadLetteredAt, Tenant: e.Tenant}
}

// Query selects events. Every field narrows; the zero Query selects every
// dead letter.
type Query struct {
	// State: StateDead (""), StateFailed, StatePending or StateAll.
	State State `json:"state,omitempty"`
	// Topics are names or prefix patterns ending in '*' ("shop.*"), as in
	// relay.Config.Topics; nil = any topic.
	Topics []string `json:"topics,omitempty"`
	// OrderingKey selects one key's events; "" = any.
	OrderingKey string `json:"ordering_key,omitempty"`
	// Tenants selects the events of these tenants (the outbox's tenant
	// column, envelope.Message.Tenant; "" names the events without one);
	// nil = any tenant.
	Tenants []string `json:"tenants,omitempty"`
	// Since and Until bound created_at: Since <= created_at < Until; zero
	// = unbounded.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// ErrorContains selects events whose last_error contains it
	// (case-sensitive); "" = any.
	ErrorContains string `json:"error_contains,omitempty"`
	// IDs are event ids; nil = any.
	IDs []uuid.UUID `json:"ids,omitempty"`
	// After is the keyset cursor: List returns events of sequence > After
	// (Page.Next of the page before); 0 = from the start.
	After int64 `json:"after,omitempty"`
	// Limit is List's page size: 0 = DefaultLimit, at most MaxLimit.
	// Retry and Discard ignore it (they take every match, in batches).
	Limit int `json:"limit,omitempty"`
}

// Page is one page of List, in sequence order.
type Page struct {
	Events []Event `json:"events"`
	// Next is the After of the next page; 0 when this page is the last.
	Next int64 `json:"next,omitempty"`
}

// sqlArgs numbers bind arguments: $n on PostgreSQL, ?n on SQLite; on
// MySQL ? by position, so each placeholder add returns is written once, in
// the order of the add calls.
type sqlArgs struct {
	d    envelope.Dialect
	args []any
}

func (s *sqlArgs) add(v any) string {
	s.args = append(s.args, v)
	switch s.d {
	case envelope.Postgres:
		return "$" + strconv.Itoa(len(s.args))
	case envelope.MySQL:
		return "?"
	}
	return "?" + strconv.Itoa(len(s.args))
}

func badQuery(field, format string, args ...any) error {
	return outbox.Validationf("admin.Query."+field, format, args...)
}

// where renders q's conditions over alias e ("AND …" each), its state
// included.
func (a *Admin) where(q Query, s *sqlArgs) (string, error) {
	var c []string
	switch q.State {
	case StateDead, "":
		c = append(c, "e.dead_lettered_at IS NOT NULL")
	case StatePending:
		c = append(c, "e.published_at IS NULL AND e.dead_lettered_at IS NULL")
	case StateFailed:
		c = append(c, "e.published_at IS NULL AND e.dead_lettered_at IS NULL AND e.attempts > 0")
	case StateAll:
		c = append(c, "1 = 1")
	default:
		return "", badQuery("State", "%q: want %q, %q, %q or %q", q.State, StateDead, StateFailed, StatePending, StateAll)
	}
	if q.Topics != nil {
		for i, p := range q.Topics {
			if !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
				return "", badQuery(fmt.Sprintf("Topics[%d]", i), "%q is not valid UTF-8 without NUL bytes", p)
			}
		}
		ps, err := envelope.ParseTopicPatterns("admin.Query.Topics", q.Topics)
		if err != nil {
			var e *envelope.Error
			if errors.As(err, &e) {
				e.Kind = envelope.ErrValidation
			}
			return "", err
		}
		if len(ps) == 0 {
			c = append(c, "1 = 0")
		} else {
			var or []string
			for _, p := range ps {
				switch {
				case !p.Prefix:
					or = append(or, "e.topic = "+s.add(p.Text))
				case p.Text == "":
					or = append(or, "1 = 1")
				case a.d == envelope.Postgres:
					or = append(or, "e.topic LIKE "+s.add(outbox.LikePattern(p))+` ESCAPE '\'`)
				default: // SQLite's LIKE ignores ASCII case; MySQL's LIKE escapes with a backslash in the literal
					or = append(or, "substr(e.topic, 1, "+s.add(utf8.RuneCountInString(p.Text))+") = "+s.add(p.Text))
				}
			}
			c = append(c, "("+strings.Join(or, " OR ")+")")
		}
	}
	if q.OrderingKey != "" {
		if !utf8.ValidString(q.OrderingKey) || strings.IndexByte(q.OrderingKey, 0) >= 0 {
			return "", badQuery("OrderingKey", "%q is not valid UTF-8 without NUL bytes", q.OrderingKey)
		}
		c = append(c, "e.ordering_key = "+s.add(q.OrderingKey))
	}
	if q.Tenants != nil {
		if len(q.Tenants) == 0 {
			c = append(c, "1 = 0")
		} else {
			in := make([]string, len(q.Tenants))
			for i, t := range q.Tenants {
				if !utf8.ValidString(t) || strings.IndexByte(t, 0) >= 0 {
					return "", badQuery(fmt.Sprintf("Tenants[%d]", i), "%q is not valid UTF-8 without NUL bytes", t)
				}
				in[i] = s.add(t)
			}
			c = append(c, "e.tenant IN ("+strings.Join(in, ", ")+")")
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return "", badQuery("Until", "%s is not after Since (%s)", q.Until.Format(time.RFC3339Nano), q.Since.Format(time.RFC3339Nano))
	}
	if !q.Since.IsZero() {
		c = append(c, "e.created_at >= "+s.add(outbox.TimeArg(a.d, q.Since)))
	}
	if !q.Until.IsZero() {
		c = append(c, "e.created_at < "+s.add(outbox.TimeArg(a.d, q.Until)))
	}
	if q.ErrorContains != "" {
		if !utf8.ValidString(q.ErrorContains) || strings.IndexByte(q.ErrorContains, 0) >= 0 {
			return "", badQuery("ErrorContains", "%q is not valid UTF-8 without NUL bytes", q.ErrorContains)
		}
		if a.d == envelope.Postgres {
			c = append(c, "strpos(e.last_error, "+s.add(q.ErrorContains)+") > 0")
		} else {
			c = append(c, "instr(e.last_error, "+s.add(q.ErrorContains)+") > 0")
		}
	}
	if q.IDs != nil {
		if len(q.IDs) == 0 {
			c = append(c, "1 = 0")
		} else {
			ids := make([]string, len(q.IDs))
			for i, id := range q.IDs {
				ids[i] = id.String()
			}
			switch a.d {
			case envelope.Postgres:
				c = append(c, "e.id = ANY("+s.add("{"+strings.Join(ids, ",")+"}")+"::uuid[])")
			case envelope.MySQL:
				b, _ := json.Marshal(ids)
				c = append(c, "e.id IN (SELECT ids.value FROM JSON_TABLE("+s.add(string(b))+", '$[*]' COLUMNS (value "+outboxsql.MySQLIDType+" PATH '$')) AS ids)")
			default:
				b, _ := json.Marshal(ids)
				c = append(c, "e.id IN (SELECT value FROM json_each("+s.add(string(b))+"))")
			}
		}
	}
	if q.After < 0 {
		return "", badQuery("After", "%d: a sequence is positive (0 = from the start)", q.After)
	}
	if q.After > 0 {
		c = append(c, "e.sequence > "+s.add(q.After))
	}
	return strings.Join(c, " AND "), nil
}

// List returns one page of the events q selects, in sequence order. Page
// on with q.After = page.Next while Next is not 0: a keyset, so a page
// costs the same however deep it is, and events that change state between
// pages are neither repeated nor skipped by the cursor. A bad q (unknown
// State, bad topic pattern, Until not after Since, Limit out of range) is
// an envelope.ErrValidation error naming the field.
func (a *Admin) List(ctx context.Context, q Query) (Page, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return Page{}, badQuery("Limit", "%d: want 1 to %d (0 means %d)", limit, MaxLimit, DefaultLimit)
	}
	s := &sqlArgs{d: a.d}
	w, err := a.where(q, s)
	if err != nil {
		return Page{}, err
	}
	stmt := `SELECT ` + a.columns + ` FROM ` + a.t.Quoted + ` e WHERE ` + w + ` ORDER BY e.sequence LIMIT ` + s.add(limit+1)
	evs, err := a.query(ctx, stmt, s.args...)
	if err != nil {
		return Page{}, fmt.Errorf("herald/admin: list: %w", err)
	}
	p := Page{Events: evs}
	if len(evs) > limit {
		p.Events = evs[:limit]
		p.Next = evs[limit-1].Sequence
	}
	return p, nil
}

func (a *Admin) query(ctx context.Context, stmt string, args ...any) ([]Event, error) {
	rows, err := a.db.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		e, err := outbox.ScanEvent(rows, []string{"tenant"})
		if err != nil {
			return nil, err
		}
		switch v := e.Extra["tenant"].(type) { // text: string or bytes, by driver
		case string:
			e.Tenant = v
		case []byte:
			e.Tenant = string(v)
		}
		out = append(out, fromEnvelope(e))
	}
	return out, rows.Err()
}

// Detail is one event and what its ordering key holds back behind it.
type Detail struct {
	Event
	// HeldBack counts the later undelivered events of its key, which wait
	// for it (0 for an unordered or published event).
	HeldBack int64 `json:"held_back"`
	// HeldBackFirst are the first HeldBackShown of them, in order.
	HeldBackFirst []Event `json:"held_back_first"`
}

// Get returns the event id with what it holds back; ErrNotFound when the
// table does not hold it.
func (a *Admin) Get(ctx context.Context, id uuid.UUID) (Detail, error) {
	s := &sqlArgs{d: a.d}
	evs, err := a.query(ctx, `SELECT `+a.columns+` FROM `+a.t.Quoted+` e WHERE e.id = `+s.add(id.String()), s.args...)
	if err != nil {
		return Detail{}, fmt.Errorf("herald/admin: get %s: %w", id, err)
	}
	if len(evs) == 0 {
		return Detail{}, fmt.Errorf("%w: %s in %s", ErrNotFound, id, a.t.Name)
	}
	d := Detail{Event: evs[0], HeldBackFirst: []Event{}}
	if d.OrderingKey == "" || d.State == StatePublished {
		return d, nil
	}
	s = &sqlArgs{d: a.d}
	cond := `e.ordering_key = ` + s.add(d.OrderingKey) + ` AND e.published_at IS NULL AND e.sequence > ` + s.add(d.Sequence)
	if err := a.db.QueryRowContext(ctx, `SELECT count(*) FROM `+a.t.Quoted+` e WHERE `+cond, s.args...).Scan(&d.HeldBack); err != nil {
		return Detail{}, fmt.Errorf("herald/admin: get %s: %w", id, err)
	}
	if d.HeldBack > 0 {
		first, err := a.query(ctx, `SELECT `+a.columns+` FROM `+a.t.Quoted+` e WHERE `+cond+` ORDER BY e.sequence LIMIT `+strconv.Itoa(HeldBackShown), s.args...)
		if err != nil {
			return Detail{}, fmt.Errorf("herald/admin: get %s: %w", id, err)
		}
		d.HeldBackFirst = first
	}
	return d, nil
}

// deadOnly checks that q selects dead letters, for Retry and Discard.
func deadOnly(q Query, op string) error {
	if q.State != "" && q.State != StateDead {
		return badQuery("State", "%q: %s takes dead letters only (StateDead or \"\")", q.State, op)
	}
	return nil
}

// Retry makes the dead letters q selects due again, attempts reset, through
// relay.Relay.RetryDeadLettered: they are delivered before the events of
// their keys that waited behind them. It is RetryBatches with the default
// batch size: it returns how many events it revived and logs the count.
func (a *Admin) Retry(ctx context.Context, q Query) (int64, error) {
	return a.RetryBatches(ctx, q, BatchOptions{})
}

// Discard deletes the dead letters q selects, in batches of
// DefaultBatchSize (DiscardBatches), and returns how many it deleted; each
// releases the events of its ordering key that waited behind them. The
// count and q are logged. Only dead letters are discarded: an event
// retried meanwhile is left alone.
func (a *Admin) Discard(ctx context.Context, q Query) (int64, error) {
	return a.DiscardBatches(ctx, q, BatchOptions{})
}

func (a *Admin) logDiscard(ctx context.Context, q Query, n int64) {
	a.log.InfoContext(ctx, "herald/admin: discarded dead letters", slog.String("table", a.t.Name),
		slog.Int64("discarded", n), slog.String("query", q.String()))
}

// String describes q for logs.
func (q Query) String() string {
	var p []string
	if q.State != "" {
		p = append(p, "state="+string(q.State))
	}
	if q.Topics != nil {
		p = append(p, "topics="+strings.Join(q.Topics, ","))
	}
	if q.OrderingKey != "" {
		p = append(p, "ordering_key="+strconv.Quote(q.OrderingKey))
	}
	if q.Tenants != nil {
		ts := make([]string, len(q.Tenants))
		for i, t := range q.Tenants {
			ts[i] = strconv.Quote(t)
		}
		p = append(p, "tenants="+strings.Join(ts, ","))
	}
	if !q.Since.IsZero() {
		p = append(p, "since="+q.Since.Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		p = append(p, "until="+q.Until.Format(time.RFC3339Nano))
	}
	if q.ErrorContains != "" {
		p = append(p, "error_contains="+strconv.Quote(q.ErrorContains))
	}
	if q.IDs != nil {
		if len(q.IDs) <= 10 {
			ids := make([]string, len(q.IDs))
			for i, id := range q.IDs {
				ids[i] = id.String()
			}
			p = append(p, "ids="+strings.Join(ids, ","))
		} else {
			p = append(p, fmt.Sprintf("ids=%d ids", len(q.IDs)))
		}
	}
	if q.After != 0 {
		p = append(p, "after="+strconv.FormatInt(q.After, 10))
	}
	if len(p) == 0 {
		return "every dead letter"
	}
	return strings.Join(p, " ")
}

// TopicBacklog is one topic's share of the outbox.
type TopicBacklog struct {
	Topic            string        `json:"topic"`
	Pending          int64         `json:"pending"`            // still to deliver (due, waiting to retry, leased)
	OldestPendingAge time.Duration `json:"oldest_pending_age"` // of the oldest pending event, by the database's clock; 0 when none
	DeadLettered     int64         `json:"dead_lettered"`
	Paused           bool          `json:"paused"`
}

// Backlog counts the pending and dead events of every topic the relay
// delivers (Config.Relay's Topics / ExcludeTopics and Tenants; every
// topic of the table without a Relay), and tells which of those topics
// are paused, in one statement grouped by topic (relay.BacklogByTopic:
// the undelivered events, through the pending index; published history
// is not read). Topics with nothing undelivered appear only while paused.
func (a *Admin) Backlog(ctx context.Context) ([]TopicBacklog, error) {
	bs, err := a.r.BacklogByTopic(ctx)
	if err != nil {
		return nil, fmt.Errorf("herald/admin: backlog: %w", err)
	}
	out := make([]TopicBacklog, len(bs))
	for i, b := range bs {
		out[i] = TopicBacklog{Topic: b.Topic, Pending: b.Pending, OldestPendingAge: b.OldestPendingAge,
			DeadLettered: b.DeadLettered, Paused: b.Paused}
	}
	return out, nil
}

// TenantBacklog is one tenant's share of the outbox (the tenant column,
// envelope.Message.Tenant); Tenant "" is the events without one.
type TenantBacklog struct {
	Tenant           string        `json:"tenant"`
	Pending          int64         `json:"pending"`            // still to deliver (due, waiting to retry, leased)
	OldestPendingAge time.Duration `json:"oldest_pending_age"` // of the oldest pending event, by the database's clock; 0 when none
	DeadLettered     int64         `json:"dead_lettered"`
}

// BacklogByTenant counts every tenant's pending and dead events among
// those the relay delivers (Config.Relay's Topics / ExcludeTopics and
// Tenants, as Backlog; the whole table without a Relay), in one statement
// grouped by tenant (relay.BacklogByTenant: the undelivered events;
// published history is not read), in tenant order. Tenants with nothing
// undelivered are not listed.
func (a *Admin) BacklogByTenant(ctx context.Context) ([]TenantBacklog, error) {
	bs, err := a.r.BacklogByTenant(ctx)
	if err != nil {
		return nil, fmt.Errorf("herald/admin: backlog by tenant: %w", err)
	}
	out := make([]TenantBacklog, len(bs))
	for i, b := range bs {
		out[i] = TenantBacklog{Tenant: b.Tenant, Pending: b.Pending, OldestPendingAge: b.OldestPendingAge, DeadLettered: b.DeadLettered}
	}
	return out, nil
}

// PausedTopic is a topic the relays do not lease.
type PausedTopic struct {
	Topic    string    `json:"topic"`
	PausedAt time.Time `json:"paused_at"`
	Reason   string    `json:"reason,omitempty"`
}

func checkTopic(where, topic string) error {
	switch {
	case topic == "":
		return outbox.Validationf(where, "empty topic")
	case !utf8.ValidString(topic) || strings.IndexByte(topic, 0) >= 0:
		return outbox.Validationf(where, "%q is not valid UTF-8 without NUL bytes", topic)
	case utf8.RuneCountInString(topic) > envelope.MaxTopicLength:
		return outbox.Validationf(where, "longer than %d characters", envelope.MaxTopicLength)
	}
	return nil
}

// Pause stops every relay of the table from leasing events of topic (an
// exact name, not a pattern) from its next poll on: they wait, in order,
// neither delivered nor dead-lettered, and the events of their ordering
// keys in other topics wait behind them. Events a relay holds when the
// pause commits are still delivered. Pausing a paused topic keeps its
// first pause. It is recorded in the table of paused topics, so it holds
// for every relay and outlives restarts, and it is logged.
func (a *Admin) Pause(ctx context.Context, topic, reason string) error {
	if err := checkTopic("admin.Pause.topic", topic); err != nil {
		return err
	}
	s := &sqlArgs{d: a.d}
	at := "now()" // SQLite: the process's clock, as the relay's
	switch a.d {
	case envelope.SQLite:
		at = s.add(outbox.TimeArg(a.d, a.sqlNow()))
	case envelope.MySQL:
		at = "UTC_TIMESTAMP(6)"
	}
	keep := ` ON CONFLICT (topic) DO NOTHING`
	if a.d == envelope.MySQL {
		keep = ` ON DUPLICATE KEY UPDATE topic = topic`
	}
	stmt := `INSERT INTO ` + a.paused + ` (topic, reason, paused_at) VALUES (` + s.add(topic) + `, ` + s.add(reason) + `, ` + at + `)` + keep
	if _, err := a.db.ExecContext(ctx, stmt, s.args...); err != nil {
		return fmt.Errorf("herald/admin: pause %q: %w", topic, err)
	}
	a.log.InfoContext(ctx, "herald/admin: paused topic", slog.String("table", a.t.Name), slog.String("topic", topic), slog.String("reason", reason))
	return nil
}

// Resume lets the relays lease topic's events again, at their next poll.
// It reports whether the topic was paused.
func (a *Admin) Resume(ctx context.Context, topic string) (bool, error) {
	if err := checkTopic("admin.Resume.topic", topic); err != nil {
		return false, err
	}
	s := &sqlArgs{d: a.d}
	res, err := a.db.ExecContext(ctx, `DELETE FROM `+a.paused+` WHERE topic = `+s.add(topic), s.args...)
	if err != nil {
		return false, fmt.Errorf("herald/admin: resume %q: %w", topic, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("herald/admin: resume %q: %w", topic, err)
	}
	a.log.InfoContext(ctx, "herald/admin: resumed topic", slog.String("table", a.t.Name), slog.String("topic", topic), slog.Bool("was_paused", n > 0))
	return n > 0, nil
}

// Paused lists the paused topics, by name.
func (a *Admin) Paused(ctx context.Context) ([]PausedTopic, error) {
	rows, err := a.db.QueryContext(ctx, `SELECT topic, paused_at, reason FROM `+a.paused+` ORDER BY topic`)
	if err != nil {
		return nil, fmt.Errorf("herald/admin: paused topics: %w", err)
	}
	defer rows.Close()
	out := []PausedTopic{}
	for rows.Next() {
		var p PausedTopic
		var at sqltime.NullTime
		if err := rows.Scan(&p.Topic, &at, &p.Reason); err != nil {
			return nil, fmt.Errorf("herald/admin: paused topics: %w", err)
		}
		p.PausedAt = at.Time
		out = append(out, p)
	}
	return out, rows.Err()
}
