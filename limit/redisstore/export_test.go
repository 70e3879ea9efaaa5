package redisstore

import (
	"context"
	"time"
)

// SetOffset moves the store's clock: the scripts add d to Redis TIME.
// A clock that jumps ends what the store knew of exhausted keys.
func (s *Store) SetOffset(d time.Duration) {
	s.offset.Store(d.Microseconds())
	if s.local != nil {
		s.local.ForgetAll()
	}
}

// Offset is the store's clock offset.
func (s *Store) Offset() time.Duration { return time.Duration(s.offset.Load()) * time.Microsecond }

// RedisTime reads Redis's own clock, without the offset.
func (s *Store) RedisTime(ctx context.Context) (time.Time, error) {
	c, err := s.get("time")
	if err != nil {
		return time.Time{}, err
	}
	v, err := c.Do(ctx, c.B().Time().Build()).AsIntSlice()
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(v[0], v[1]*1000), nil
}

// Now is the store's clock: Redis TIME plus the offset.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	t, err := s.RedisTime(ctx)
	return t.Add(s.Offset()), err
}

// SetNow puts the store's clock at t.
func (s *Store) SetNow(ctx context.Context, t time.Time) error {
	rt, err := s.RedisTime(ctx)
	if err != nil {
		return err
	}
	s.SetOffset(t.Sub(rt))
	return nil
}
