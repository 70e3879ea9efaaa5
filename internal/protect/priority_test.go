package protect

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls f: what other goroutines do in their own time is waited
// for, never slept on.
func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !f(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still waiting after 10 s")
		}
	}
}

// When room comes, the waiting requests of the higher level are admitted
// first; a lower level gets none while one of a higher level waits, and
// is turned away when its wait ends.
func TestLevelsHigherFirst(t *testing.T) {
	now := time.Now()
	g := NewGate(1e-6, time.Second, now) // nothing fits: a request a day
	l := NewLevels(g, 2, 6*24*time.Hour) // six may wait at each level
	g.tat.Store(g.At(now) + int64(24*time.Hour))
	lowCtx, cancelLow := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var low, high atomic.Int64
	for range 5 {
		wg.Go(func() {
			if _, ok := l.Admit(lowCtx, 1, time.Now()); ok {
				low.Add(1)
			}
		})
	}
	waitFor(t, func() bool { return l.Waiting() == 5 })
	if l.Room(0, g.At(time.Now())) != true || l.Room(1, g.At(time.Now())) != true {
		t.Error("Room: both levels may still wait")
	}
	for range 5 {
		wg.Go(func() {
			if _, ok := l.Admit(context.Background(), 0, time.Now()); ok {
				high.Add(1)
			}
		})
	}
	waitFor(t, func() bool { return l.Waiting() == 10 })
	if l.Room(1, g.At(time.Now())) {
		t.Error("Room says a low request may wait while high ones wait")
	}
	// Room for five: 250 ms apart within a burst of a second.
	l.mu.Lock()
	g.setLimit(4, g.At(time.Now()))
	g.tat.Store(g.At(time.Now()))
	l.mu.Unlock()
	l.dispatch()
	l.mu.Lock()
	l.timer.Stop() // no more room comes
	l.mu.Unlock()
	waitFor(t, func() bool { return high.Load() == 5 })
	cancelLow()
	wg.Wait()
	if low.Load() != 0 {
		t.Errorf("%d low requests admitted while high ones waited for the same room", low.Load())
	}
	if l.Refused(1) != 6 || l.Refused(0) != 0 { // 5 that waited, 1 that Room turned away
		t.Errorf("refused: high %d, low %d; want 0 and 6", l.Refused(0), l.Refused(1))
	}
	if l.Waiting() != 0 {
		t.Errorf("%d still waiting", l.Waiting())
	}
}

// A request that finds room is admitted at once; past what the gate
// admits in MaxWait, a level's queue turns requests away at once.
func TestLevelsQueueBound(t *testing.T) {
	now := time.Now()
	g := NewGate(10, 100*time.Millisecond, now) // 100 ms apart
	l := NewLevels(g, 2, 300*time.Millisecond)  // 3 + 1 may wait
	if _, ok := l.Admit(context.Background(), 1, now); !ok {
		t.Fatal("the first request, with room, was not admitted")
	}
	g.tat.Store(g.At(now) + int64(time.Hour)) // no room from now on
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { l.Admit(ctx, 1, time.Now()) })
	}
	waitFor(t, func() bool { return l.Waiting() == 4 })
	if _, ok := l.Admit(ctx, 1, time.Now()); ok || l.Refused(1) != 1 {
		t.Errorf("a fifth request: admitted %v, refused %d; want turned away at once", ok, l.Refused(1))
	}
	cancel()
	wg.Wait()
}
