package fleetbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// A gateway steers the other instances that share its store (a breaker
// forced for the fleet, a reset they should log) by messages whose meaning
// is its own: the bus only carries them, on the channel PREFIX + kind.
// Every bus of a store with the same prefix on the same Redis receives
// every message, its own publisher's included. Messages are not kept: a
// bus that is not subscribed when one is published (Redis restarted, the
// connection broke) never receives it.

// ErrKind is returned for a kind that cannot name a channel.
var ErrKind = errors.New("redisstore: bad message kind")

func checkKind(kind string) error {
	if kind == "" || kind == "forget" || len(kind) > 64 {
		// "forget" is the store's own channel (redisstore's forget.go).
		return fmt.Errorf("%w %q: want 1 to 64 bytes, not \"forget\"", ErrKind, kind)
	}
	return nil
}

// Publish sends msg to every bus subscribed to kind under its store's
// prefix. It fails with an error wrapping limit.ErrStoreUnavailable when
// Redis did not take the message, which then reached no one, or, wrapping
// ErrUnknown too, when the message was sent and its answer did not come:
// it may reach every bus yet.
func (b *Bus) Publish(ctx context.Context, kind string, msg []byte) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	c, err := b.conn.Client("publish")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, max(b.timeout, changeTimeout))
	defer cancel()
	err = c.Do(ctx, c.B().Publish().Channel(b.prefix+kind).Message(rueidis.BinaryString(msg)).Build()).Error()
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
func (b *Bus) Subscribe(kind string, f func(msg []byte)) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	return b.conn.Go("subscribe", func(life context.Context) { b.receive(life, b.prefix+kind, f) })
}

func (b *Bus) receive(life context.Context, ch string, f func([]byte)) {
	backoff := minBackoff
	for life.Err() == nil {
		if c, err := b.conn.Client("subscribe"); err == nil {
			start := time.Now()
			c.Receive(life, c.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) {
				f([]byte(m.Message))
			})
			if time.Since(start) > 10*time.Second {
				backoff = minBackoff // it was subscribed: a fresh failure
			}
		}
		select {
		case <-life.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
