package limit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// flaky is a memory store that fails while down is set, counting calls.
type flaky struct {
	limit.Store
	down  atomic.Bool
	calls atomic.Int64
}

func (f *flaky) Decide(ctx context.Context, req *limit.Request) (limit.Result, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return limit.Result{}, limit.ErrStoreUnavailable
	}
	return f.Store.Decide(ctx, req)
}

func TestGuard(t *testing.T) {
	mem := memory.New(memory.Options{})
	defer mem.Close()
	f := &flaky{Store: mem}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	g := limit.Guard(f, limit.GuardOptions{Failures: 3, Rest: 250 * time.Millisecond, Now: func() time.Time { return now }})
	r := &limit.Rule{Name: "t:g", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1000, Period: time.Second}}
	decide := func() error {
		_, err := g.Decide(context.Background(), &limit.Request{Now: now, Limits: []limit.Limit{{Rule: r, Key: "k"}}})
		return err
	}
	if err := decide(); err != nil {
		t.Fatal(err)
	}
	f.down.Store(true)
	for range 3 {
		if err := decide(); !errors.Is(err, limit.ErrStoreUnavailable) {
			t.Fatalf("err %v", err)
		}
	}
	calls := f.calls.Load()
	for range 100 {
		if err := decide(); !errors.Is(err, limit.ErrStoreTripped) || !errors.Is(err, limit.ErrStoreUnavailable) {
			t.Fatalf("resting guard: %v", err)
		}
	}
	if f.calls.Load() != calls {
		t.Fatalf("a resting guard asked the store %d times", f.calls.Load()-calls)
	}
	now = now.Add(250 * time.Millisecond) // one probe, which fails: rest again
	if err := decide(); errors.Is(err, limit.ErrStoreTripped) {
		t.Fatal("no probe after the rest")
	}
	if err := decide(); !errors.Is(err, limit.ErrStoreTripped) {
		t.Fatalf("after a failed probe: %v", err)
	}
	f.down.Store(false)
	now = now.Add(250 * time.Millisecond)
	if err := decide(); err != nil {
		t.Fatalf("probe of a healthy store: %v", err)
	}
	if err := decide(); err != nil || limit.Tripped(g) {
		t.Fatalf("after a good probe: %v, tripped %v", err, limit.Tripped(g))
	}
}

// localAnswers answers every decision as a store's memory of exhausted
// keys would, without asking anything.
type localAnswers struct{ limit.Store }

func (localAnswers) Decide(_ context.Context, req *limit.Request) (limit.Result, error) {
	return limit.Result{Decisions: []limit.Decision{{Rule: req.Limits[0].Rule, Key: req.Limits[0].Key, Local: true}}}, nil
}

// A probe that the store answers from its memory says nothing of its
// server: the guard stays tripped, and probes again after its rest.
func TestGuardProbeAnsweredLocally(t *testing.T) {
	mem := memory.New(memory.Options{})
	defer mem.Close()
	f := &flaky{Store: mem}
	local := atomic.Bool{}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	store := &switching{a: f, b: localAnswers{mem}, useB: &local}
	g := limit.Guard(store, limit.GuardOptions{Failures: 1, Rest: time.Second, Now: func() time.Time { return now }})
	r := &limit.Rule{Name: "t:g", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1000, Period: time.Second}}
	decide := func() error {
		_, err := g.Decide(context.Background(), &limit.Request{Now: now, Limits: []limit.Limit{{Rule: r, Key: "k"}}})
		return err
	}
	f.down.Store(true)
	if err := decide(); !errors.Is(err, limit.ErrStoreUnavailable) || !limit.Tripped(g) {
		t.Fatalf("err %v, tripped %v", err, limit.Tripped(g))
	}
	now = now.Add(time.Second)
	local.Store(true)
	if err := decide(); err != nil {
		t.Fatalf("the probe answered locally: %v", err)
	}
	if !limit.Tripped(g) {
		t.Fatal("a probe answered from memory closed the guard")
	}
	local.Store(false)
	if err := decide(); err != nil && !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatal(err)
	}
	if f.calls.Load() != 2 {
		t.Fatalf("the server was asked %d times, want 2 (the failure, the next probe)", f.calls.Load())
	}
}

// switching decides with b while useB is set, else with a.
type switching struct {
	a, b limit.Store
	useB *atomic.Bool
}

func (s *switching) Decide(ctx context.Context, req *limit.Request) (limit.Result, error) {
	if s.useB.Load() {
		return s.b.Decide(ctx, req)
	}
	return s.a.Decide(ctx, req)
}
func (s *switching) Peek(ctx context.Context, now time.Time, r *limit.Rule, k limit.Key) (limit.State, error) {
	return s.a.Peek(ctx, now, r, k)
}
func (s *switching) Reset(ctx context.Context, r *limit.Rule, k limit.Key) error {
	return s.a.Reset(ctx, r, k)
}
func (s *switching) Release(ctx context.Context, lease string, ls ...limit.Limit) error {
	return s.a.Release(ctx, lease, ls...)
}
func (s *switching) Renew(ctx context.Context, now time.Time, lease string, ls ...limit.Limit) error {
	return s.a.Renew(ctx, now, lease, ls...)
}
func (s *switching) Close() error { return nil }
