package envelope

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Dialect names the SQL dialect of the database that holds the outbox table.
type Dialect string

// The dialects herald speaks.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
	// MySQL is MySQL 8.0+ and MariaDB 10.6+, one code path for both
	// (README, "MySQL and MariaDB").
	MySQL Dialect = "mysql"
)

// Validate reports whether d is a dialect herald supports.
func (d Dialect) Validate() error {
	switch d {
	case Postgres, SQLite, MySQL:
		return nil
	}
	return &Error{Kind: ErrUnsupported, Where: "Dialect", Msg: "unknown dialect " + quote(string(d)) + ` (want "postgres", "sqlite" or "mysql")`}
}

// DefaultTable is the outbox table's name when none is given.
const DefaultTable = "herald_outbox"

// MaxTopicLength and MaxKeyLength bound the topic, ordering key and
// idempotency key columns, in characters.
const (
	MaxTopicLength = 255
	MaxKeyLength   = 255
)

// Event is one outbox row, as the relay and deliveries see it.
type Event struct {
	Sequence       int64           // assigned by the database: the delivery order
	ID             uuid.UUID       // UUID v7; receivers de-duplicate on it
	Topic          string          // deliveries route on it
	Payload        json.RawMessage // the JSON payload
	Headers        map[string]string
	OrderingKey    string // "" = unordered
	IdempotencyKey string // "" = none
	CreatedAt      time.Time
	Attempts       int    // failed deliveries so far
	LastError      string // the last delivery error
	NextAttemptAt  *time.Time
	LeaseUntil     *time.Time
	PublishedAt    *time.Time
	DeadLetteredAt *time.Time
	LeasedBy       string
	Tenant         string         // the tenant column (schema version 6); "" = none
	Extra          map[string]any // extra columns the relay was told to load
}

// Operation is what happened to a captured row.
type Operation string

// The captured operations.
const (
	Inserted Operation = "inserted"
	Updated  Operation = "updated"
	Deleted  Operation = "deleted"
)

// AllOperations lists every Operation, in the default capture order.
var AllOperations = []Operation{Inserted, Updated, Deleted}

func (op Operation) valid() bool { return op == Inserted || op == Updated || op == Deleted }

// PayloadMode says how much of its row a captured change's event holds.
type PayloadMode int

const (
	// After (the zero value) holds the row as the write left it; for a
	// delete, "before": the row as it was.
	After PayloadMode = iota
	// Keys holds only the primary key.
	Keys
	// BeforeAndAfter holds both images: "before" is null on insert and
	// "after" is null on delete.
	BeforeAndAfter
)

func (m PayloadMode) String() string {
	switch m {
	case After:
		return "After"
	case Keys:
		return "Keys"
	case BeforeAndAfter:
		return "BeforeAndAfter"
	}
	return "PayloadMode(" + itoa(int64(m)) + ")"
}

// Message is an event a caller enqueues.
type Message struct {
	Topic string // required, at most 255 characters
	// Payload is encoded with jsonform in strict mode: as encoding/json
	// would, except where it has no one answer — []byte is base64
	// (standard, padded), time.Duration is seconds (1500ms is 1.5), a map
	// whose keys have no string form (map[int]T) is a list of [key, value]
	// pairs sorted by the key's JSON, decimals are strings keeping their
	// scale ("12.50"), and NaN, ±Inf and values without a JSON form
	// (channels, functions, complex numbers) are ErrValidation errors
	// naming their path. A json.RawMessage or json.Marshaler is embedded.
	Payload        any
	IdempotencyKey string // "" = none; at most one event per key
	OrderingKey    string // "" = unordered; events of one key are delivered in order
	// Headers go with the event to its transport; names must be non-empty.
	// Values are strings, not any JSON value: every transport carries
	// header values as text (Kafka record headers, NATS and HTTP headers,
	// Redis stream fields; only AMQP's header table is typed), so a typed
	// value would be flattened to text on the way anyway. Put structured
	// data in the payload.
	Headers map[string]string
	// Tenant goes into the outbox's tenant column (schema version 6; ""
	// = none, at most 255 characters): idempotency keys are unique per
	// tenant, a relay or Backlog can be limited to tenants, and the
	// relay's Event.Tenant and every transport's herald-tenant header
	// carry it. A captured change's event has its model's Options.Tenant
	// value.
	Tenant    string
	Extra     map[string]any // values for the service's own extra outbox columns
	DeliverAt time.Time      // zero = now; otherwise not before it (years 1 to 9999)
}

// Change is one captured row change, as given to Extend, TopicFunc and
// OrderingKeyFunc.
type Change struct {
	Model      string // the model label: "library.Loan", or "Loan" without a namespace
	Table      string
	Operation  Operation
	PK         any      // the key value, or map[string]any for a composite key
	Changed    []string // columns the caller set; nil when unknown, and for insert/delete
	Before     map[string]any
	After      map[string]any // column name -> value; nil when absent
	OccurredAt time.Time
	// Tenant is the value of the model's Options.Tenant column in the row
	// (nil when the model names none, or the row holds NULL).
	Tenant any
}

// Extension is what Extend adds to a change's event.
type Extension struct {
	Payload map[string]any    // keys added to the envelope; not its own keys
	Headers map[string]string // event headers
	Extra   map[string]any    // extra outbox columns
}

// Options is what a captured model declares. The zero value captures every
// operation in After mode with the default topic and ordering key.
type Options struct {
	// Operations to capture; nil = all three. An empty non-nil list is a
	// configuration error.
	Operations []Operation
	// Payload is what the event holds of its row; the zero value is After.
	Payload PayloadMode
	// Fields lists the columns the event holds; nil = every column but the
	// sensitive ones. A sensitive column is included only when named here.
	Fields []string
	// Exclude removes columns from the default set; not together with Fields.
	Exclude []string
	// Topic is a template: each name in braces is replaced by its value —
	// {namespace}, {model} (the model's name in snake_case: loan_item),
	// {label} (the envelope's model label: library.LoanItem), {table},
	// {operation} (inserted, updated, deleted) and {pk} (the primary key,
	// composite parts joined by ':'). "" = DefaultTopic,
	// "{namespace}.{model}.{operation}"; an empty namespace drops the dot
	// after it.
	Topic string
	// TopicFunc computes the topic instead of Topic; not together with it.
	TopicFunc func(Change) string
	// OrderingKey is a template, with the names of Topic; "" =
	// DefaultOrderingKey, "{label}:{pk}", the row's own key.
	OrderingKey string
	// OrderingKeyFunc computes the key instead of OrderingKey.
	OrderingKeyFunc func(Change) string
	// Unordered writes events without an ordering key.
	Unordered bool
	// Namespace fills {namespace} and prefixes the model label; "" = the
	// plugin's default namespace.
	Namespace string
	// Extend is called once per change inside the write's transaction.
	Extend func(ctx context.Context, c Change) (*Extension, error)
	// ExtendMany is called once per statement per model with all its
	// changes, and returns one extension (or nil) per change; not together
	// with Extend.
	ExtendMany func(ctx context.Context, cs []Change) ([]*Extension, error)
	// Tenant names the model's tenant column ("" = none). Its value in the
	// row (after the write; before it for a delete) is the change's
	// Change.Tenant, the envelope's "tenant" key, and the event's
	// Message.Tenant: the outbox's tenant column (schema version 6), by
	// which idempotency keys are unique and relays and Backlog filter. A
	// column the table does not have is an ErrConfiguration at start-up;
	// the column is always read, so it is not with Payload Keys (which
	// reads no row), nor listed in Exclude. NULL is no tenant.
	Tenant string
}
