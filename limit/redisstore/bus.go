package redisstore

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// The gateway instances that share a store also share announcements,
// versioned sets, control messages and the windows of fleet breakers, on
// the fleet bus (floodgate's internal/fleetbus). The bus rides on the
// store: its connection, its prefix, its timeout and its life, so that a
// gateway opens one set of connections to Redis and a reload that keeps
// the store keeps the bus. The methods below are what it takes; a limiter
// has no use for them.

// Client returns the store's Redis client, or the error every call fails
// with until the store is connected, and after Close: it wraps
// limit.ErrStoreUnavailable and names op. It is for the fleet bus.
func (s *Store) Client(op string) (rueidis.Client, error) { return s.get(op) }

// Prefix starts every key and channel of the store (Options.Prefix, or
// DefaultPrefix). It is for the fleet bus.
func (s *Store) Prefix() string { return s.prefix }

// Timeout is the budget of one call (Options.Timeout, or DefaultTimeout).
// It is for the fleet bus.
func (s *Store) Timeout() time.Duration { return s.timeout }

// Go runs f on a goroutine of the store's, with a context that ends when
// the store closes; Close waits for f to return. A closed store runs
// nothing and returns an error that wraps limit.ErrStoreUnavailable and
// names op. It is for the fleet bus, whose subscriptions last as long as
// the store.
func (s *Store) Go(op string, f func(life context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return &unavailableError{op: op, cause: errClosed}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.life)
	}()
	return nil
}
