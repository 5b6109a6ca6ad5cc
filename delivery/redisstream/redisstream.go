package redisstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// The fields of a stream entry.
const (
	FieldID          = "id"           // the event id, what consumers de-duplicate on
	FieldTopic       = "topic"        // the event's topic
	FieldSequence    = "sequence"     // the event's sequence in decimal: a key's events are in this order
	FieldOrderingKey = "ordering_key" // "" for an unordered event
	FieldHeaders     = "headers"      // JSON object: the event's headers plus herald-event-id, herald-topic, herald-sequence, herald-ordering-key
	FieldPayload     = "payload"      // the JSON payload, as stored
)

// Config configures a Delivery. Exactly one of URL and Client is set.
type Config struct {
	// URL is the Redis URL of a client the delivery builds and owns
	// ("redis://user:pass@host:6379/0", "rediss://…" for TLS). nil = use
	// Client.
	URL string
	// Client is a ready client (a *redis.Client, *redis.ClusterClient…);
	// the delivery never closes it. Build it with ContextTimeoutEnabled:
	// without it go-redis ignores the context's deadline, and a batch runs
	// past the relay's DeliveryTimeout for as long as the client's own
	// ReadTimeout and retries last. A client built from URL has it.
	Client redis.UniversalClient

	// Stream is the stream of every event; "" = StreamFunc's answer.
	Stream string
	// StreamFunc maps an event to its stream; nil = delivery.ByAggregate,
	// the topic less its operation: a captured row's events
	// ("shop.order.inserted", "shop.order.updated") share the stream
	// "shop.order" and arrive there in sequence order. Give the same
	// answer for every event of one ordering key, or a consumer loses
	// their order; delivery.ByTopic is a stream per topic. Not together
	// with Stream. An event it maps to "" fails at once, dead-lettered
	// (ErrDelivery, ErrPermanent).
	StreamFunc func(e *envelope.Event) string

	// MaxLen trims each stream to about this many entries (XADD MAXLEN ~,
	// which Redis applies when it can drop a whole node: cheap, and never
	// below MaxLen); 0 = no trimming.
	MaxLen int64
}

// Delivery appends events to Redis streams with XADD. It is a
// delivery.BatchDelivery: a relay's batch goes in one pipeline, and each
// entry's result is mapped back to its event.
type Delivery struct {
	rdb        redis.UniversalClient
	own        bool
	stream     string
	streamFunc func(*envelope.Event) string
	maxLen     int64
	closeOnce  sync.Once
	closeErr   error
}

var _ delivery.BatchDelivery = (*Delivery)(nil)

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("redisstream.Config."+field, format, args...)
}

// New checks cfg and returns a Delivery; with URL it builds a client
// (which connects on first use).
func New(cfg Config) (*Delivery, error) {
	switch {
	case cfg.URL == "" && cfg.Client == nil:
		return nil, cfgErr("URL", "neither URL nor Client is set; give a Redis URL or a ready client")
	case cfg.URL != "" && cfg.Client != nil:
		return nil, cfgErr("Client", "set together with URL; give one of them")
	case cfg.Stream != "" && cfg.StreamFunc != nil:
		return nil, cfgErr("StreamFunc", "set together with Stream; give one of them")
	case cfg.MaxLen < 0:
		return nil, cfgErr("MaxLen", "negative (%d); 0 means no trimming", cfg.MaxLen)
	}
	d := &Delivery{rdb: cfg.Client, stream: cfg.Stream, streamFunc: cfg.StreamFunc, maxLen: cfg.MaxLen}
	if d.streamFunc == nil {
		d.streamFunc = delivery.ByAggregate
	}
	if d.rdb == nil {
		opt, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, cfgErr("URL", "%v", err)
		}
		// Without it go-redis bounds reads and writes by its own
		// ReadTimeout and WriteTimeout (3 s, and retried) and ignores the
		// context's deadline: a batch would outlive the relay's
		// DeliveryTimeout and a forced stop.
		opt.ContextTimeoutEnabled = true
		d.rdb, d.own = redis.NewClient(opt), true
	}
	return d, nil
}

// Client returns the client the delivery writes with.
func (d *Delivery) Client() redis.UniversalClient { return d.rdb }

// Args returns the XADD arguments of e; the stream is "" when StreamFunc
// maps e to none.
func (d *Delivery) Args(e *envelope.Event) (*redis.XAddArgs, error) {
	stream := d.stream
	if stream == "" {
		stream = d.streamFunc(e)
	}
	hs, err := json.Marshal(delivery.Headers(e))
	if err != nil {
		return nil, fmt.Errorf("herald/redisstream: event %s: headers: %w", e.ID, err)
	}
	a := &redis.XAddArgs{
		Stream: stream,
		ID:     "*",
		Values: []any{
			FieldID, e.ID.String(),
			FieldTopic, e.Topic,
			FieldSequence, strconv.FormatInt(e.Sequence, 10),
			FieldOrderingKey, e.OrderingKey,
			FieldHeaders, hs,
			FieldPayload, delivery.Body(e),
		},
	}
	if d.maxLen > 0 {
		a.MaxLen, a.Approx = d.maxLen, true
	}
	return a, nil
}

// Deliver appends one event.
func (d *Delivery) Deliver(ctx context.Context, e *envelope.Event) error {
	if errs := d.DeliverBatch(ctx, []*envelope.Event{e}); errs != nil {
		return errs[0]
	}
	return nil
}

// DeliverBatch appends every event of es in one pipeline (one round trip)
// and returns one error per event, or nil when all were appended.
func (d *Delivery) DeliverBatch(ctx context.Context, es []*envelope.Event) []error {
	errs := make([]error, len(es))
	cmds := make([]*redis.StringCmd, len(es))
	failed := false
	pipe := d.rdb.Pipeline()
	for i, e := range es {
		a, err := d.Args(e)
		switch {
		case err != nil:
			errs[i] = err
		case a.Stream == "":
			errs[i] = delivery.Permanent(fmt.Errorf("herald/redisstream: event %s (topic %q): StreamFunc gave no stream: %w", e.ID, e.Topic, delivery.ErrDelivery))
		default:
			cmds[i] = pipe.XAdd(ctx, a)
			continue
		}
		failed = true
	}
	var perr error
	if pipe.Len() > 0 {
		// Exec returns the first failed command's error; each command
		// keeps its own, which is what is mapped back. A connection error
		// fails every command. A hook that refuses the pipeline (a
		// circuit breaker, a rate limiter) sets no command's error: only
		// Exec's error says so.
		_, perr = pipe.Exec(ctx)
	}
	for i, c := range cmds {
		if c == nil {
			continue
		}
		err := c.Err()
		if err == nil && c.Val() == "" {
			// No entry id: the command never ran.
			err = perr
			if err == nil {
				err = errors.New("no reply (the pipeline did not run the command)")
			}
		}
		if err != nil {
			errs[i] = fmt.Errorf("herald/redisstream: XADD event %s to stream %q: %w", es[i].ID, c.Args()[1], err)
			failed = true
		}
	}
	if !failed {
		return nil
	}
	return errs
}

// Close closes the client when the delivery built it; a client given in
// Config is left alone. Safe to call twice.
func (d *Delivery) Close() error {
	d.closeOnce.Do(func() {
		if d.own {
			if err := d.rdb.Close(); err != nil {
				d.closeErr = fmt.Errorf("herald/redisstream: close: %w", err)
			}
		}
	})
	return d.closeErr
}
