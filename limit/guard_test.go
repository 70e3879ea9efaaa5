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
	if err := decide(); err != nil || g.Tripped() {
		t.Fatalf("after a good probe: %v, tripped %v", err, g.Tripped())
	}
}
