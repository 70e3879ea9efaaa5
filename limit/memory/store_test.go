package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

func TestMaxKeys(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := memory.New(memory.Options{MaxKeys: 10, SweepEvery: -1})
	defer s.Close()
	r := &limit.Rule{Name: "t:max", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Second}}
	ctx := context.Background()
	decide := func(key string, at time.Time) (limit.Result, error) {
		return s.Decide(ctx, &limit.Request{Limits: []limit.Limit{{Rule: r, Key: limit.StringKey(key)}}, Now: at})
	}
	for i := range 10 {
		if _, err := decide(fmt.Sprint(i), now); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	_, err := decide("new", now)
	if !errors.Is(err, limit.ErrFull) || !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("11th key: %v, want ErrFull (an ErrStoreUnavailable)", err)
	}
	// Keys the store already holds are still decided.
	if res, err := decide("3", now); err != nil || !res.Allowed {
		t.Fatalf("existing key on a full store: %v, %v", res.Allowed, err)
	}
	// A rejected request needs no room: it is judged and stores nothing.
	if res, err := decide("3", now); err != nil || res.Allowed {
		t.Fatalf("existing key over its limit: %v, %v", res.Allowed, err)
	}
	// Once the windows have passed, their room is taken back: ten new keys
	// fit (the room comes from sweeping the new key's own shard, or the
	// whole store when that is not enough), and the store never holds more
	// than its bound.
	later := now.Add(time.Second)
	for i := range 10 {
		if res, err := decide(fmt.Sprint("new", i), later); err != nil || !res.Allowed {
			t.Fatalf("new key %d after the windows ended: %v, %v", i, res.Allowed, err)
		}
		if s.Len() > 10 {
			t.Fatalf("Len = %d, over max_keys 10", s.Len())
		}
	}
	s.Sweep(later)
	if s.Len() != 10 {
		t.Fatalf("Len = %d after a sweep, want the 10 new keys", s.Len())
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := memory.New(memory.Options{SweepEvery: -1})
	defer s.Close()
	short := &limit.Rule{Name: "t:short", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 5, Period: time.Second}}
	long := &limit.Rule{Name: "t:long", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Hour}}
	for i := range 5000 {
		k := limit.StringKey(fmt.Sprint(i))
		if _, err := s.Decide(context.Background(), &limit.Request{Now: now, Limits: []limit.Limit{{Rule: short, Key: k}, {Rule: long, Key: k}}}); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 10000 {
		t.Fatalf("Len = %d, want 10000", s.Len())
	}
	s.Sweep(now.Add(999 * time.Millisecond))
	if s.Len() != 10000 {
		t.Fatalf("Len = %d after a sweep before anything expired", s.Len())
	}
	s.Sweep(now.Add(time.Second))
	if s.Len() != 5000 {
		t.Fatalf("Len = %d after the 1 s windows ended, want the 5000 hour windows", s.Len())
	}
	s.Sweep(now.Add(time.Hour))
	if s.Len() != 0 {
		t.Fatalf("Len = %d after every window ended", s.Len())
	}
}

func TestBackgroundSweep(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{SweepEvery: 10 * time.Millisecond})
	defer s.Close()
	r := &limit.Rule{Name: "t:bg", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 1, Period: 20 * time.Millisecond}}
	if _, err := s.Decide(context.Background(), &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: r, Key: "k"}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background sweep never removed an expired key")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A full store that sweeps the shards of a multi-limit request, between
// judging its limits and committing them, removes an expired key the
// request judged: the key is added again, and needs room like a new one,
// so the store never holds more than its bound.
func TestMaxKeysSweepsALimitItJudged(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	later := now.Add(time.Second) // the short windows have ended
	short := &limit.Rule{Name: "t:short", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Second}}
	long := &limit.Rule{Name: "t:long", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Hour}}
	ctx := context.Background()
	fill := func(max int, ls ...limit.Limit) *memory.Store {
		s := memory.New(memory.Options{MaxKeys: max, SweepEvery: -1})
		t.Cleanup(func() { s.Close() })
		for i, l := range ls {
			if res, err := s.Decide(ctx, &limit.Request{Now: now, Limits: []limit.Limit{l}}); err != nil || !res.Allowed {
				t.Fatalf("key %d: %v, %v", i, res.Allowed, err)
			}
		}
		return s
	}
	// "a" is held but expired; the request needs it and a new key, "d":
	// four keys with "b" and "c", on a store of three.
	s := fill(3, limit.Limit{Rule: short, Key: "a"}, limit.Limit{Rule: long, Key: "b"}, limit.Limit{Rule: long, Key: "c"})
	req := []limit.Limit{{Rule: short, Key: "a"}, {Rule: short, Key: "d"}}
	if _, err := s.Decide(ctx, &limit.Request{Now: later, Limits: req}); !errors.Is(err, limit.ErrFull) {
		t.Fatalf("a request of two keys beside two live ones, on a store of three: %v, want ErrFull", err)
	}
	if s.Len() > 3 {
		t.Fatalf("Len = %d, over max_keys 3", s.Len())
	}
	// With room for four, and an expired "x" that only the whole store's
	// sweep finds (unless it shares a shard with "a" or "d"), it fits.
	s = fill(4, limit.Limit{Rule: short, Key: "a"}, limit.Limit{Rule: long, Key: "b"}, limit.Limit{Rule: long, Key: "c"}, limit.Limit{Rule: short, Key: "x"})
	into := make([]limit.Decision, 2)
	res, err := s.Decide(ctx, &limit.Request{Now: later, Into: into, Limits: req})
	if err != nil || !res.Allowed {
		t.Fatalf("a request that fits once the expired keys are swept: %v, %v", res.Allowed, err)
	}
	if &res.Decisions[0] != &into[0] {
		t.Fatal("the decisions are not in the request's array")
	}
	for i, d := range res.Decisions {
		if d.Remaining != 1 {
			t.Fatalf("decision %d: remaining %d, want 1 (a fresh window)", i, d.Remaining)
		}
	}
	if s.Len() != 4 {
		t.Fatalf("Len = %d, want 4: b, c, a and d", s.Len())
	}
}
