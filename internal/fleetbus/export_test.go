package fleetbus

import (
	"context"
	"time"
)

// SetOffset moves the bus's clock: breaker.lua adds d to Redis TIME.
func (b *Bus) SetOffset(d time.Duration) { b.offset.Store(d.Microseconds()) }

// Offset is the bus's clock offset.
func (b *Bus) Offset() time.Duration { return time.Duration(b.offset.Load()) * time.Microsecond }

// RedisTime reads Redis's own clock, without the offset.
func (b *Bus) RedisTime(ctx context.Context) (time.Time, error) {
	c, err := b.conn.Client("time")
	if err != nil {
		return time.Time{}, err
	}
	v, err := c.Do(ctx, c.B().Time().Build()).AsIntSlice()
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(v[0], v[1]*1000), nil
}

// SetNow puts the bus's clock at t.
func (b *Bus) SetNow(ctx context.Context, t time.Time) error {
	rt, err := b.RedisTime(ctx)
	if err != nil {
		return err
	}
	b.SetOffset(t.Sub(rt))
	return nil
}
