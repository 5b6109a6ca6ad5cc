// Package redisinbox consumes herald's Redis stream entries (the
// delivery/redisstream format) through an inbox: each entry is handled
// once per consumer, and XACKed only after its id committed, so an entry
// whose consumer died is read again and found a Duplicate. It also has
// Cache, an inbox.Cache on Redis.
package redisinbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/outbox"
)

// Defaults of Config's zero fields.
const (
	DefaultCount     = 100
	DefaultBlock     = time.Second
	DefaultClaimIdle = time.Minute
)

// Message is a stream entry of herald's, decoded.
type Message struct {
	Stream      string
	Entry       redis.XMessage
	ID          string // the id field: the event id
	Topic       string
	OrderingKey string
	Sequence    int64
	Headers     map[string]string
	Payload     []byte
}

// Config configures a Consumer.
type Config struct {
	// Client is the Redis client; required, never closed by the Consumer.
	Client redis.UniversalClient
	// Stream is the stream to read; required.
	Stream string
	// Group is the consumer group, created at the stream's start when
	// missing; required.
	Group string
	// Name is this process's consumer name in the group; "" = the host
	// name. Keep it stable across restarts: a restarted consumer reads
	// its own pending entries first.
	Name string
	// Handler is run for each entry; exactly one of its fields is set.
	Handler inbox.Handler[Message]
	// ExtractID gives an entry's inbox message; nil = the entry's id,
	// ordering_key and sequence fields.
	ExtractID func(Message) (inbox.Message, error)
	// Count is the most entries one XREADGROUP returns; 0 = DefaultCount.
	Count int64
	// Block is how long one XREADGROUP waits; 0 = DefaultBlock.
	Block time.Duration
	// ClaimIdle: entries pending for another consumer of the group longer
	// than this (a consumer that died) are claimed (XAUTOCLAIM) and
	// handled; 0 = DefaultClaimIdle.
	ClaimIdle time.Duration
	// Logger gets failures; nil = slog.Default().
	Logger *slog.Logger
}

// Consumer reads a stream through an inbox.
type Consumer struct {
	in  *inbox.Inbox
	cfg Config
}

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("redisinbox.Config."+field, format, args...)
}

// New returns a Consumer of cfg.Stream for in.
func New(in *inbox.Inbox, cfg Config) (*Consumer, error) {
	switch {
	case in == nil:
		return nil, cfgErr("inbox", "nil *inbox.Inbox")
	case cfg.Client == nil:
		return nil, cfgErr("Client", "nil")
	case cfg.Stream == "":
		return nil, cfgErr("Stream", "empty")
	case cfg.Group == "":
		return nil, cfgErr("Group", "empty")
	case cfg.Count < 0 || cfg.Block < 0 || cfg.ClaimIdle < 0:
		return nil, cfgErr("Count", "Count, Block and ClaimIdle must not be negative")
	}
	if err := cfg.Handler.Validate("redisinbox.Config.Handler"); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "redisinbox"
		}
		cfg.Name = h
	}
	if cfg.ExtractID == nil {
		cfg.ExtractID = func(m Message) (inbox.Message, error) {
			if m.ID == "" {
				return inbox.Message{}, outbox.Validationf("redis entry "+m.Entry.ID, "no id field: not a herald entry")
			}
			return inbox.Message{ID: m.ID, OrderingKey: m.OrderingKey, Sequence: m.Sequence}, nil
		}
	}
	if cfg.Count == 0 {
		cfg.Count = DefaultCount
	}
	if cfg.Block == 0 {
		cfg.Block = DefaultBlock
	}
	if cfg.ClaimIdle == 0 {
		cfg.ClaimIdle = DefaultClaimIdle
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Consumer{in: in, cfg: cfg}, nil
}

// Decode reads herald's fields of an entry.
func Decode(stream string, e redis.XMessage) Message {
	s := func(k string) string { v, _ := e.Values[k].(string); return v }
	m := Message{Stream: stream, Entry: e, ID: s("id"), Topic: s("topic"), OrderingKey: s("ordering_key"), Payload: []byte(s("payload"))}
	m.Sequence, _ = strconv.ParseInt(s("sequence"), 10, 64)
	_ = json.Unmarshal([]byte(s("headers")), &m.Headers)
	return m
}

