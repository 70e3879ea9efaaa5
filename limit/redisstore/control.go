package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// A gateway steers the other instances that share its store (a breaker
// forced for the fleet, a reset they should log) by messages whose meaning
// is its own: the store only carries them, on the channel PREFIX + kind.
// Every store with the same prefix on the same Redis receives every
// message, its own publisher's included. Messages are not kept: a store
// that is not subscribed when one is published (Redis restarted, the
// connection broke) never receives it.

// ErrKind is returned for a kind that cannot name a channel.
var ErrKind = errors.New("redisstore: bad message kind")

func checkKind(kind string) error {
	if kind == "" || kind == "forget" || len(kind) > 64 {
		// "forget" is the store's own channel (forget.go).
		return fmt.Errorf("%w %q: want 1 to 64 bytes, not \"forget\"", ErrKind, kind)
	}
	return nil
}

// Publish sends msg to every store subscribed to kind under this store's
// prefix. It fails with an error wrapping limit.ErrStoreUnavailable when
// Redis did not take the message, which then reached no one, or, wrapping
// ErrUnknown too, when the message was sent and its answer did not come:
// it may reach every store yet.
func (s *Store) Publish(ctx context.Context, kind string, msg []byte) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	c, err := s.get("publish")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.timeout, changeTimeout))
	defer cancel()
	err = c.Do(ctx, c.B().Publish().Channel(s.prefix+kind).Message(rueidis.BinaryString(msg)).Build()).Error()
	if errors.Is(err, context.DeadlineExceeded) {
		// Sent, and no answer: a Redis that was only slow (or stopped,
		// and continued) delivers it when it runs the command.
		err = fmt.Errorf("%w: %v", ErrUnknown, err)
	}
	return unavailable("publish", err)
}

// Subscribe calls f with every message published on kind until the store
// closes, one at a time, from a goroutine of the store's: f should return
// quickly. While the store cannot reach Redis it keeps trying to
// subscribe again. f receives what anyone with access to the Redis
// server published, and must treat it as hostile.
func (s *Store) Subscribe(kind string, f func(msg []byte)) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return &unavailableError{op: "subscribe", cause: errClosed}
	}
	s.wg.Add(1)
	go s.receive(s.prefix+kind, f)
	return nil
}

func (s *Store) receive(ch string, f func([]byte)) {
	defer s.wg.Done()
	backoff := minBackoff
	for s.life.Err() == nil {
		if c, err := s.get("subscribe"); err == nil {
			start := time.Now()
			c.Receive(s.life, c.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) {
				f([]byte(m.Message))
			})
			if time.Since(start) > 10*time.Second {
				backoff = minBackoff // it was subscribed: a fresh failure
			}
		}
		select {
		case <-s.life.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
