package inbox

import (
	"context"
	"sync"
	"time"
)

// Cache remembers processed ids in front of the database. Its answers are
// hints: a hit skips the database (the message is a Duplicate), a miss or
// an error asks the database. The inbox writes an id only after its
// transaction commits, so a cache that is stale, flushed or down never
// makes a message run twice; redisinbox.Cache is one on Redis.
type Cache interface {
	// Contains reports whether key was added and has not expired.
	Contains(ctx context.Context, key string) (bool, error)
	// Add remembers key for ttl.
	Add(ctx context.Context, key string, ttl time.Duration) error
}

// MemoryCache is an in-process Cache holding at most Max keys (0 =
// 100,000); when full, expired keys are dropped, then the whole map if
// none were. The zero value is ready to use.
type MemoryCache struct {
	Max int

	mu sync.Mutex
	m  map[string]time.Time
}

// Contains implements Cache.
func (c *MemoryCache) Contains(_ context.Context, key string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.m[key]
	return ok && time.Now().Before(exp), nil
}

// Add implements Cache.
func (c *MemoryCache) Add(_ context.Context, key string, ttl time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := c.Max
	if limit <= 0 {
		limit = 100_000
	}
	if c.m == nil {
		c.m = map[string]time.Time{}
	}
	if len(c.m) >= limit {
		now := time.Now()
		for k, exp := range c.m {
			if !now.Before(exp) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= limit {
			clear(c.m)
		}
	}
	c.m[key] = time.Now().Add(ttl)
	return nil
}

// Flush forgets every key.
func (c *MemoryCache) Flush() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}
