package memory_test

import (
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit/limittest"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// fakeClock is the memory store's clock in the sequence tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func TestConformance(t *testing.T) {
	t.Parallel()
	limittest.Run(t, func(t *testing.T, realTime bool) *limittest.Harness {
		clock := &fakeClock{t: time.Unix(0, 0)}
		now, set := clock.Now, clock.Set
		if realTime {
			now, set = time.Now, func(time.Time) { t.Fatal("Set on a real-time harness") }
		}
		s := memory.New(memory.Options{SweepEvery: -1, Now: now})
		t.Cleanup(func() { s.Close() })
		return &limittest.Harness{
			Store: s,
			Now:   now,
			Set:   set,
			CheckExpiry: func(tb testing.TB) {
				if n := s.Unexpiring(); n > 0 {
					tb.Errorf("%d entries have no expiry", n)
				}
			},
		}
	})
}