// Run consumes until ctx ends (then it returns nil) or Redis fails in a
// way other than a timeout. It reads this consumer's pending entries
// first (those a crash left unacknowledged), then new ones, and every
// ClaimIdle takes over entries another consumer left pending that long.
func (c *Consumer) Run(ctx context.Context) error {
	err := c.cfg.Client.XGroupCreateMkStream(ctx, c.cfg.Stream, c.cfg.Group, "0").Err()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // ctx ended while the group was being created: a stop, not a failure
		}
		return fmt.Errorf("herald/redisinbox: create group %s: %w", c.cfg.Group, err)
	}
	pending := true // first our own pending entries, from "0"
	lastClaim := time.Now()
	for ctx.Err() == nil {
		if time.Since(lastClaim) >= c.cfg.ClaimIdle {
			lastClaim = time.Now()
			msgs, _, err := c.cfg.Client.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: c.cfg.Stream, Group: c.cfg.Group,
				Consumer: c.cfg.Name, MinIdle: c.cfg.ClaimIdle, Start: "0", Count: c.cfg.Count}).Result()
			if err == nil && len(msgs) > 0 {
				pending = true
				c.handle(ctx, msgs)
			}
		}
		from := ">"
		if pending {
			from = "0"
		}
		res, err := c.cfg.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: c.cfg.Group, Consumer: c.cfg.Name,
			Streams: []string{c.cfg.Stream, from}, Count: c.cfg.Count, Block: c.cfg.Block}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the read failed because Run's ctx ended: a stop, not a failure
			}
			return fmt.Errorf("herald/redisinbox: read %s: %w", c.cfg.Stream, err)
		}
		var msgs []redis.XMessage
		for _, s := range res {
			msgs = append(msgs, s.Messages...)
		}
		if pending && len(msgs) == 0 {
			pending = false
			continue
		}
		if !c.handle(ctx, msgs) {
			// A failed entry stays pending: read the pending ones again
			// after a pause instead of spinning on it.
			pending = true
			select {
			case <-ctx.Done():
			case <-time.After(c.cfg.Block):
			}
		}
	}
	return nil
}

// handle runs each entry and XACKs it after its commit; false when one
// failed (it stays pending).
func (c *Consumer) handle(ctx context.Context, msgs []redis.XMessage) bool {
	ok := true
	for _, e := range msgs {
		m := Decode(c.cfg.Stream, e)
		id, err := c.cfg.ExtractID(m)
		if err == nil {
			_, err = c.cfg.Handler.Run(ctx, c.in, id, m)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Logger.ErrorContext(ctx, "herald/redisinbox: handling an entry failed; it stays pending", "stream", c.cfg.Stream, "entry", e.ID, "error", err)
			}
			ok = false
			continue
		}
		if err := c.cfg.Client.XAck(context.WithoutCancel(ctx), c.cfg.Stream, c.cfg.Group, e.ID).Err(); err != nil {
			// The id is committed: the entry, read again, is a Duplicate.
			c.cfg.Logger.WarnContext(ctx, "herald/redisinbox: XACK failed", "stream", c.cfg.Stream, "entry", e.ID, "error", err)
		}
	}
	return ok
}

// Cache is an inbox.Cache on Redis: one key per id (Prefix + the inbox's
// key), SET with the cache TTL.
type Cache struct {
	Client redis.UniversalClient
	Prefix string // "" = "herald:inbox:"
}

func (c Cache) key(k string) string {
	if c.Prefix == "" {
		return "herald:inbox:" + k
	}
	return c.Prefix + k
}

// Contains implements inbox.Cache.
func (c Cache) Contains(ctx context.Context, key string) (bool, error) {
	n, err := c.Client.Exists(ctx, c.key(key)).Result()
	return n > 0, err
}

// Add implements inbox.Cache.
func (c Cache) Add(ctx context.Context, key string, ttl time.Duration) error {
	return c.Client.Set(ctx, c.key(key), 1, ttl).Err()
}
